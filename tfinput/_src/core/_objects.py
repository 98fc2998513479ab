"""Objects named as ``MODULE:ATTRIBUTE`` on the command line (``--pipeline``,
``--model``, ``--step-fn``)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tfinput._src.core.errors import ConfigError

__all__ = ["load_object"]


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


def load_object(spec: str, what: str) -> Any:
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
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{what}: {module_name!r} has no attribute {attr!r}") from None
    return obj
