"""The exceptions tfinput raises for bad input.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.core.errors`."""

from __future__ import annotations

from tfinput._src.core import errors as _impl
from tfinput._src.core._public import export as _export
from tfinput._src.core.errors import *  # noqa: F403

__all__ = _export(__name__, _impl)
