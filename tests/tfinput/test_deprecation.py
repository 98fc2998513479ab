"""`MovedModules`: an old module name imports the module under its new name, warning."""

from __future__ import annotations

import importlib
import sys

import pytest

from tfinput.deprecation import MovedModules


def test_an_old_name_is_the_new_module_with_a_warning():
    finder = MovedModules({"tfinput.old_errors_name": "tfinput.errors"}, public="tfinput")
    finder.install()
    finder.install()  # once on sys.meta_path, however often installed
    try:
        assert sum(f is finder for f in sys.meta_path) == 1
        with pytest.warns(DeprecationWarning, match=r"tfinput\.old_errors_name is private now"):
            old = importlib.import_module("tfinput.old_errors_name")
        errors = importlib.import_module("tfinput.errors")
        assert old is errors and old.__name__ == "tfinput.errors"
        assert finder.find_spec("tfinput.other", None) is None  # only the names it maps
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop("tfinput.old_errors_name", None)
