"""Deprecated import paths, kept for one release: a module that became private or moved
still imports under its old name, with a `DeprecationWarning`, and is the module itself
under its new name (``tuners.study.tune is tuners._study.tune``).

    MovedModules({"tuners.study": "tuners._study"}, public="tuners").install()
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Mapping, Sequence
from types import ModuleType

__all__ = ["MovedModules"]


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder for ``{old name: new name}``: importing an old name warns and returns
    the module under its new name."""

    def __init__(self, moved: Mapping[str, str], *, public: str):
        self.moved = dict(moved)
        self.public = public
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        del path, target
        if fullname not in self.moved:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = self.moved[spec.name]
        if any(part.startswith("_") for part in new.split(".")):
            message = (
                f"{spec.name} is private now ({new}) and will be removed in the next "
                f"release: import its public names from {self.public} (docs/api.md)"
            )
        else:
            message = (
                f"{spec.name} moved to {new}; import it from there (the old name will be "
                "removed in the next release)"
            )
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self._specs[new] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The module under its new name is already executed; the import system has just
        # set its ``__spec__`` to the old name's: give it back its own (``reload`` and
        # ``pickle`` read it).
        module.__spec__ = self._specs.pop(module.__name__, module.__spec__)

    def install(self) -> None:
        """Put this finder first on ``sys.meta_path`` (once): an old name is answered before
        the path finder could import the module's file a second time under it."""
        if not any(isinstance(f, MovedModules) and f.moved == self.moved for f in sys.meta_path):
            sys.meta_path.insert(0, self)
