"""`tfinput.bench.stats`: a deprecated alias of `tfinput.measure.stats` (tested there)."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_the_alias_warns_and_is_the_measure_module():
    sys.modules.pop("tfinput.bench.stats", None)
    with pytest.warns(DeprecationWarning, match="moved to tfinput.measure.stats"):
        alias = importlib.import_module("tfinput.bench.stats")
    real = importlib.import_module("tfinput.measure.stats")
    assert alias.__all__ == real.__all__
    assert all(getattr(alias, name) is getattr(real, name) for name in real.__all__)
