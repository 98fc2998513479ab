"""Options objects: small frozen dataclasses, and their flat keywords.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.core.options`."""

from __future__ import annotations

from tfinput._src.core import options as _impl
from tfinput._src.core._public import export as _export
from tfinput._src.core.options import *  # noqa: F403

__all__ = _export(__name__, _impl)
