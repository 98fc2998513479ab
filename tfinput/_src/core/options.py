"""What users hand in: options objects, JSON documents, objects named on the command line.

An entry point with many settings takes one options object made of small groups,
checked with `check_counts` where a setting counts something. A schema, config or layout is read from a JSON
file or the JSON text itself (`load_json`); ``--pipeline``, ``--model`` and
``--step-fn`` name a user's object as ``MODULE:ATTRIBUTE`` (`load_object`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from tfinput._src.core.errors import ConfigError


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
