"""What a measurement reads from the machine: CPU time, memory, CPU count, versions.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.measurement.probes`."""

from __future__ import annotations

from tfinput._src.core._public import export as _export
from tfinput._src.measurement import probes as _impl
from tfinput._src.measurement.probes import *  # noqa: F403

__all__ = _export(__name__, _impl)
