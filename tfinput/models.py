"""Keras 3 layers and a small DCN-style ranking model over tfinput batches.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.measurement.models`."""

from __future__ import annotations

from tfinput._src.core._public import export as _export
from tfinput._src.measurement import models as _impl
from tfinput._src.measurement.models import *  # noqa: F403

__all__ = _export(__name__, _impl)
