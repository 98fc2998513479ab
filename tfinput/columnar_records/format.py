"""Deprecated alias of `tfinput._src.core.formats.columnar.format`, where this module moved (the
columnar file format, in the core); it will be removed in the next release."""

from __future__ import annotations

import warnings

from tfinput._src.core.formats.columnar.format import *  # noqa: F403
from tfinput._src.core.formats.columnar.format import __all__ as __all__

warnings.warn(
    "tfinput.columnar_records.format moved to tfinput._src.core.formats.columnar.format; import it from "
    "there (this alias will be removed in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
