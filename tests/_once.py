"""One expensive run shared by the tests of a module, across pytest-xdist's workers.

A module whose tests each read part of one run (several example scripts or doc pages in
one Python child, so TensorFlow is imported once) gets it through `run_once`: the first
worker to ask runs it, a worker asking meanwhile waits on a lock, later ones read the
result it saved. What the run covers is what the session selected (`selected`), the
same on every worker, so each worker's request is the same run. `run_programs` runs
several programs (scripts, doc pages) in turn in one child."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

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
        shutil.rmtree(directory, ignore_errors=True)  # a worker stopped mid-run
        directory.mkdir()
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


class Script(NamedTuple):
    """A program that is a script file, run as ``python PATH ARGS`` runs it."""

    path: Path
    args: list[str]


# Programs run in turn in one Python child, each in its own empty working directory, its
# stdout and stderr (descriptors 1 and 2, TensorFlow's C++ lines included) in files of its
# own: a script as ``python SCRIPT ARGS`` runs it (``__main__``, its own ``sys.argv``, its
# folder first on ``sys.path``), Python source (a doc page) in a namespace of its own. One
# that raises or exits non-zero is recorded and the next one runs: TensorFlow and Keras
# are imported once for all. TensorFlow and JAX in one process sometimes abort at
# interpreter teardown after everything has passed: the child leaves without it.
_IN_TURN = """
import json, os, runpy, sys, traceback

plan, status_path = json.loads(sys.argv[1]), sys.argv[2]
status = {}
for name, directory, script, args, source, out_path, err_path in plan:
    saved = os.dup(1), os.dup(2)
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        os.chdir(directory)
        if script:
            sys.argv = [script, *args]
            sys.path.insert(0, os.path.dirname(script))
        try:
            if script:
                runpy.run_path(script, run_name="__main__")
            else:
                exec(compile(source, name, "exec"), {"__name__": "__main__"})
            status[name] = "ok"
        except SystemExit as e:
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
            status[name] = f"exit {e.code if isinstance(e.code, int) else 1}" if e.code else "ok"
        except BaseException:
            traceback.print_exc()
            status[name] = "failed"
        sys.stdout.flush()
        sys.stderr.flush()
        if script:
            del sys.path[0]
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
    with open(status_path, "w") as f:
        json.dump(status, f)
os._exit(0)
"""


def run_programs(
    programs: dict[str, str | Script], directory: Path, env: dict[str, str], timeout: float
) -> dict[str, list[str]]:
    """Run ``programs`` (name -> Python source, or a `Script`) in turn in one child, each
    in an empty folder under ``directory``: name -> [``ok``, ``exit N``, ``failed`` (it
    raised) or ``not finished`` (the child died first), its stdout, its stderr, its
    folder]."""
    plan = []
    for i, (name, program) in enumerate(programs.items()):
        work = directory / f"program-{i}"
        work.mkdir()
        script, args, source = (
            (str(program.path), program.args, None)
            if isinstance(program, Script)
            else (None, [], program)
        )
        plan.append([name, str(work), script, args, source, f"{work}.out", f"{work}.err"])
    status = directory / "status.json"
    proc = subprocess.run(
        [sys.executable, "-c", _IN_TURN, json.dumps(plan), str(status)],
        capture_output=True,
        text=True,
        cwd=directory,
        env=env,
        timeout=timeout,
    )
    done = json.loads(status.read_text()) if status.exists() else {}
    results = {}
    for name, work, *_, out, err in plan:
        said = [Path(p).read_text(errors="replace") if Path(p).exists() else "" for p in (out, err)]
        if name not in done:  # the child died before this program's end
            said[1] += f"\n[the child exited with {proc.returncode}]\n{proc.stderr[-3000:]}"
        results[name] = [done.get(name, "not finished"), *said, work]
    return results
