"""The tests mirror one package tree: the implementation's.

``tests/tfinput/<layer>/.../test_<name>.py`` tests ``tfinput/_src/<layer>/.../<name>.py``
(``tests/tfinput/core/test_schema.py`` tests ``tfinput/_src/core/schema.py``, and the
public ``tfinput.schema`` that re-exports it); ``tests/tuners/`` and ``tests/profiles/``
mirror their packages the same way. Every module whose name is public (no leading
underscore) has its test module, or is tested with its package's modules in the
package's ``test_<package>.py`` (``tests/tfinput/core/service/test_service.py`` for
``tfinput/_src/core/service/``); a package whose ``__init__.py`` defines functions or
classes (not only the lazy ``__getattr__``) has ``test_<package>.py`` in its folder.
Private modules (``_name.py``) are tested through the module that uses them, or by
``test_name.py`` of their own. The public facades outside ``_src`` define nothing and
have no test module of their own (``tests/test_public_api.py`` checks them). Tests that
cross modules (bad input on every source, exactly-once reading, the examples and
scripts, import boundaries) live at the top of ``tests/``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "tfinput" / "_src"
LAZY = {"__getattr__", "__dir__"}


def _defines_api(init: Path) -> bool:
    tree = ast.parse(init.read_text())
    return any(
        isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name not in LAZY
        for node in tree.body
    )


def _mirrored() -> dict[Path, Path]:
    """Library folder -> its test folder: ``tfinput/_src/X`` -> ``tests/tfinput/X``,
    ``tuners`` -> ``tests/tuners``, ``profiles`` -> ``tests/profiles``."""
    folders = {SRC: ROOT / "tests" / "tfinput"}
    for package in ("tuners", "profiles"):
        folders[ROOT / package] = ROOT / "tests" / package
    return folders


def _library_modules():
    """(library module, its test module, whether the test module is required)."""
    for root, tests in _mirrored().items():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root)
            if "__pycache__" in rel.parts:
                continue
            if rel.name == "__init__.py":
                if rel.parent == Path("."):
                    name, required = root.name, _defines_api(path)
                else:
                    name, required = rel.parent.name, _defines_api(path)
                yield path, tests / rel.parent / f"test_{name.lstrip('_')}.py", required
            else:
                private = rel.name.startswith("_")
                yield path, tests / rel.parent / f"test_{rel.stem.lstrip('_')}.py", not private


def expected_test_modules() -> dict[str, Path]:
    """Library module (repository-relative) -> the test module that must exist."""
    return {
        str(path.relative_to(ROOT)): test for path, test, required in _library_modules() if required
    }


def _package_test(test: Path) -> Path:
    """The test module of the package a module sits in (``tests/.../service/test_service.py``
    for ``service/guard.py``): one room's modules may be tested together there."""
    return test.parent / f"test_{test.parent.name}.py"


def test_every_library_module_has_its_test_module():
    missing = {
        module: str(test.relative_to(ROOT))
        for module, test in expected_test_modules().items()
        if not test.is_file() and not _package_test(test).is_file()
    }
    assert not missing, f"library modules without their test module: {missing}"


def test_no_test_module_without_a_library_module():
    """Every test module inside the mirrored folders tests a module that exists (a
    second test module for one library module adds a suffix:
    ``test_storage_postgres.py``), and every test folder mirrors a library folder."""
    allowed = {test for _, test, _ in _library_modules()}
    for root, tests in _mirrored().items():
        for test in tests.rglob("test_*.py"):
            folder = root / test.parent.relative_to(tests)
            assert folder.is_dir(), (
                f"{test.relative_to(ROOT)}: {folder.relative_to(ROOT)} is no library folder"
            )
            ok = any(
                t.parent == test.parent and (t == test or test.stem.startswith(t.stem + "_"))
                for t in allowed
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
