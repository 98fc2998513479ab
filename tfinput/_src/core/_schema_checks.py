"""Field checks of the schema's dataclasses: each raises `SchemaError` naming the
owner, the field, what was expected and what was given. `tfinput.schema` is the public
API."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tfinput._src.core.errors import SchemaError

__all__ = [
    "ID_DTYPES",
    "TOWERS",
    "check_categorical",
    "check_choice",
    "check_int",
    "check_name",
    "check_tower",
    "field_error",
]

ID_DTYPES = ("int64", "string")


def field_error(owner: str, field: str, expected: str, got: Any) -> SchemaError:
    return SchemaError(f"{owner}.{field}: expected {expected}, got {got!r}")


def check_name(owner: str, name: Any) -> None:
    if not isinstance(name, str) or not name or name != name.strip():
        raise field_error(owner, "name", "a non-empty string without surrounding spaces", name)


def check_int(owner: str, field: str, value: Any, minimum: int, maximum: int | None = None):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise field_error(owner, field, f"an int >= {minimum}", value)
    if maximum is not None and value > maximum:
        raise field_error(owner, field, f"an int <= {maximum}", value)


def check_choice(owner: str, field: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise field_error(owner, field, f"one of {list(choices)}", value)


#: The sides of a two-tower retrieval model a feature can feed (`Dense.tower`).
TOWERS = ("query", "candidate")


def check_tower(owner: str, tower: Any) -> None:
    if tower is not None and tower not in TOWERS:
        raise field_error(owner, "tower", '"query", "candidate" or null', tower)


def check_categorical(f: Any) -> None:
    """The checks of a `Categorical` or `MultiHot` feature's fields."""
    owner = f"{type(f).__name__} {getattr(f, 'name', None)!r}"
    check_name(type(f).__name__, f.name)
    check_name(f"{owner}.table", f.table)
    check_choice(owner, "dtype", f.dtype, ID_DTYPES)
    check_choice(owner, "out_of_range", f.out_of_range, ("error", "modulo"))
    check_tower(owner, f.tower)
    default = getattr(f, "default", None)
    if default is not None:
        if f.dtype == "string" and not isinstance(default, str):
            raise field_error(owner, "default", "a string (dtype is string)", default)
        if f.dtype == "int64" and (isinstance(default, bool) or not isinstance(default, int)):
            raise field_error(owner, "default", "an int (dtype is int64)", default)
        if f.dtype == "int64" and default < 0:
            raise field_error(owner, "default", "a non-negative id", default)
