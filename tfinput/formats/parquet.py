"""Parquet files: opening (local paths and URIs), footers, reading and writing.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.core.formats.parquet`."""

from __future__ import annotations

from tfinput._src.core._public import export as _export
from tfinput._src.core.formats import parquet as _impl
from tfinput._src.core.formats.parquet import *  # noqa: F403

__all__ = _export(__name__, _impl)
