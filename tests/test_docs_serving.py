"""docs/serving.md: every code block runs as written, in order, in one namespace, in an
empty working directory (the runner is tests/test_docs_resume.py's: one Python child runs
both pages)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_docs_resume import ROOT, blocks, page_runs, script

DOC = ROOT / "docs" / "serving.md"


def test_the_page_shows_export_and_its_signatures():
    kinds = [kind for kind, _ in blocks(DOC)]
    assert set(kinds) == {"python", "sh"}, kinds
    text = DOC.read_text()
    for name in ("serving_default", "serve_raw", "transform", "tfinput export"):
        assert name in text
    compile(script(DOC), "docs/serving.md", "exec")


@pytest.fixture(scope="module")
def doc_runs(request, tmp_path_factory) -> dict[str, list[str]]:
    return page_runs(request, tmp_path_factory)


@pytest.mark.slow
def test_every_code_block_runs(doc_runs):
    status, out, err, work = doc_runs["docs/serving.md"]
    assert status == "ok", out[-2000:] + err[-3000:]
    assert out.rstrip().endswith("DOC OK")
    assert "(8,)" in out and "['dense', 'ids', 'weights']" in out
    assert (Path(work) / "served" / "saved_model.pb").is_file()
