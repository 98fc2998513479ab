"""`MeasureOptions`: how a measurement is taken, in one frozen object.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.measurement.options`."""

from __future__ import annotations

from tfinput._src.core._public import export as _export
from tfinput._src.measurement import options as _impl
from tfinput._src.measurement.options import *  # noqa: F403

__all__ = _export(__name__, _impl)
