"""The public API is the list in docs/api.md: each package's names are its ``__all__``
and its ``dir()``, every listed module's names resolve, the README, the user docs and
the examples name public things only, and `tuners` and `profiles` build on tfinput's
public names only."""

from __future__ import annotations

import ast
import importlib
import re
import sys
import types
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
    """A module's public names: its ``__all__`` where it has one (the packages, and the
    modules with names imported on first use), else the names it re-exports (``from
    tfinput._src.x import Name as Name``)."""
    imported = importlib.import_module(module)
    if hasattr(imported, "__all__"):
        return set(imported.__all__)
    return {
        name
        for name, value in vars(imported).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_exports_the_documented_names(package):
    documented = re.findall(r"`([A-Za-z_]+)`", _section(f"names: {package}"))
    assert len(documented) == len(set(documented))
    assert set(documented) == _public(package)
    imported = importlib.import_module(package)
    assert [name for name in documented if getattr(imported, name, None) is None] == []


def _submodules(package: str) -> set[str]:
    """The public modules directly under ``package``: docs/api.md's table (``tfinput.bench``,
    ``tfinput.formats``) and the package's section (``tuners.options``, ``profiles.cli``)."""
    intro = API[API.index(f"### `{package}`") : API.index(f"<!-- names: {package} -->")]
    table = [m.split(".")[1] for m in PUBLIC_MODULES if m.startswith(f"{package}.")]
    return {*table, *re.findall(rf"`{package}\.(\w+)`", intro)}


@pytest.mark.parametrize("package", PACKAGES)
def test_dir_of_each_package_lists_documented_names_only(package):
    imported = importlib.import_module(package)
    listed = {name for name in dir(imported) if not name.startswith("_")}
    assert _public(package) <= listed
    assert sorted(listed - _public(package) - _submodules(package)) == []
    assert [name for name in listed if getattr(imported, name, None) is None] == []


@pytest.mark.parametrize("module", PUBLIC_MODULES[len(PACKAGES) :])
def test_every_public_module_declares_names_that_resolve(module):
    imported = importlib.import_module(module)
    assert imported.__doc__, f"{module} has no docstring"
    names = _public(module)
    assert names, f"{module} exports nothing"
    assert [name for name in names if not hasattr(imported, name)] == []
    assert all(not name.startswith("_") for name in names)


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


#: Paths modules had before they moved, never released (docs/api.md: deprecations start
#: with the first release), and the aliases that kept them.
NEVER_RELEASED = [
    "tuners.study",
    "tuners.objective",
    "profiles.analysis",
    "profiles.capture",
    "tfinput.bench.windows",
    "tfinput.columnar_records.format",
    "tfinput.columnar_records.source",
    "tfinput.steps.keras",
    "tfinput.cli.commands",
]


@pytest.mark.parametrize("old", NEVER_RELEASED)
def test_paths_never_released_do_not_import(old):
    sys.modules.pop(old, None)
    with pytest.raises(ModuleNotFoundError, match=rf"^No module named '{re.escape(old)}'"):
        importlib.import_module(old)


def test_profiles_capture_is_the_function_its_messages_name(tmp_path):
    import profiles

    assert callable(profiles.capture) and not isinstance(profiles.capture, types.ModuleType)
    assert "profiles.capture(dataset, step," in profiles.__doc__
    with pytest.raises(profiles.ProfileError, match=r"or profiles\.capture\(\), or with"):
        profiles.analyze(tmp_path)
