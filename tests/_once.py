"""One expensive run shared by the tests of a module, across pytest-xdist's workers.

A module whose tests each read part of one run (several example scripts or doc pages in
one Python child, so TensorFlow is imported once) gets it through `run_once`: the first
worker to ask runs it, a worker asking meanwhile waits on a lock, later ones read the
result it saved. What the run covers is what the session selected (`selected`), the
same on every worker, so each worker's request is the same run."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def _run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory shared by every process of this test run (pytest-xdist's workers
    each have their own base temporary directory, under a common parent)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def run_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, run: Callable[[Path], Any]
) -> Any:
    """``run(directory)`` once per test run (its JSON-able result saved), else the saved
    result; ``directory`` is empty and shared by the test run's processes."""
    root = _run_root(tmp_path_factory) / "run-once"
    root.mkdir(exist_ok=True)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = root / f"{name}.json"
        if saved.exists():
            return json.loads(saved.read_text())
        directory = root / name
        directory.mkdir(exist_ok=True)
        result = run(directory)
        saved.write_text(json.dumps(result))
        return result


def selected(request: pytest.FixtureRequest, key: Callable[[pytest.Item], Any]) -> list[Any]:
    """``key(item)`` of the session's selected tests of the requesting module, in
    collection order, each once (``None``: the test needs no part of the run)."""
    keys: list[Any] = []
    for item in request.session.items:
        if getattr(item, "module", None) is request.module:
            k = key(item)
            if k is not None and k not in keys:
                keys.append(k)
    return keys
