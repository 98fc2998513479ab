"""CSV and TSV files: their layout (delimiter, header, column names) sniffed from the
first lines, and their text read block by block with every row's line number.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.core.formats.csv`."""

from __future__ import annotations

from tfinput._src.core._public import export as _export
from tfinput._src.core.formats import csv as _impl
from tfinput._src.core.formats.csv import *  # noqa: F403

__all__ = _export(__name__, _impl)
