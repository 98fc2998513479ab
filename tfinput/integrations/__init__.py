"""Integrations with other libraries: `tfinput.integrations.sparsecore_feed` (docs/api.md).
Implemented in `tfinput._src.applications.integrations`."""
