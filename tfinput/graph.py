"""Is a dataset made of native ops only? The check tf.data service needs.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.core.graph`."""

from __future__ import annotations

from tfinput._src.core import graph as _impl
from tfinput._src.core._public import export as _export
from tfinput._src.core.graph import *  # noqa: F403

__all__ = _export(__name__, _impl)
