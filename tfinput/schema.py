"""The feature schema: what each column is and how it becomes a fixed-shape tensor.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.core.schema`."""

from __future__ import annotations

from tfinput._src.core import schema as _impl
from tfinput._src.core._public import export as _export
from tfinput._src.core.schema import *  # noqa: F403

__all__ = _export(__name__, _impl)
