"""`PipelineConfig`: every tunable knob of a tfinput pipeline, in one frozen object.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.core.config`."""

from __future__ import annotations

from tfinput._src.core import config as _impl
from tfinput._src.core._public import export as _export
from tfinput._src.core.config import *  # noqa: F403

__all__ = _export(__name__, _impl)
