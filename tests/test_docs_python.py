"""The README's Python blocks run as printed (tests/test_docs_commands.py runs its shell
commands).

Each ```` ```python ```` block of README.md runs, unchanged, in a fresh Python process
in an empty directory holding what the README tells a reader to make first: 50k
criteo-like rows from ``tfinput datagen`` in ``data/``. It must exit with 0 within
`TIMEOUT_S`, and print what it says it prints: the lines under a ``# prints:`` comment
(each ``#   text``, a trailing two-space comment dropped) appear in its stdout, in order.
A block that cannot run on its own (it needs a TPU strategy) is in `FRAGMENTS`, keyed by
its first line, with the reason."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"^```python\n(?P<body>.*?)^```", re.S | re.M)
TIMEOUT_S = 900

#: Blocks that are fragments of a larger program, by first line: why they are not run.
FRAGMENTS = {
    "tables, feature_configs = tfinput.embedding_configs(schema, per_replica_batch_size=512)": (
        "needs a TPU strategy and a TPUEmbedding layer (docs/tpu.md; tests/tfinput/applications/test_tpu.py "
        "feeds these batches to TPUEmbeddingForServing)"
    ),
}


def python_blocks(text: str) -> list[str]:
    return [m["body"] for m in BLOCK.finditer(text)]


def expected_output(block: str) -> list[str]:
    """The lines a block says it prints: ``#   text`` lines after ``# prints:``."""
    out: list[str] = []
    lines = iter(block.splitlines())
    for line in lines:
        if line.strip() != "# prints:":
            continue
        for shown in lines:
            if not shown.startswith("#   "):
                break
            out.append(re.split(r"\s{2,}", shown[4:].strip())[0])
    return out


def test_every_python_block_is_run_or_a_named_fragment():
    blocks = python_blocks(README.read_text())
    firsts = [b.splitlines()[0] for b in blocks]
    assert set(FRAGMENTS) <= set(firsts), "a fragment named here is no longer in README.md"
    assert [f for f in firsts if f not in FRAGMENTS], "README.md has no runnable Python block"


def _runnable() -> list[str]:
    return [b for b in python_blocks(README.read_text()) if b.splitlines()[0] not in FRAGMENTS]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(_runnable())))
def test_readme_python_block_runs_as_printed(index, tmp_path):
    block = _runnable()[index]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    datagen = [sys.executable, "-m", "tfinput.cli", "datagen", "data", "--preset"]
    datagen += ["criteo-like", "--rows", "50k", "--files", "4", "--format", "parquet"]
    subprocess.run(datagen, cwd=tmp_path, env=env, check=True, capture_output=True)
    (tmp_path / "block.py").write_text(block)
    out = subprocess.run(
        [sys.executable, "block.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    printed = out.stdout.splitlines()
    want = expected_output(block)
    assert want, "the block says nothing about what it prints"
    at = 0
    for line in want:
        assert line in printed[at:], (line, printed)
        at = printed.index(line, at) + 1
    if "tuners.tune(" in block:  # its progress, as the text after the block shows it
        trials = re.findall(
            r"^tune: trial (\d+) \[[\w ]+\] \w+ .*\((\d+)/(\d+)\)", out.stderr, re.M
        )
        n = int(re.search(r"n_trials=(\d+)", block)[1])
        assert [(int(t), int(d) <= n, int(total)) for t, d, total in trials] == [
            (i, True, n) for i in range(n)
        ], out.stderr[-3000:]
        assert "left: " in out.stderr
        assert (tmp_path / "best.json").exists()
