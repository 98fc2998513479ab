"""Serve a model from raw requests with exactly the transforms it was trained with.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.serving`."""

from __future__ import annotations

from tfinput._src.applications import serving as _impl
from tfinput._src.applications.serving import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
