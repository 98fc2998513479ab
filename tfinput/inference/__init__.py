"""Schema inference from Parquet/Arrow schemas, sampled tf.train.Example records and
CSV/TSV text: the one engine behind ``tfinput schema infer`` and ``tfinput convert``.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.inference`."""

from __future__ import annotations

from tfinput._src.applications import inference as _impl
from tfinput._src.applications.inference import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
