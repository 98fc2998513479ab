"""Move batches to the accelerator ahead of the step, overlapping transfer with compute.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.measurement.device_prefetch`."""

from __future__ import annotations

from tfinput._src.core._public import export as _export
from tfinput._src.measurement import device_prefetch as _impl
from tfinput._src.measurement.device_prefetch import *  # noqa: F403

__all__ = _export(__name__, _impl)
