"""`MovedModules`: an old module name imports the module under its new name, warning."""

from __future__ import annotations

import importlib
import sys

import pytest

from tfinput.deprecation import MovedModules


def test_an_old_name_is_the_new_module_with_a_warning():
    finder = MovedModules({"tfinput.old_errors_name": "tfinput._src.core.errors"}, public="tfinput")
    finder.install()
    finder.install()  # once on sys.meta_path, however often installed
    try:
        assert sum(f is finder for f in sys.meta_path) == 1
        with pytest.warns(DeprecationWarning, match=r"tfinput\.old_errors_name is private now"):
            old = importlib.import_module("tfinput.old_errors_name")
        errors = importlib.import_module("tfinput._src.core.errors")
        assert old is errors and old.__name__ == "tfinput._src.core.errors"
        # it keeps its own spec (the import system gave it the old name's; reload and
        # pickle read it)
        assert errors.__spec__.name == "tfinput._src.core.errors"
        assert finder.find_spec("tfinput.other", None) is None  # only the names it maps
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop("tfinput.old_errors_name", None)


def test_a_name_moved_to_a_public_module_says_where_and_is_answered_first():
    finder = MovedModules({"tfinput.old_schema_name": "tfinput.schema"}, public="tfinput")
    finder.install()
    try:
        assert sys.meta_path[0] is finder  # before the path finder could load a stale file
        with pytest.warns(DeprecationWarning, match=r"old_schema_name moved to tfinput\.schema;"):
            old = importlib.import_module("tfinput.old_schema_name")
        assert old is importlib.import_module("tfinput.schema")
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop("tfinput.old_schema_name", None)


def test_the_modules_moved_into_src_import_under_their_old_names():
    """Every module that became private in ``tfinput._src`` (its old name was never in
    docs/api.md) imports under that name for one release: the same module, warning."""
    from tfinput._src.core._moved import MOVED

    assert "tfinput.sources.parquet" in MOVED and "tfinput.steps.keras" in MOVED
    for old, new in MOVED.items():
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=rf"{old} is private now"):
            module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        assert module.__spec__.name == new, old
