"""Deprecated alias of `tfinput.measure.windows`, where this module moved (the measurement
layer, below `tfinput.bench`); it will be removed in the next release."""

from __future__ import annotations

import warnings

from tfinput.measure.windows import *  # noqa: F403
from tfinput.measure.windows import __all__ as __all__

warnings.warn(
    "tfinput.bench.windows moved to tfinput.measure.windows; import it from there (this alias "
    "will be removed in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
