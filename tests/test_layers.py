"""Imports run downwards through tfinput's layers, and no two modules import each other.

The layers (docs/architecture.md says what each owns):

0. **core**: schema, config, errors, the file formats, sources, transforms, layout,
   pipeline, resume;
1. **measurement**: windows, probes, statistics (`tfinput.measure`), the training steps
   and the built-in models they train, device prefetch;
2. **applications and integrations**: everything else in ``tfinput`` (bench, convert,
   inference, the CLI, TPU/SparseCore, serving, retrieval, tf.data service and fleets,
   test-data helpers), and the ``tuners`` and ``profiles`` packages.

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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tfinput", "tuners", "profiles")

#: Module prefixes of each layer below the applications (layer 2: everything else).
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "tfinput.errors",
        "tfinput._json",
        "tfinput._objects",
        "tfinput.deprecation",
        "tfinput.options",
        "tfinput._schema_checks",
        "tfinput.schema",
        "tfinput.config",
        "tfinput.formats",
        "tfinput.layout",
        "tfinput.transforms",
        "tfinput.graph",
        "tfinput.sources",
        "tfinput._service_guard",
        "tfinput._service_read",
        "tfinput._pipeline_check",
        "tfinput._pipeline_parts",
        "tfinput.pipeline",
        "tfinput.resume",
        "tfinput._resume_identity",
        "tfinput._input_iterator",
        "tfinput._keras_checkpoint",
        "tfinput._resume_verify",
    ),
    (
        "tfinput.measure",
        "tfinput.steps",
        "tfinput.models",
        "tfinput.device_prefetch",
    ),
)
LAYER_NAMES = ("core", "measurement", "applications")

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


def layer(module: str) -> int:
    if module == "tfinput":  # the public facade
        return len(LAYERS)
    for i, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    return len(LAYERS)


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
    """Neither two modules nor two packages (``tfinput.sources``, ``tfinput.bench``,
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


def test_the_layer_map_names_real_modules():
    for prefixes in LAYERS:
        for prefix in prefixes:
            assert prefix in MODULES, f"LAYERS names {prefix}, which is no module"
