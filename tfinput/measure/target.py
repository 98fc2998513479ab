"""What the measurement takes: a pipeline, declared (`Target`), whatever form it came in.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.measurement.target`."""

from __future__ import annotations

from tfinput._src.core._public import export as _export
from tfinput._src.measurement import target as _impl
from tfinput._src.measurement.target import *  # noqa: F403

__all__ = _export(__name__, _impl)
