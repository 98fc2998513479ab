"""`tfinput.bench.probes`: a deprecated alias of `tfinput.measure.probes` (tested there)."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_the_alias_warns_and_is_the_measure_module():
    sys.modules.pop("tfinput.bench.probes", None)
    with pytest.warns(DeprecationWarning, match="moved to tfinput.measure.probes"):
        alias = importlib.import_module("tfinput.bench.probes")
    real = importlib.import_module("tfinput.measure.probes")
    assert alias.__all__ == real.__all__
    assert all(getattr(alias, name) is getattr(real, name) for name in real.__all__)
