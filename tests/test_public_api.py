"""The public API is the list in docs/api.md, and it stays small: each package's names
are its ``__all__`` and its ``dir()``, every listed module's names resolve, the README,
the user docs and the examples name public things only, the public modules are few and
each name has one home (`test_the_public_api_stays_small_with_one_home_per_name`), and
`tuners` and `profiles` import tfinput's public names or the private module that
defines a name (its implementation, ``tfinput._src``), never a re-export of it."""

from __future__ import annotations

import ast
import collections
import functools
import importlib
import importlib.util
import pkgutil
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
    ``tfinput.cli``)."""
    return {m.split(".")[1] for m in PUBLIC_MODULES if m.startswith(f"{package}.")}


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


def _top_level(body: list[ast.stmt]):
    """A module's statements, with those under a top-level ``if`` or ``try``."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _top_level([*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            handlers = [n for h in node.handlers for n in h.body]
            yield from _top_level([*node.body, *handlers, *node.orelse, *node.finalbody])


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


@functools.cache
def _defined(module: str) -> frozenset[str]:
    """The names ``module`` defines (functions, classes, assignments, the names its
    ``__getattr__`` makes on first use) and its submodules."""
    path = ROOT / Path(*module.split("."))
    names = set()
    if path.is_dir():
        names |= {p.stem for p in path.glob("*.py")} | {
            p.parent.name for p in path.glob("*/__init__.py")
        }
        path = path / "__init__.py"
    else:
        path = path.with_suffix(".py")
    for node in _top_level(_tree(path).body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if node.name == "__getattr__":
                names |= {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return frozenset(n for n in names if isinstance(n, str))


def _defines(module: str, name: str) -> bool:
    """Whether ``module`` (a module of the three packages) defines ``name`` or has it as
    a submodule, rather than importing it."""
    return name in _defined(module)


def _is_package(module: str) -> bool:
    return (ROOT / Path(*module.split(".")) / "__init__.py").is_file()


def _imports_of(paths: list[Path]) -> list[tuple[str, int, str, str | None]]:
    """``(file, line, module, name)`` for each import of the three packages in
    ``paths`` (``name`` None for ``import module``)."""
    found = []
    for path in paths:
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and not node.level:
                module = node.module or ""
                if module.split(".")[0] in PACKAGES:
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found += [(where, node.lineno, module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                found += [
                    (where, node.lineno, a.name, None)
                    for a in node.names
                    if a.name.split(".")[0] in PACKAGES
                ]
    return found


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


def test_tuners_and_profiles_import_public_names_or_the_defining_module():
    """`tuners` and `profiles` build on tfinput's public names, or on tfinput's
    implementation (``tfinput._src``: private, so the tuner's and the profiler's own
    needs do not become public API) by the module that defines what they import: a
    private module re-exports nothing."""
    paths = [
        p for package in ("tuners", "profiles") for p in sorted((ROOT / package).rglob("*.py"))
    ]
    bad = []
    for where, _, module, name in _imports_of(paths):
        if not module.startswith("tfinput"):
            continue
        if name is None:
            ok = _resolves(module) or _private(module)
        elif _private(module):
            ok = _defines(module, name)
        else:
            ok = _resolves(f"{module}.{name}")
        if not ok:
            bad.append(f"{where}: {module} {name or ''}")
    assert bad == []


#: Where code imports from: the three packages, their tests, the benchmarks, the examples.
IMPORTERS = ("tfinput", "tuners", "profiles", "tests", "benchmarks", "examples")


def test_a_private_module_is_imported_from_the_module_that_defines_the_name():
    """``from <private module> import name`` names the module that defines ``name``:
    private modules re-export nothing, for other packages or for tests."""
    paths = [p for folder in IMPORTERS for p in sorted((ROOT / folder).rglob("*.py"))]
    bad = [
        f"{where}: from {module} import {name}"
        for where, _, module, name in _imports_of(paths)
        if name and _private(module) and not _defines(module, name)
    ]
    assert bad == []


def test_private_modules_declare_no_all_and_no_re_exports():
    """A private module (a part of its path starts with ``_``) has no ``__all__`` and no
    ``from x import Name as Name`` lines: what it offers others is what it defines."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if not any(p.startswith("_") and p != "__init__" for p in parts):
                continue
            for node in ast.walk(_tree(path)):
                if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: __all__")
                elif isinstance(node, ast.ImportFrom):
                    found += [
                        f"{path.relative_to(ROOT)}:{node.lineno}: {a.name} as {a.asname}"
                        for a in node.names
                        if a.asname == a.name
                    ]
    assert found == []


#: Issue 64's limits: public modules (the three packages included), distinct public
#: names, and objects exported twice (by their home and a root shortcut).
MAX_MODULES, MAX_NAMES, MAX_SHORTCUTS = 29, 250, 30


def _walk(package: str):
    """``package`` and every module under it whose dotted path has no part starting with
    ``_`` (the entry scripts, ``__main__``, aside)."""
    yield package
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if info.name.startswith("_"):
            continue
        if info.ispkg:
            yield from _walk(f"{package}.{info.name}")
        else:
            yield f"{package}.{info.name}"


def _key(name: str, value: object) -> tuple:
    """What a public name stands for: the object, or a constant's value."""
    if value is None or isinstance(value, (int, float, str, bytes, tuple, frozenset)):
        return ("value", name, repr(value))
    return ("object", id(value))


def test_the_public_api_stays_small_with_one_home_per_name():
    """At most 29 public modules and 250 distinct public names (a module's ``__all__``,
    or its public names); an object is exported by one module, or by its home and a
    root shortcut (``tfinput``, ``tuners``, ``profiles``), with at most 30 shortcuts;
    no name stands for two things. docs/api.md lists exactly these modules."""
    modules = [m for package in PACKAGES for m in _walk(package)]
    assert sorted(modules) == sorted(PUBLIC_MODULES), "docs/api.md's table is not the tree"
    assert len(modules) <= MAX_MODULES, modules
    exporters: dict[tuple, set[str]] = collections.defaultdict(set)
    meanings: dict[str, set[tuple]] = collections.defaultdict(set)
    for module in modules:
        imported = importlib.import_module(module)
        for name in _public(module):
            key = _key(name, getattr(imported, name))
            exporters[key].add(module)
            meanings[name].add(key)
    assert len(meanings) <= MAX_NAMES, len(meanings)
    twice = {key: sorted(where) for key, where in exporters.items() if len(where) > 1}
    not_a_shortcut = [
        where for where in twice.values() if len(where) > 2 or len(set(where) & set(PACKAGES)) != 1
    ]
    assert not_a_shortcut == []
    assert len(twice) <= MAX_SHORTCUTS, len(twice)
    assert sorted(name for name, keys in meanings.items() if len(keys) > 1) == []


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
