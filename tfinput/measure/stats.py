"""Configs taking turns window by window, and the statistics of their windows.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.measurement.stats`."""

from __future__ import annotations

from tfinput._src.core._public import export as _export
from tfinput._src.measurement import stats as _impl
from tfinput._src.measurement.stats import *  # noqa: F403

__all__ = _export(__name__, _impl)
