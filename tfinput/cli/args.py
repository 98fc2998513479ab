"""Arguments shared by the ``tfinput`` commands, and the one function from arguments to
a pipeline.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.cli.args`."""

from __future__ import annotations

from tfinput._src.applications.cli import args as _impl
from tfinput._src.applications.cli.args import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
