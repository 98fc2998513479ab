"""Deprecated alias of `tfinput.measure.stats`, where this module moved (the measurement
layer, below `tfinput.bench`); it will be removed in the next release."""

from __future__ import annotations

import warnings

from tfinput.measure.stats import *  # noqa: F403
from tfinput.measure.stats import __all__ as __all__

warnings.warn(
    "tfinput.bench.stats moved to tfinput.measure.stats; import it from there (this alias "
    "will be removed in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
