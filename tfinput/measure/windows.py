"""Measurement windows: the plan (`WindowPlan`), one timed window, and its variants.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.measurement.windows`."""

from __future__ import annotations

from tfinput._src.core._public import export as _export
from tfinput._src.measurement import windows as _impl
from tfinput._src.measurement.windows import *  # noqa: F403

__all__ = _export(__name__, _impl)
