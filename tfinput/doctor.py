"""What this installation is made of: versions and optional parts, for bug reports.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.doctor`."""

from __future__ import annotations

from tfinput._src.applications import doctor as _impl
from tfinput._src.applications.doctor import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
