"""The runnable examples stay runnable (smoke runs with small data)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import SHARED_DATA

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(script: str, *args: str) -> str:
    """Run an example in its own process; its stdout (the test fails on a non-zero exit)."""
    env = dict(os.environ)
    env["TFINPUT_DATA_DIR"] = str(SHARED_DATA)
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def needs_criteo_sample() -> None:
    if not (SHARED_DATA / "criteo_sample.txt").is_file():
        pytest.skip(f"sample data {SHARED_DATA} not found (set TFINPUT_SHARED_DATA)")


def number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in the output:\n{text[-3000:]}"
    return float(match.group(1))


@pytest.mark.parametrize(
    "script, args, expect",
    [
        ("tpu_embedding.py", [], "activations:"),
        ("ranking_dcn.py", ["--quick"], "one epoch: loss"),
    ],
    ids=["tpu-embedding", "ranking-dcn"],
)
def test_example_runs(script, args, expect):
    assert expect in run_example(script, *args)


def test_criteo_dcn_converts_tunes_trains_and_serves():
    """Every step runs on the real Criteo sample; the metrics are real numbers and the
    exported SavedModel predicts what the trained model predicts."""
    needs_criteo_sample()
    out = run_example("criteo_dcn/main.py", "--quick")
    assert "wrote 200 rows to 2 tfrecord file(s)" in out
    assert "features: {'categorical': 26, 'dense': 13}; labels: ['label']" in out
    assert "best config: batch_size 32" in out
    assert number(r"held-out rows (\d+)", out) == 50
    log_loss = number(r"held-out log loss ([0-9.]+)", out)
    auc = number(r"held-out AUC ([0-9.]+)", out)
    assert 0.0 < log_loss < 5.0
    assert 0.0 <= auc <= 1.0
    served = re.search(r"served vs trained on 8 held-out records: max \|diff\| (\S+) (\w+)", out)
    assert served, out[-2000:]
    assert float(served.group(1)) <= 1e-5 and served.group(2) == "OK"


def test_wrap_existing_wraps_and_tunes_an_unchanged_input_fn():
    """The hand-written ``FixedLenFeature([1])`` pipeline is wrapped as it is: tfinput's
    batches are ``[B]`` columns, the tuner finishes and a model trains with its config."""
    needs_criteo_sample()
    out = run_example("wrap_existing/main.py", "--quick")
    assert "C1 [None, 1] int64, I1 [None, 1]; label [None, 1]" in out
    assert "tfinput batches: dense 13 x (32,), ids 26 x (32,) int32, label (32,)" in out
    assert re.search(r"best config \((autotune|heuristic|trial \d+)\)", out), out[-2000:]
    first = number(r"3 epochs, loss ([0-9.]+) ->", out)
    last = number(r"3 epochs, loss [0-9.]+ -> ([0-9.]+)", out)
    assert 0.0 < last < first


def test_movielens_retrieval_trains_two_towers_and_scores_recall():
    """Two towers from the real MovieLens sample: the multi-hot genres keep a fixed shape,
    the corpus holds the unique movies, training lowers the loss and recall@k is a rate."""
    if not (SHARED_DATA / "movielens_sample.txt").is_file():
        pytest.skip(f"sample data {SHARED_DATA} not found (set TFINPUT_SHARED_DATA)")
    out = run_example("movielens_retrieval/main.py", "--quick")
    assert "wrote 200 rows to 2 parquet file(s)" in out
    assert "candidate.ids.genres [32, 5], candidate.weights.genres [32, 5]" in out
    assert "corpus: 187 unique movies; held-out queries: 40" in out
    first = number(r"train loss ([0-9.]+) ->", out)
    last = number(r"train loss [0-9.]+ -> ([0-9.]+)", out)
    assert 0.0 < last < first
    assert 0.0 <= number(r"(?m)^recall@10: ([0-9.]+)", out) <= 1.0
