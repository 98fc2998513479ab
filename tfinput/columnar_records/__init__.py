"""Columnar pre-batched records: a storage layout read at near memory speed, natively.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.applications.columnar_records`."""

from __future__ import annotations

import tfinput._src.applications.columnar_records as _impl
from tfinput._src.core._public import export as _export
from tfinput._src.core._public import owned as _owned

__all__ = _export(__name__, _impl)


def __getattr__(name: str) -> object:
    if name in __all__:
        return _owned(__name__, _impl, getattr(_impl, name))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
