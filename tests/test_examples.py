"""The runnable examples stay runnable (smoke runs with small data)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize(
    "script, args, expect",
    [
        ("tpu_embedding.py", [], "activations:"),
        ("ranking_dcn.py", ["--quick"], "one epoch: loss"),
    ],
    ids=["tpu-embedding", "ranking-dcn"],
)
def test_example_runs(script, args, expect):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert expect in proc.stdout
