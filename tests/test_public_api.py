"""The public API is the list in docs/api.md: each package's names are its ``__all__``,
every listed module declares and resolves its ``__all__``, the README, the user docs and
the examples name public things only, and `tuners` and `profiles` build on tfinput's
public names only."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = (ROOT / "docs" / "api.md").read_text()
PACKAGES = ("tfinput", "tuners", "profiles")


def _section(marker: str) -> str:
    start = API.index(f"<!-- {marker} -->")
    return API[start : API.index("<!-- end -->", start)]


#: The public modules of tfinput (docs/api.md's table) and the three packages.
PUBLIC_MODULES = (*PACKAGES, *re.findall(r"^\| `([a-z_.]+)` \|", _section("modules"), re.M))


def _public(module: str) -> set[str]:
    return set(importlib.import_module(module).__all__)


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_exports_the_documented_names(package):
    documented = re.findall(r"`([A-Za-z_]+)`", _section(f"names: {package}"))
    assert len(documented) == len(set(documented))
    assert set(documented) == _public(package)


@pytest.mark.parametrize("module", PUBLIC_MODULES[len(PACKAGES) :])
def test_every_public_module_declares_names_that_resolve(module):
    imported = importlib.import_module(module)
    assert imported.__doc__, f"{module} has no docstring"
    missing = [name for name in imported.__all__ if not hasattr(imported, name)]
    assert missing == []
    assert all(not name.startswith("_") for name in imported.__all__)


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a public module, or a public name of one (longest prefix)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        if module in PUBLIC_MODULES:
            rest = parts[i:]
            return not rest or rest[0] in _public(module)
    return False


_DOTTED = re.compile(r"(?<![\w./-])((?:tfinput|tuners|profiles)(?:\.[A-Za-z_]\w*)+)(?![\w/])")
_FROM = re.compile(r"from ((?:tfinput|tuners|profiles)[\w.]*) import (\([^)]*\)|[^\n]+)")


def _references(text: str) -> set[str]:
    """Dotted names of the three packages in ``text``, and ``from x import a, b`` as
    ``x.a``, ``x.b``."""
    refs = set(_DOTTED.findall(text))
    for module, names in _FROM.findall(text):
        for name in re.split(r"[\s,()]+", names):
            if name and name != "as" and re.fullmatch(r"[A-Za-z_]\w*", name):
                refs.add(f"{module}.{name}")
    return {r for r in refs if not re.search(r"\.(json|md|py|db|log)$", r)}


def _user_docs() -> list[Path]:
    # architecture.md names internal modules to explain them; api.md defines the list.
    internal = ("architecture.md", "api.md")
    docs = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in internal]
    return [ROOT / "README.md", *docs, *sorted((ROOT / "examples").glob("*.py"))]


@pytest.mark.parametrize("path", _user_docs(), ids=lambda p: p.name)
def test_readme_docs_and_examples_name_public_things_only(path):
    text = path.read_text()
    private = sorted(r for r in _references(text) if not _resolves(r))
    assert private == [], f"{path.name} names what docs/api.md does not list"


def test_tuners_and_profiles_build_on_public_tfinput_names_only():
    bad = []
    for package in ("tuners", "profiles"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfinput"):
                    names = [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names if a.name.startswith("tfinput")]
                else:
                    continue
                bad += [
                    f"{path.relative_to(ROOT)}:{node.lineno}: {n}"
                    for n in names
                    if not _resolves(n)
                ]
    assert bad == []


def test_modules_made_private_keep_their_old_names_for_a_release():
    import importlib
    import sys

    import tuners

    for old in ("study", "space", "result", "storage"):
        sys.modules.pop(f"tuners.{old}", None)
        with pytest.warns(DeprecationWarning, match=rf"tuners\.{old} is private now"):
            module = importlib.import_module(f"tuners.{old}")
        assert module is importlib.import_module(f"tuners._{old}")
    with pytest.warns(DeprecationWarning):
        sys.modules.pop("tuners.space", None)
        from tuners.space import SearchSpace
    assert SearchSpace is tuners.SearchSpace


def test_profiles_modules_made_private_keep_their_old_names_for_a_release():
    import importlib
    import sys

    import profiles

    for old in ("analysis", "report", "stages"):
        sys.modules.pop(f"profiles.{old}", None)
        with pytest.warns(DeprecationWarning, match=rf"profiles\.{old} is private now"):
            module = importlib.import_module(f"profiles.{old}")
        assert module is importlib.import_module(f"profiles._{old}")
    assert importlib.import_module("profiles.analysis").analyze is profiles.analyze
    # ``profiles.capture`` is also the function: importing the module keeps it so.
    from profiles.capture import CaptureConfig

    assert CaptureConfig is profiles.CaptureConfig and callable(profiles.capture)
    assert not isinstance(profiles.capture, type(profiles))
