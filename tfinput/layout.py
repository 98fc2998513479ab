"""The packed batch layout: a few large tensors instead of one per feature."""

from typing import TYPE_CHECKING

from tfinput._src.core.layout import GROUPS as GROUPS
from tfinput._src.core.layout import LAYOUT_FORMAT as LAYOUT_FORMAT
from tfinput._src.core.layout import Block as Block
from tfinput._src.core.layout import PackedLayout as PackedLayout
from tfinput._src.core.layout import Slot as Slot
from tfinput._src.core.layout import is_packed as is_packed
from tfinput._src.core.layout import pack as pack
from tfinput._src.core.layout import unpack as unpack

if TYPE_CHECKING:  # pragma: no cover
    from tfinput._src.core.layout import UnpackFeatures as UnpackFeatures

__all__ = [
    "LAYOUT_FORMAT",
    "GROUPS",
    "Slot",
    "PackedLayout",
    "Block",
    "pack",
    "unpack",
    "is_packed",
    "UnpackFeatures",
]


def __getattr__(name: str) -> object:
    # UnpackFeatures: made on first use (Keras loads then).
    match name:
        case "UnpackFeatures":
            import tfinput._src.core.layout as module
        case _:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)
