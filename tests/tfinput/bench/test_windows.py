"""`tfinput.bench.windows`: a deprecated alias of `tfinput.measure.windows` (tested there)."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_the_alias_warns_and_is_the_measure_module():
    sys.modules.pop("tfinput.bench.windows", None)
    with pytest.warns(DeprecationWarning, match="moved to tfinput.measure.windows"):
        alias = importlib.import_module("tfinput.bench.windows")
    real = importlib.import_module("tfinput.measure.windows")
    assert alias.__all__ == real.__all__
    assert all(getattr(alias, name) is getattr(real, name) for name in real.__all__)
