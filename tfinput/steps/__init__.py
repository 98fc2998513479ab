"""Training-step kinds shared by the tuner (`tuners`) and the profiler (`profiles`).

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.measurement.steps`."""

from __future__ import annotations

from tfinput._src.core._public import export as _export
from tfinput._src.measurement import steps as _impl
from tfinput._src.measurement.steps import *  # noqa: F403

__all__ = _export(__name__, _impl)
