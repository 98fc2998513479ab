"""Synthetic Criteo-like data in a few lines, for tests, examples and benchmarks.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.testing`."""

from __future__ import annotations

from tfinput._src.applications import testing as _impl
from tfinput._src.applications.testing import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
