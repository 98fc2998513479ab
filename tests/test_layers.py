"""Imports run downwards through tfinput's layers, and no two modules import each other.

The layers are directories of ``tfinput/_src`` (docs/architecture.md says what each owns):

0. **core** (``tfinput/_src/core``): schema, config, errors, the file formats, sources,
   transforms, layout, pipeline, resume, device prefetch, tf.data service;
1. **measurement** (``tfinput/_src/measurement``): windows, probes, statistics, configs
   side by side and the roofline, the training steps and the models they train;
2. **applications and integrations** (``tfinput/_src/applications``): convert,
   inference, the CLI, TPU/SparseCore, serving, retrieval, test-data helpers; and the
   ``tuners`` and ``profiles`` packages beside it.

The public modules outside ``tfinput/_src`` (``tfinput/schema.py``, ...) re-export the
implementation: each sits in the layer of what it re-exports, and no implementation
module imports one (the implementation imports the implementation). ``tuners`` and
``profiles`` import tfinput's public names, or a name from the ``tfinput._src`` module
that defines it (tests/test_public_api.py).

Every import counts, at module level or inside a function (an import moved into a
function to dodge a cycle is a cycle all the same), ``TYPE_CHECKING`` ones too. ``from
package import submodule`` is an import of the submodule. The ``tfinput`` package's own
``__init__`` (the public facade that re-exports names lazily) sits above everything.

What the restructuring has not removed yet is listed in `KNOWN_UPWARD` and
`KNOWN_CYCLES`, each with the reason; the test fails on anything new, and on a listed
entry that is gone (delete it from the list: the list only shrinks).
"""

from __future__ import annotations

import ast
import collections
import functools
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tfinput", "tuners", "profiles")

#: The layer directories, lowest first (``tuners`` and ``profiles`` are applications).
LAYERS = ("tfinput._src.core", "tfinput._src.measurement", "tfinput._src.applications")
LAYER_NAMES = ("core", "measurement", "applications", "the tfinput root")

#: (importer, imported) -> why it is still there.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}

#: Sets of modules, or of packages, that import each other -> why the cycle is still there.
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _owner(dotted: str) -> str | None:
    """The module ``dotted`` names, or the module that defines it (a name in it)."""
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


@functools.cache
def imports() -> frozenset[tuple[str, str]]:
    """Every (importer, imported) pair of modules of the three packages."""
    edges = set()
    for module, path in MODULES.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                    for a in node.names
                ]
            for target in targets:
                owner = _owner(target)
                if owner and owner != module:
                    edges.add((module, owner))
    return frozenset(edges)


