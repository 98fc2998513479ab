"""Run a tfinput pipeline on tf.data service workers, after proving it is native-only.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.service`."""

from __future__ import annotations

from tfinput._src.applications import service as _impl
from tfinput._src.applications.service import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
