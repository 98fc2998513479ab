"""examples/resume_jax.py: a JAX loop preempted mid-epoch resumes exactly (two real
processes sharing a work directory)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resume_jax.py"


def _run(workdir: Path, *args: str) -> str:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--workdir", str(workdir), "--quick", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_resume_jax_example_is_preempted_and_resumes_exactly(tmp_path):
    pytest.importorskip("jax")
    first = _run(tmp_path, "--stop-after", "13")
    assert "starting from scratch" in first
    assert "preempted at step 13 (simulated); the last checkpoint is at step 10" in first
    assert "epoch done" not in first

    second = _run(tmp_path)
    assert "resumed from step_00000010: step 10" in second
    assert "epoch done at step 32" in second
    m = re.search(r"over all runs: (\d+) \((\d+) distinct, (\d+) twice\) of (\d+)", second)
    assert m, second
    total, distinct, twice, epoch = map(int, m.groups())
    assert (total, distinct, twice, epoch) == (2048, 2048, 0, 2048)
    assert "exact resume: every example of the epoch trained on once" in second
