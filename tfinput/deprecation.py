"""Deprecated import paths, kept for one release: a module that became private or moved
still imports under its old name, with a `DeprecationWarning`, and is the module itself
under its new name (``tuners.study.tune is tuners._study.tune``).

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.core.deprecation`."""

from __future__ import annotations

from tfinput._src.core import deprecation as _impl
from tfinput._src.core._public import export as _export
from tfinput._src.core.deprecation import *  # noqa: F403

__all__ = _export(__name__, _impl)
