"""The built-in default data set: what ``tfinput demo`` (and ``tune --demo``) tunes and
``tfinput profile --demo`` profiles, with no user data needed.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.cli.demo`."""

from __future__ import annotations

from tfinput._src.applications.cli import demo as _impl
from tfinput._src.applications.cli.demo import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
