"""`import tfinput` (and `tuners`, `profiles`) stays light: no TensorFlow at import."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["tfinput", "tuners", "profiles"])
def test_import_does_not_load_heavy_libraries(module):
    code = (
        f"import sys, {module}; "
        "heavy = [m for m in ('tensorflow', 'keras', 'pyarrow', 'optuna', 'xprof', 'plotly') "
        "if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_api_is_deliberate():
    import tfinput

    assert "Pipeline" in tfinput.__all__ and "PipelineConfig" in tfinput.__all__
    assert tfinput.Pipeline is tfinput.pipeline.Pipeline


# ------------------------------------------------------------- boundaries (issue 10)
ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
PACKAGES = ("tfinput", "tuners", "profiles")


def _imports(package: str):
    """``(file, line, module, name)`` for every ``from X import Y`` inside ``package``."""
    import ast

    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    yield path.relative_to(ROOT), node.lineno, node.module, alias.name
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    yield path.relative_to(ROOT), node.lineno, alias.name, None


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def test_no_module_imports_another_modules_private_names():
    """A helper used across modules has a public name (in a small internal module such
    as ``tfinput._json`` if it is not API); ``from x import _y`` of a function, class or
    constant is refused. Importing an internal *module* is fine."""
    bad = [
        f"{path}:{line}: from {module} import {name}"
        for package in PACKAGES
        for path, line, module, name in _imports(package)
        if name
        and module.split(".")[0] in PACKAGES
        and name.startswith("_")
        and not name.startswith("__")
        and not _is_module(f"{module}.{name}")
    ]
    assert bad == []


def test_tfinput_does_not_depend_on_tuners_or_profiles():
    """``tuners`` and ``profiles`` build on ``tfinput``, never the reverse; the CLI
    registry names their commands as strings and imports them when it builds the parser."""
    bad = [
        f"{path}:{line}: {module}"
        for path, line, module, _ in _imports("tfinput")
        if module.split(".")[0] in ("tuners", "profiles")
    ]
    assert bad == []
