"""`tfinput.columnar_records.format`: a deprecated alias of `tfinput._src.core.formats.columnar.format` (tested where it
lives now)."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_the_alias_warns_and_is_the_moved_module():
    sys.modules.pop("tfinput.columnar_records.format", None)
    with pytest.warns(DeprecationWarning, match="tfinput.columnar_records.format moved"):
        alias = importlib.import_module("tfinput.columnar_records.format")
    real = importlib.import_module("tfinput._src.core.formats.columnar.format")
    assert alias.__all__ == real.__all__
    assert all(getattr(alias, name) is getattr(real, name) for name in real.__all__)
