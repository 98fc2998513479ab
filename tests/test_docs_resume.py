"""docs/resume.md: every code block runs as written, in order, in one namespace (the
Python blocks), and its ``tfinput`` command lines exit with 0 (the sh blocks).

They run in a Python child in an empty working directory (the child runs
docs/serving.md's blocks too, each page in its own directory and namespace): the page's
``MirroredStrategy()`` then sees the one CPU device a reader's machine has, not the
logical devices ``conftest.py`` sets up for the tf.distribute tests."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
from pathlib import Path

import pytest

from tests._once import run_once, run_programs

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "resume.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(doc: Path = DOC) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(doc.read_text())]


def script(doc: Path = DOC, *, exit: bool = True) -> str:
    """The page as one program: Python blocks as they are, each sh line through the CLI
    (tests/test_docs_serving.py runs docs/serving.md with it too); ``exit``: it ends
    its process."""
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
    parts.append("print('DOC OK', flush=True)")
    if exit:
        # TensorFlow and JAX in one process sometimes abort at interpreter teardown after
        # everything has passed (see tests/tfinput/core/test_device_prefetch.py): leave without it.
        parts.append("import os\nos._exit(0)")
    return "\n".join(parts)


def test_the_page_has_its_recipes():
    kinds = [kind for kind, _ in blocks()]
    assert set(kinds) == {"python", "sh"}, kinds
    text = DOC.read_text()
    for recipe in ("tf.train.CheckpointManager", "KerasInputCheckpoint", "get_state"):
        assert recipe in text
    compile(script(), "docs/resume.md", "exec")


#: The test that runs each page's blocks, and its page.
PAGE_TESTS = {
    "tests/test_docs_serving.py::test_every_code_block_runs": "docs/serving.md",
    "tests/test_docs_resume.py::test_every_code_block_runs": "docs/resume.md",
}


def _run_pages(pages: list[str], directory: Path) -> dict[str, list[str]]:
    """This page's and docs/serving.md's programs in turn in one child (one TensorFlow
    import for both; tests/test_docs_serving.py reads its page's share), each in its own
    empty working directory: page -> [status, stdout, stderr, its directory]."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "KERAS_BACKEND": "tensorflow",
        "JAX_PLATFORMS": "cpu",
    }
    programs = {page: script(ROOT / page, exit=False) for page in pages}
    return run_programs(programs, directory, env, timeout=1200)


def page_runs(request: pytest.FixtureRequest, tmp_path_factory) -> dict[str, list[str]]:
    """page -> [status, stdout, stderr, its directory], for the pages whose test the
    session selected: run once per test run, in one child."""
    pages = [PAGE_TESTS[i.nodeid] for i in request.session.items if i.nodeid in PAGE_TESTS]
    if importlib.util.find_spec("jax") is None:  # the page's JAX recipe needs it
        pages = [p for p in pages if p != "docs/resume.md"]
    return run_once(tmp_path_factory, "doc-blocks", lambda d: _run_pages(pages, d))


@pytest.fixture(scope="module")
def doc_runs(request, tmp_path_factory) -> dict[str, list[str]]:
    return page_runs(request, tmp_path_factory)


@pytest.mark.slow
def test_every_code_block_runs(doc_runs):
    pytest.importorskip("jax")
    status, out, err, _ = doc_runs["docs/resume.md"]
    assert status == "ok", out[-2000:] + err[-3000:]
    assert out.rstrip().endswith("DOC OK")
