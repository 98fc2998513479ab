"""`ColumnarSource` and `check_size`, kept importable here; they live in
`tfinput._src.core.sources.columnar` with the other sources."""

from __future__ import annotations

from tfinput._src.core.sources.columnar import ColumnarSource, check_size

__all__ = ["ColumnarSource", "check_size"]
