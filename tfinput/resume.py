"""Resume exactly after preemption: save the input position, restore it in a new process.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.core.resume`."""

from __future__ import annotations

from tfinput._src.core import resume as _impl
from tfinput._src.core._public import export as _export
from tfinput._src.core.resume import *  # noqa: F403

__all__ = _export(__name__, _impl)
