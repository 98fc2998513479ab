"""Reading a pipeline through tf.data service: where the service is, and a local fleet of
worker processes for measuring how many workers a host needs.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.fleet`."""

from __future__ import annotations

from tfinput._src.applications import fleet as _impl
from tfinput._src.applications.fleet import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
