"""docs/serving.md: every code block runs as written, in order, in one namespace, in an
empty working directory (the runner is tests/test_docs_resume.py's)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.test_docs_resume import ROOT, blocks, script

DOC = ROOT / "docs" / "serving.md"


def test_the_page_shows_export_and_its_signatures():
    kinds = [kind for kind, _ in blocks(DOC)]
    assert set(kinds) == {"python", "sh"}, kinds
    text = DOC.read_text()
    for name in ("serving_default", "serve_raw", "transform", "tfinput export"):
        assert name in text
    compile(script(DOC), "docs/serving.md", "exec")


@pytest.mark.slow
def test_every_code_block_runs(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "KERAS_BACKEND": "tensorflow",
    }
    proc = subprocess.run(
        [sys.executable, "-c", script(DOC)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert out.rstrip().endswith("DOC OK")
    assert "(8,)" in out and "['dense', 'ids', 'weights']" in out
    assert (tmp_path / "served" / "saved_model.pb").is_file()
