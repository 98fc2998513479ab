"""The packed batch layout: a few large tensors instead of one per feature.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.core.layout`."""

from __future__ import annotations

import tfinput._src.core.layout as _impl
from tfinput._src.core._public import export as _export
from tfinput._src.core._public import owned as _owned

__all__ = _export(__name__, _impl)


def __getattr__(name: str) -> object:
    if name in __all__:
        return _owned(__name__, _impl, getattr(_impl, name))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
