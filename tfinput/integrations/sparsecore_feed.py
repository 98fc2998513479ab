"""SparseCore-ready batches: jax-tpu-embedding's input preprocessing off the training thread.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.integrations.sparsecore_feed`."""

from __future__ import annotations

from tfinput._src.applications.integrations import sparsecore_feed as _impl
from tfinput._src.applications.integrations.sparsecore_feed import *  # noqa: F403
from tfinput._src.core._public import export as _export

__all__ = _export(__name__, _impl)
