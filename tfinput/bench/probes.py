"""Deprecated alias of `tfinput.measure.probes`, where this module moved (the measurement
layer, below `tfinput.bench`); it will be removed in the next release."""

from __future__ import annotations

import warnings

from tfinput.measure.probes import *  # noqa: F403
from tfinput.measure.probes import __all__ as __all__

warnings.warn(
    "tfinput.bench.probes moved to tfinput.measure.probes; import it from there (this alias "
    "will be removed in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
