"""Objects named on the command line as ``MODULE:ATTRIBUTE`` (``--pipeline``,
``--model``, ``--step-fn``): `load_object`, which lives in the core (`tfinput._objects`)
so that the step factory below the CLI (`tfinput.steps.make`) can use it too.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.cli.objects`."""

from __future__ import annotations

from tfinput._src.applications.cli import objects as _impl
from tfinput._src.applications.cli.objects import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
