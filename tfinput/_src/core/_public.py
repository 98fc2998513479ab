"""What the public modules outside ``tfinput/_src`` share: each re-exports the names of an
implementation module and marks the classes and functions it defines as its own, so that
reprs, pickles and saved configurations name the public module (``tfinput.pipeline.Pipeline``),
which stays put when the implementation moves."""

from __future__ import annotations

import types
from typing import TypeVar

__all__ = ["export", "owned"]

T = TypeVar("T")


def owned(public: str, impl: types.ModuleType, value: T) -> T:
    """``value``, marked as ``public``'s when ``impl`` defines it (a class or function)."""
    if isinstance(value, (type, types.FunctionType)) and value.__module__ == impl.__name__:
        value.__module__ = public
    return value


def export(public: str, impl: types.ModuleType) -> list[str]:
    """The names ``public`` re-exports (``impl.__all__``), each loaded one marked as its."""
    for name in impl.__all__:
        if name in impl.__dict__:  # a lazily imported name is marked when first used
            owned(public, impl, impl.__dict__[name])
    return list(impl.__all__)
