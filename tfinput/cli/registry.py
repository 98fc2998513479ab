"""The command registry: every ``tfinput`` subcommand, and the one `main` that runs them.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.cli.registry`."""

from __future__ import annotations

from tfinput._src.applications.cli import registry as _impl
from tfinput._src.applications.cli.registry import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
