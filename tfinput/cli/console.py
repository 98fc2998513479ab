"""The console every ``tfinput`` command prints with, and its progress bar.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.cli.console`."""

from __future__ import annotations

from tfinput._src.applications.cli import console as _impl
from tfinput._src.applications.cli.console import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
