"""The ``tfinput`` command: one registry of subcommands and one `main` that runs them.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.cli`."""

from __future__ import annotations

from tfinput._src.applications import cli as _impl
from tfinput._src.applications.cli import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
