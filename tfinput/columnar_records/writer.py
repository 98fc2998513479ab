"""Deprecated alias of `tfinput._src.core.formats.columnar.writer`, where this module moved (the
columnar file format, in the core); it will be removed in the next release."""

from __future__ import annotations

import warnings

from tfinput._src.core.formats.columnar.writer import *  # noqa: F403
from tfinput._src.core.formats.columnar.writer import __all__ as __all__

warnings.warn(
    "tfinput.columnar_records.writer moved to tfinput._src.core.formats.columnar.writer; import it from "
    "there (this alias will be removed in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
