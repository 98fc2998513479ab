"""TPU embedding glue: `TableConfig` / `FeatureConfig` from a schema, and where to
place each table.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.tpu`."""

from __future__ import annotations

from tfinput._src.applications import tpu as _impl
from tfinput._src.applications.tpu import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
