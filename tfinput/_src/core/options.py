"""Options objects: small frozen dataclasses, and their flat keywords.

An entry point with many settings takes one options object made of small groups.
`tfinput.convert.convert` also takes each field as a keyword: `with_keywords` sets it
on the group that owns a field of that name, so the mapping lives in one place and the
keywords stay in step with the fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TypeVar

from tfinput._src.core.errors import ConfigError

__all__ = ["check_counts", "with_keywords"]

_Options = TypeVar("_Options")


def with_keywords(options: _Options, keywords: Mapping[str, object], *, what: str) -> _Options:
    """``options`` with each of ``keywords`` set on the field of that name: a field of
    ``options`` itself, or of a group in it (a field that is itself a dataclass, at any
    depth). Field names are unique across the groups, so each keyword has one owner.

    Raises:
      TypeError: a keyword that names no field, worded as Python words it
        (``"{what}() got an unexpected keyword argument 'x'"``).
    """
    owners = _owners(options)
    for name in keywords:
        if name not in owners:
            raise TypeError(f"{what}() got an unexpected keyword argument {name!r}")
    return _replace(options, keywords, owners) if keywords else options


def _owners(options: object, path: tuple[str, ...] = ()) -> dict[str, tuple[str, ...]]:
    """``{leaf field name: path of groups to it}`` of a dataclass instance."""
    owners: dict[str, tuple[str, ...]] = {}
    for field in dataclasses.fields(options):  # type: ignore[arg-type]
        value = getattr(options, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            owners.update(_owners(value, (*path, field.name)))
        else:
            owners[field.name] = path
    return owners


def _replace(
    options: _Options,
    keywords: Mapping[str, object],
    owners: Mapping[str, tuple[str, ...]],
    depth: int = 0,
) -> _Options:
    """``options`` with the keywords owned at ``depth`` set, and its groups replaced."""
    here = {k: v for k, v in keywords.items() if len(owners[k]) == depth}
    below = {k: v for k, v in keywords.items() if len(owners[k]) > depth}
    for group in {owners[k][depth] for k in below}:
        mine = {k: v for k, v in below.items() if owners[k][depth] == group}
        here[group] = _replace(getattr(options, group), mine, owners, depth + 1)
    return dataclasses.replace(options, **here)  # type: ignore[type-var]


def check_counts(*, what: str = "", **counts: int | None) -> None:
    """Raise `ConfigError` ``"{what}: {name} must be >= 1, got {value}"`` (no prefix
    without ``what``) for a count below 1 or not an int; None is not checked."""
    prefix = f"{what}: " if what else ""
    for name, value in counts.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{prefix}{name} must be >= 1, got {value!r}")
