"""What users hand in: options objects, JSON documents, objects named on the command line.

An entry point with many settings takes one options object made of small groups.
`tfinput.convert.convert` also takes each field as a keyword: `with_keywords` sets it
on the group that owns a field of that name, so the mapping lives in one place and the
keywords stay in step with the fields. A schema, config or layout is read from a JSON
file or the JSON text itself (`load_json`); ``--pipeline``, ``--model`` and
``--step-fn`` name a user's object as ``MODULE:ATTRIBUTE`` (`load_object`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from tfinput._src.core.errors import ConfigError

__all__ = ["check_counts", "load_json", "load_object", "with_keywords"]

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


def load_json(
    path_or_text: str | os.PathLike[str], error: type[Exception], what: str
) -> tuple[object, str]:
    """Parse ``path_or_text``: JSON text if it starts with ``{``, else a file path.

    Returns:
      ``(data, source)`` where source names the file (or ``<string>``) for messages.

    Raises:
      error: the file cannot be read, or is not valid JSON (naming the file).
    """
    text = str(path_or_text)
    source = "<string>"
    if not text.lstrip().startswith("{"):
        source = text
        try:
            text = Path(path_or_text).read_text()
        except OSError as e:
            raise error(f"cannot read {what} file {source}: {e.strerror}") from e
    try:
        return json.loads(text), source
    except json.JSONDecodeError as e:
        raise error(f"{source}: not valid JSON: {e}") from e


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def load_object(spec: str, what: str) -> object:
    """The object named by ``MODULE:ATTR`` (MODULE dotted, or a path to a .py file).

    Raises:
      ConfigError: malformed spec, module not importable, attribute missing.
    """
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{what}: expected MODULE:FUNCTION, got {spec!r}")
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = Path(module_name)
            if not path.is_file():
                raise ConfigError(f"{what}: no file {path}")
            mod_spec = importlib.util.spec_from_file_location(path.stem, path)
            if mod_spec is None or mod_spec.loader is None:
                raise ConfigError(f"{what}: cannot load {path}")
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
        else:
            with _cwd_on_path():
                module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{what}: cannot import {module_name!r}: {e}") from e
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{what}: {module_name!r} has no attribute {attr!r}") from None
    return obj
