"""CSV/TSV to sharded Parquet or TFRecord, streaming: ``tfinput convert``.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.convert`."""

from __future__ import annotations

from tfinput._src.applications import convert as _impl
from tfinput._src.applications.convert import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
