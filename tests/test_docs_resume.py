"""docs/resume.md: every code block runs as written, in order, in one namespace (the
Python blocks), and its ``tfinput`` command lines exit with 0 (the sh blocks).

They run in a fresh process in an empty working directory: the page's
``MirroredStrategy()`` then sees the one CPU device a reader's machine has, not the
logical devices ``conftest.py`` sets up for the tf.distribute tests."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "resume.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(doc: Path = DOC) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(doc.read_text())]


def script(doc: Path = DOC) -> str:
    """The page as one program: Python blocks as they are, each sh line through the CLI
    (tests/test_docs_serving.py runs docs/serving.md with it too)."""
    parts = []
    for i, (kind, code) in enumerate(blocks(doc)):
        parts.append(f"print('block {i}', flush=True)")
        if kind == "python":
            parts.append(code)
            continue
        for line in code.splitlines():
            argv = shlex.split(line)
            if argv:
                assert argv[0] == "tfinput", line
                parts.append(
                    f"import tfinput.cli\nassert tfinput.cli.main({argv[1:]!r}) == 0, {line!r}"
                )
    # TensorFlow and JAX in one process sometimes abort at interpreter teardown after
    # everything has passed (see tests/tfinput/test_device_prefetch.py): leave without it.
    parts.append("print('DOC OK', flush=True)\nimport os\nos._exit(0)")
    return "\n".join(parts)


def test_the_page_has_its_recipes():
    kinds = [kind for kind, _ in blocks()]
    assert set(kinds) == {"python", "sh"}, kinds
    text = DOC.read_text()
    for recipe in ("tf.train.CheckpointManager", "KerasInputCheckpoint", "get_state"):
        assert recipe in text
    compile(script(), "docs/resume.md", "exec")


@pytest.mark.slow
def test_every_code_block_runs(tmp_path):
    pytest.importorskip("jax")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "JAX_PLATFORMS": "cpu",
    }
    proc = subprocess.run(
        [sys.executable, "-c", script()],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.rstrip().endswith("DOC OK")
