"""Docstrings say what a thing does and its contract: no issue numbers, dates, one
machine's figures or change histories (those live in docs/ and benchmarks/RESULTS.md,
where they can be dated and measured again)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: What does not age well in a docstring, by kind. Upstream bug references
#: (``tensorflow/tensorflow#50252``) are allowed: they name why a workaround exists.
AGES_BADLY = {
    "issue number": re.compile(r"\bissues?\s*#?\d+|(?<![\w/.-])#\d{2,}\b", re.I),
    "date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "one machine": re.compile(r"\b(H100|H200|A100|\d+-core)\b"),
    "history": re.compile(
        r"\b(used to|previously|formerly|until now|this session|last session)\b",
        re.I,
    ),
}


def _docstring_lines():
    for package in ("tfinput", "tuners", "profiles"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
                doc = ast.get_docstring(node, clean=False) if isinstance(node, kinds) else None
                for i, line in enumerate((doc or "").splitlines()):
                    yield f"{path.relative_to(ROOT)}:{node.body[0].lineno + i}", line


def test_docstrings_carry_no_issue_numbers_dates_machine_figures_or_histories():
    found = [
        f"{where}: [{kind}] {line.strip()}"
        for where, line in _docstring_lines()
        for kind, pattern in AGES_BADLY.items()
        if pattern.search(line)
    ]
    assert found == []


def test_the_patterns_catch_what_they_are_for():
    samples = {
        "issue number": "fixed in issue 31",
        "date": "measured on 2026-11-27",
        "one machine": "270k examples/s on a 16-core H100 host",
        "history": "this used to copy every batch",
    }
    for kind, text in samples.items():
        assert AGES_BADLY[kind].search(text), kind
    assert not AGES_BADLY["issue number"].search("(tensorflow/tensorflow#50252)")