def _in(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def facades() -> dict[str, set[str]]:
    """Each module of ``tfinput`` outside ``_src`` (but the root) -> what it imports."""
    out: dict[str, set[str]] = collections.defaultdict(set)
    for a, b in imports():
        if _in(a, "tfinput") and not _in(a, "tfinput._src") and a != "tfinput":
            out[a].add(b)
    return out


@functools.cache
def layer(module: str) -> int:
    """The layer of ``module``: its ``_src`` directory; ``tuners``/``profiles`` are
    applications; a public module is in the highest layer it re-exports from."""
    if module == "tfinput":  # the public facade of the whole package
        return len(LAYERS)
    for i, prefix in enumerate(LAYERS):
        if _in(module, prefix):
            return i
    if module in ("tfinput._src",):
        return 0
    if _in(module, "tfinput"):
        below = [layer(b) for b in facades().get(module, ()) if b != module]
        return max(below, default=0)
    return len(LAYERS) - 1


def test_imports_only_run_downwards():
    upward = {
        (a, b): f"{a} ({LAYER_NAMES[layer(a)]}) imports {b} ({LAYER_NAMES[layer(b)]})"
        for a, b in imports()
        if layer(b) > layer(a)
    }
    assert sorted(set(upward) - set(KNOWN_UPWARD)) == [], [upward[k] for k in upward]
    gone = sorted(set(KNOWN_UPWARD) - set(upward))
    assert gone == [], f"no longer imported upwards: delete from KNOWN_UPWARD: {gone}"


def _cycles(edges: set[tuple[str, str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph = collections.defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _package(module: str) -> str:
    """The unit a package-level cycle is counted in: ``tfinput.<subpackage or module>``,
    or ``tuners`` / ``profiles``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "tfinput" else parts[0]


def test_no_two_modules_or_packages_import_each_other():
    """Neither two modules nor two packages (``tfinput._src.core.sources``, ``tfinput.bench``,
    ``tuners``, ...) import each other. A package's ``__init__`` re-exporting its own
    modules is not a cycle (Python runs it before any of them); the CLI registry names
    the ``tuners`` and ``profiles`` commands as strings (its lazy command table), which
    is not an import."""
    edges = {
        (a, b)
        for a, b in imports()
        if not (MODULES[a].name == "__init__.py" and b.startswith(a + "."))
    }
    packages = {
        (_package(a), _package(b))
        for a, b in edges
        if _package(a) != _package(b) and "tfinput" not in (a, b)
    }
    cycles = set(_cycles(edges)) | set(_cycles(packages))
    assert sorted(map(sorted, cycles - set(KNOWN_CYCLES))) == []
    gone = [sorted(c) for c in set(KNOWN_CYCLES) - cycles]
    assert gone == [], f"cycle gone: delete from KNOWN_CYCLES: {gone}"


#: The three applications that measure a pipeline: ``tfinput bench`` (its public module and
#: its command), the tuner and the profiler.
SIBLINGS = {
    "bench": ("tfinput.bench", "tfinput._src.applications.cli.commands.bench"),
    "tuners": ("tuners",),
    "profiles": ("profiles",),
}


def _sibling(module: str) -> str | None:
    return next((k for k, roots in SIBLINGS.items() if any(_in(module, r) for r in roots)), None)


def test_bench_tuners_and_profiles_are_siblings():
    """Bench, the tuner and the profiler do not import one another: what they share (the
    comparison, the roofline, window plans, probes, steps) sits below them, in the
    measurement layer, which is also where every name of `tfinput.bench` comes from."""
    assert all(root in MODULES for roots in SIBLINGS.values() for root in roots)
    crossing = sorted(
        f"{a} imports {b}"
        for a, b in imports()
        if _sibling(a) and _sibling(b) and _sibling(a) != _sibling(b)
    )
    assert crossing == []
    bench_from = {b for a, b in imports() if a == "tfinput.bench"}
    assert bench_from and {LAYER_NAMES[layer(b)] for b in bench_from} == {"measurement"}


def test_no_module_names_a_type_any_to_reach_its_caller():
    """No module binds a name to ``Any`` (``Pipeline = Any``): a module that needs its
    importer's class declares what it uses as a ``Protocol``, so the call back stays
    typed and visible."""
    found = []
    for dotted, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(value, ast.Name) and value.id == "Any":
                found.append(f"{dotted}:{node.lineno}")
    assert found == []


def test_the_layers_are_the_directories_of_the_implementation():
    """``tfinput/_src`` holds the three layer packages and nothing else; every other
    module of ``tfinput`` is public (docs/api.md)."""
    assert all(prefix in MODULES for prefix in LAYERS)
    top = {m.split(".")[2] for m in MODULES if _in(m, "tfinput._src") and m != "tfinput._src"}
    assert top == {p.rpartition(".")[2] for p in LAYERS}


def test_the_implementation_never_imports_a_public_module():
    """``tfinput._src`` imports ``tfinput._src`` only: a public module is a re-export, and
    importing one from below would tie the implementation to the surface."""
    bad = sorted(
        (a, b)
        for a, b in imports()
        if _in(a, "tfinput._src") and _in(b, "tfinput") and not _in(b, "tfinput._src")
    )
    assert bad == []


def _re_exports(node: ast.stmt) -> bool:
    """``from tfinput._src.x import Name as Name`` (or ``from typing import TYPE_CHECKING``)."""
    return isinstance(node, ast.ImportFrom) and (
        (
            (node.module or "").startswith("tfinput._src.")
            and all(alias.asname == alias.name for alias in node.names)
        )
        or (node.module == "typing" and [a.name for a in node.names] == ["TYPE_CHECKING"])
    )


def test_public_modules_only_re_export():
    """A public module of ``tfinput`` is one style: its docstring, then its names as
    ``from tfinput._src.x import Name as Name`` lines. A module with names that load Keras
    on first use also declares them for type checkers (``if TYPE_CHECKING:``), lists them
    in a literal ``__all__`` and imports them in its ``__getattr__``. Nothing else: no
    ``import *``, no computed ``__all__``, no code of its own (it lives in its layer).
    ``python -m tfinput.cli`` (``__main__``) is the command, not a module of names."""
    for module in set(facades()) - {"tfinput.cli.__main__"}:
        tree = ast.parse(MODULES[module].read_text())
        body = tree.body[1:] if ast.get_docstring(tree) else tree.body
        for node in body:
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                ok = all(_re_exports(n) for n in node.body)
            elif isinstance(node, ast.Assign):
                ok = ast.unparse(node.targets) == "__all__" and isinstance(node.value, ast.List)
                ok = ok and all(isinstance(e, ast.Constant) for e in node.value.elts)
            else:
                ok = _re_exports(node) or (
                    isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
                )
            assert ok, f"{module}:{node.lineno}: {ast.unparse(node)[:80]}"


def test_no_star_import_anywhere():
    stars = [
        f"{module}:{node.lineno}"
        for module, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)
    ]
    assert stars == []


#: Small rooms: the most lines a module of tfinput, tuners or profiles holds (all its
#: lines), and the most a function or method holds, counted from its ``def`` line to its
#: last (decorators excluded, the docstring included).
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def test_no_module_over_600_lines():
    """A module that grows past the limit holds more than one job: split it by concern
    into modules of its package (private ones start with ``_``)."""
    big = {
        module: lines
        for module, path in MODULES.items()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert big == {}, f"modules over {MAX_MODULE_LINES} lines: {big}"


def test_no_function_over_80_lines():
    """A function past the limit does several things: give a part to a helper named for it."""
    long = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{module}:{node.lineno} {node.name}"] = lines
    assert long == {}, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


#: Where a module may be imported by its name as a string, and why each is checked.
IMPORTS_BY_STRING = {
    # the CLI's lazy command table: its modules are imported when the parser is built
    "tfinput._src.applications.cli.registry",
    # a user's ``module:attribute`` on the command line (their code, not ours)
    "tfinput._src.core.options",
}


def test_modules_are_imported_by_string_only_where_declared():
    callers = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            by_attribute = isinstance(node, ast.Attribute) and node.attr == "import_module"
            if by_attribute or (isinstance(node, ast.Name) and node.id == "__import__"):
                callers.add(module)
    assert callers == IMPORTS_BY_STRING


#: The modules that import their heavy names on first use (a module ``__getattr__``
#: whose import statements the checks above count).
LAZY_PACKAGES = (
    "tfinput",
    "tuners",
    "tfinput.layout",
)


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_lazy_name_resolves_and_is_declared_for_type_checkers(package):
    """Each name of ``__all__`` is bound when the package is imported or is answered by
    its ``__getattr__`` (on first use), and then is also a ``TYPE_CHECKING`` import, so a
    type checker sees what the name is."""
    tree = ast.parse(MODULES[package].read_text())
    bound = {
        (alias.asname or alias.name).partition(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    bound |= {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    bound |= {
        target.id
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    imported = importlib.import_module(package)
    for name in imported.__all__:
        assert name in bound, f"{package}.{name}: neither defined nor a TYPE_CHECKING import"
        assert getattr(imported, name) is not None
