"""`import tfinput` (and `tuners`, `profiles`) stays light: no TensorFlow at import."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["tfinput", "tuners", "profiles"])
def test_import_does_not_load_heavy_libraries(module):
    code = (
        f"import sys, {module}; "
        "heavy = [m for m in ('tensorflow', 'keras', 'pyarrow', 'optuna', 'xprof', 'plotly') "
        "if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_api_is_deliberate():
    import tfinput

    assert "Pipeline" in tfinput.__all__ and "PipelineConfig" in tfinput.__all__
    assert tfinput.Pipeline.__module__ == "tfinput.pipeline"
