"""`tfinput.columnar_records.reader`: a deprecated alias of `tfinput._src.core.sources._columnar_reader` (tested where it
lives now)."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_the_alias_warns_and_is_the_moved_module():
    sys.modules.pop("tfinput.columnar_records.reader", None)
    with pytest.warns(DeprecationWarning, match="tfinput.columnar_records.reader moved"):
        alias = importlib.import_module("tfinput.columnar_records.reader")
    real = importlib.import_module("tfinput._src.core.sources._columnar_reader")
    decode = importlib.import_module("tfinput._src.core.sources._columnar_decode")
    assert set(alias.__all__) == {*real.__all__, "assembler"}  # every name it had
    assert all(getattr(alias, name) is getattr(real, name) for name in real.__all__)
    assert alias.assembler is decode.assembler
