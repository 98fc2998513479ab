"""The runnable examples stay runnable (smoke runs with small data), each run as a
script, all in one Python child."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._once import run_once, selected
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

# The scripts run in turn in one Python child, each as ``python SCRIPT ARGS`` runs it
# (``__main__``, its own ``sys.argv``, its folder first on ``sys.path``), its stdout and
# stderr (file descriptors 1 and 2, TensorFlow's C++ lines included) in files of its
# own, its exit code in the status file: one TensorFlow and Keras import for all.
_IN_TURN = """
import json, os, runpy, sys, traceback

plan, status_path = json.loads(sys.argv[1]), sys.argv[2]
status = {}
for name, script, args, out_path, err_path in plan:
    saved = os.dup(1), os.dup(2)
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.argv = [script, *args]
        sys.path.insert(0, os.path.dirname(script))
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        del sys.path[0]
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
    status[name] = code
    with open(status_path, "w") as f:
        json.dump(status, f)
"""


def _run_examples(names: list[str], directory: Path) -> dict[str, list]:
    """Run the named examples in one child: name -> [exit code, stdout, stderr]."""
    env = dict(os.environ)
    env["TFINPUT_DATA_DIR"] = str(SHARED_DATA)
    plan = [
        [n, str(EXAMPLES / RUNS[n][0]), RUNS[n][1], str(directory / f"{n}.out"),
         str(directory / f"{n}.err")]
        for n in names
    ]  # fmt: skip
    status = directory / "status.json"
    proc = subprocess.run(
        [sys.executable, "-c", _IN_TURN, json.dumps(plan), str(status)],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
    )
    codes = json.loads(status.read_text()) if status.exists() else {}
    results = {}
    for name, _, _, out, err in plan:
        said = [Path(p).read_text(errors="replace") if Path(p).exists() else "" for p in (out, err)]
        if proc.returncode != 0:  # the child died, or failed at its exit
            said[1] += f"\n[the examples' process exited with {proc.returncode}]\n"
            said[1] += proc.stdout[-2000:] + proc.stderr[-3000:]
        results[name] = [codes.get(name, -1) if proc.returncode == 0 else -1, *said]
    return results


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
        code, out, err = results[name]
        assert code == 0, out[-2000:] + err[-3000:]
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
