"""Batch-level TensorFlow transforms: raw columns in, fixed-shape tensors out.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.core.transforms`."""

from __future__ import annotations

from tfinput._src.core import transforms as _impl
from tfinput._src.core._public import export as _export
from tfinput._src.core.transforms import *  # noqa: F403

__all__ = _export(__name__, _impl)
