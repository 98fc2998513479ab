"""The tests mirror the packages: every public library module has its own test module.

A public module (``tfinput/schema.py``, a facade over ``tfinput/_src/core/schema.py``) is
tested by ``tests/tfinput/test_schema.py``; an implementation module that no public
module re-exports (``tfinput/_src/core/sources/parquet.py``) by its mirror,
``tests/tfinput/_src/core/sources/test_parquet.py``; a package whose ``__init__.py``
defines public functions or classes (not only the lazy ``__getattr__``) by
``tests/<package>/test_<package>.py``. Private modules (``_name.py``) are tested through
the module that uses them, or by ``test_name.py`` of their own (``tuners._study`` by
``tests/tuners/test_study.py``). Tests that cross modules (bad input on every source,
exactly-once reading, the examples, import boundaries) live at the top of ``tests/``."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tfinput", "tuners", "profiles")
LAZY = {"__getattr__", "__dir__"}


def _defines_api(init: Path) -> bool:
    tree = ast.parse(init.read_text())
    return any(
        isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name not in LAZY
        for node in tree.body
    )


@functools.cache
def facade_targets() -> frozenset[Path]:
    """The implementation modules a public module re-exports (tested through it)."""
    found = set()
    for path in (ROOT / "tfinput").rglob("*.py"):
        if "_src" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfinput._src"):
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("tfinput._src")]
            for name in names:
                module = ROOT.joinpath(*name.split("."))
                found.add(module / "__init__.py" if module.is_dir() else module.with_suffix(".py"))
    return frozenset(found)


def expected_test_modules() -> dict[str, Path]:
    """Library module (repository-relative) -> the test module that must exist."""
    want: dict[str, Path] = {}
    tested_through_facade = facade_targets()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if path in tested_through_facade:
                continue
            if rel.name == "__init__.py":
                if not _defines_api(path):
                    continue
                test = ROOT / "tests" / rel.parent / f"test_{rel.parent.name}.py"
            elif rel.name.startswith("_"):
                continue
            else:
                test = ROOT / "tests" / rel.parent / f"test_{rel.stem}.py"
            want[str(rel)] = test
    return want


def test_every_public_module_has_its_test_module():
    missing = {
        module: str(test.relative_to(ROOT))
        for module, test in expected_test_modules().items()
        if not test.is_file()
    }
    assert not missing, f"library modules without their test module: {missing}"


def _private_modules() -> set[Path]:
    """The test module any module may have (``_study.py`` -> ``test_study.py``,
    ``columnar/source.py`` -> ``test_source.py``), and a package's (``inference/`` ->
    ``test_inference.py``)."""
    allowed = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT)
            if rel.name == "__init__.py":
                name = rel.parent.name
            elif rel.name.startswith("_") and not rel.name.startswith("__"):
                name = rel.stem
            else:
                name = rel.stem
            allowed.add(ROOT / "tests" / rel.parent / f"test_{name.lstrip('_')}.py")
    return allowed


def test_no_test_module_without_a_library_module():
    """A test module inside the mirrored folders tests a module that exists (a second
    module for one library module adds a suffix: ``test_storage_postgres.py``)."""
    want = set(expected_test_modules().values()) | _private_modules()
    for package in PACKAGES:
        for test in (ROOT / "tests" / package).rglob("test_*.py"):
            ok = any(
                t.parent == test.parent and (t == test or test.stem.startswith(t.stem + "_"))
                for t in want
            )
            assert ok, f"{test.relative_to(ROOT)} mirrors no library module"


def test_the_matrix_split_names_real_modules_with_reasons():
    """tests/ends.toml names existing test modules and tests, each with its end and a
    reason, and never a whole folder: a new test runs on both ends unless it or its
    module is listed. No reason cites a CI run or a machine's timings."""
    import re

    from tests._ends import ENDS, FILE, SLOW_LIST, load

    plan = load()
    figures = re.compile(r"\bCI runs? \d|\b\d+(\.\d+)? ?s\b|\b\d+-core\b")
    for line in FILE.read_text().splitlines():
        assert not figures.search(line), f"tests/ends.toml: no run numbers or timings: {line}"

    def exists(test: str) -> None:
        module, name = test.split("[")[0].split("::")
        assert f"def {name}(" in (ROOT / module).read_text(), test

    for module, entry in plan.modules.items():
        assert (ROOT / module).is_file() and module.endswith(".py"), module
        assert entry.end in ENDS, f"{module}: the end is one of {ENDS}, not {entry.end!r}"
        assert len(entry.reason.split()) >= 8, f"{module}: say why the other end cannot differ"
    for test in plan.slow:
        exists(test)
    for test, split in plan.split.items():  # the cases are checked at collection
        exists(test)
        assert split.oldest and test.split("::")[0] not in plan.modules, test
        assert len(split.reason.split()) >= 8, f"{test}: say why each end's cases suffice"
    for test, entry in plan.tests.items():
        exists(test)
        assert entry.end in ENDS and test.split("::")[0] not in plan.modules, test
        assert test.split("[")[0] not in plan.split, test
        assert len(entry.reason.split()) >= 8, f"{test}: say where the other end runs that path"
    listed = [line for line in SLOW_LIST.read_text().splitlines() if not line.startswith("#")]
    assert all(line.startswith("tests/") and "::" in line for line in listed)
