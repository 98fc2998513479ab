"""Deprecated alias of the columnar source's read path, which moved to the sources
(`tfinput._src.core.sources.columnar`); it will be removed in the next release."""

from __future__ import annotations

import warnings

from tfinput._src.core.sources._columnar_decode import assembler as assembler
from tfinput._src.core.sources._columnar_reader import *  # noqa: F403
from tfinput._src.core.sources._columnar_reader import __all__ as _reader_all

__all__ = [*_reader_all, "assembler"]

warnings.warn(
    "tfinput.columnar_records.reader moved into tfinput.sources (the columnar source's "
    "read path, private there); this alias will be removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)
