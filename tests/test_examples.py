"""The runnable examples stay runnable (smoke runs with small data), each run as a
script, all in one Python child."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests._once import Script, run_once, run_programs, selected
from tests.helpers import SHARED_DATA

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

#: Each example run: name -> (script under examples/, arguments, the sample data it
#: reads from SHARED_DATA or None).
RUNS = {
    "tpu-embedding": ("tpu_embedding.py", [], None),
    "ranking-dcn": ("ranking_dcn.py", ["--quick"], None),
    "criteo-dcn": ("criteo_dcn/main.py", ["--quick"], "criteo_sample.txt"),
    "wrap-existing": ("wrap_existing/main.py", ["--quick"], "criteo_sample.txt"),
    "movielens-retrieval": ("movielens_retrieval/main.py", ["--quick"], "movielens_sample.txt"),
}
#: The run each test reads (test_example_runs: its ``example`` parameter).
RUN_OF_TEST = {
    "test_criteo_dcn_converts_tunes_trains_and_serves": "criteo-dcn",
    "test_wrap_existing_wraps_and_tunes_an_unchanged_input_fn": "wrap-existing",
    "test_movielens_retrieval_trains_two_towers_and_scores_recall": "movielens-retrieval",
}


def _run_examples(names: list[str], directory: Path) -> dict[str, list]:
    """Run the named examples in turn in one child: name -> [status, stdout, stderr]."""
    env = dict(os.environ)
    env["TFINPUT_DATA_DIR"] = str(SHARED_DATA)
    scripts = {n: Script(EXAMPLES / RUNS[n][0], RUNS[n][1]) for n in names}
    return {n: r[:3] for n, r in run_programs(scripts, directory, env, timeout=1800).items()}


def _needed(item: pytest.Item) -> str | None:
    spec = getattr(item, "callspec", None)
    name = spec.params.get("example") if spec else RUN_OF_TEST.get(item.originalname)
    sample = RUNS[name][2] if name else None
    return None if sample and not (SHARED_DATA / sample).is_file() else name


@pytest.fixture(scope="module")
def example_output(request, tmp_path_factory):
    """``example_output(name)``: the stdout of that example's run (the test fails on a
    non-zero exit). The examples the session selected run once, in one child."""
    names = selected(request, _needed)
    results = run_once(tmp_path_factory, "examples", lambda d: _run_examples(names, d))

    def output(name: str) -> str:
        status, out, err = results[name]
        assert status == "ok", f"{status}: " + out[-2000:] + err[-3000:]
        return out

    return output


def needs_criteo_sample() -> None:
    if not (SHARED_DATA / "criteo_sample.txt").is_file():
        pytest.skip(f"sample data {SHARED_DATA} not found (set TFINPUT_SHARED_DATA)")


def number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in the output:\n{text[-3000:]}"
    return float(match.group(1))


@pytest.mark.parametrize(
    "example, expect",
    [("tpu-embedding", "activations:"), ("ranking-dcn", "one epoch: loss")],
    ids=["tpu-embedding", "ranking-dcn"],
)
def test_example_runs(example_output, example, expect):
    assert expect in example_output(example)


def test_criteo_dcn_converts_tunes_trains_and_serves(example_output):
    """Every step runs on the real Criteo sample; the metrics are real numbers and the
    exported SavedModel predicts what the trained model predicts."""
    needs_criteo_sample()
    out = example_output("criteo-dcn")
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


def test_wrap_existing_wraps_and_tunes_an_unchanged_input_fn(example_output):
    """The hand-written ``FixedLenFeature([1])`` pipeline is wrapped as it is: tfinput's
    batches are ``[B]`` columns, the tuner finishes and a model trains with its config."""
    needs_criteo_sample()
    out = example_output("wrap-existing")
    assert "C1 [None, 1] int64, I1 [None, 1]; label [None, 1]" in out
    assert "tfinput batches: dense 13 x (32,), ids 26 x (32,) int32, label (32,)" in out
    assert re.search(r"best config \((autotune|heuristic|trial \d+)\)", out), out[-2000:]
    first = number(r"3 epochs, loss ([0-9.]+) ->", out)
    last = number(r"3 epochs, loss [0-9.]+ -> ([0-9.]+)", out)
    assert 0.0 < last < first


def test_movielens_retrieval_trains_two_towers_and_scores_recall(example_output):
    """Two towers from the real MovieLens sample: the multi-hot genres keep a fixed shape,
    the corpus holds the unique movies, training lowers the loss and recall@k is a rate."""
    if not (SHARED_DATA / "movielens_sample.txt").is_file():
        pytest.skip(f"sample data {SHARED_DATA} not found (set TFINPUT_SHARED_DATA)")
    out = example_output("movielens-retrieval")
    assert "wrote 200 rows to 2 parquet file(s)" in out
    assert "candidate.ids.genres [32, 5], candidate.weights.genres [32, 5]" in out
    assert "corpus: 187 unique movies; held-out queries: 40" in out
    first = number(r"train loss ([0-9.]+) ->", out)
    last = number(r"train loss [0-9.]+ -> ([0-9.]+)", out)
    assert 0.0 < last < first
    assert 0.0 <= number(r"(?m)^recall@10: ([0-9.]+)", out) <= 1.0
