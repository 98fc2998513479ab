"""SparseCore buffer limits measured from the data.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.sparsecore`."""

from __future__ import annotations

from tfinput._src.applications import sparsecore as _impl
from tfinput._src.applications.sparsecore import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
