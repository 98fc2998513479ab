"""`Pipeline`: an immutable pipeline definition that builds with any `PipelineConfig`.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.core.pipeline`."""

from __future__ import annotations

from tfinput._src.core import pipeline as _impl
from tfinput._src.core._public import export as _export
from tfinput._src.core.pipeline import *  # noqa: F403

__all__ = _export(__name__, _impl)
