"""Opt-in diagnostics of where the suite's time goes (loaded by tests/conftest.py only
when ``TFINPUT_TEST_TIMES=FILE`` is set; README, "Development").

- ``TFINPUT_TEST_TIMES=FILE``: one JSON line per test, appended by every pytest worker:
  its wall seconds, the CPU seconds of its process (all threads) and of the child
  processes it waited for, the seconds in Python's garbage collector, and its busiest
  threads; to tell a test that waits from one that computes.
- ``TFINPUT_GC_STACKS=FILE`` as well: every thread's Python stack written to
  ``FILE.<end>.<worker>`` when one garbage collection has run for 5 s.
- ``TFINPUT_GC_NATIVE=1`` as well: the native stacks of every thread too, from gdb, run
  by a watchdog process (the collector holds the GIL).
"""

from __future__ import annotations

import faulthandler  # at import: a collection at interpreter exit cannot import it
import gc
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests._ends import END

#: The watchdog of TFINPUT_GC_NATIVE (argv: pid, flag file, output file): once per
#: collection that has run 5 s, gdb's backtrace of every thread, appended to the output.
_GC_WATCHDOG = """
import os, struct, subprocess, sys, time
pid, flag, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dumped = 0.0
while True:
    try:
        os.kill(pid, 0)
        with open(flag, "rb") as f:
            running, started = struct.unpack("<dd", f.read(16))
    except (OSError, struct.error):
        break
    if running and started != dumped and time.time() - started > 5:
        dumped = started
        with open(out, "a") as f:
            f.write("\\nNATIVE %s: a collection running %.0f s\\n" % (time.ctime(), time.time() - started))
            f.flush()
            subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
                            "-ex", "thread apply all bt 25"], stdout=f, stderr=subprocess.STDOUT,
                           timeout=120)
    time.sleep(1)
"""


# ------------------------------------------------------------- where a test's time goes
# TFINPUT_TEST_TIMES=FILE: one JSON line per test (appended, every pytest worker) with
# its wall seconds, the CPU seconds of its process (all threads) and the seconds spent
# in Python's garbage collector, to tell a test that waits from one that computes.
_TIMES = os.environ["TFINPUT_TEST_TIMES"]

_gc = {"seconds": 0.0, "full": 0, "started": 0.0}
# TFINPUT_GC_STACKS=FILE as well: every thread's Python stack written to FILE when
# one garbage collection has run for 5 s (what the collector is stuck deleting).
_stacks = None
if "TFINPUT_GC_STACKS" in os.environ:  # one file per end and worker
    _worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _stacks = open(f"{os.environ['TFINPUT_GC_STACKS']}.{END or 'all'}.{_worker}", "a")  # noqa: SIM115

# TFINPUT_GC_NATIVE=1 as well: also the native (C/C++) stacks of every thread, from
# gdb, run by a watchdog process (the collector holds the GIL, so no Python thread
# of this process could start it): what a collection blocked inside TensorFlow waits
# on. The collector's state goes to the watchdog through a shared 16-byte file.
_native = None
if _stacks is not None and os.environ.get("TFINPUT_GC_NATIVE") and shutil.which("gdb"):
    import mmap
    import struct
    import subprocess

    _flag_path = f"{_stacks.name}.flag"
    with open(_flag_path, "wb") as f:
        f.write(bytes(16))
    _flag_file = open(_flag_path, "r+b")  # noqa: SIM115
    _native = mmap.mmap(_flag_file.fileno(), 16)
    subprocess.Popen(
        [sys.executable, "-c", _GC_WATCHDOG, str(os.getpid()), _flag_path, _stacks.name],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _on_gc(phase: str, info: dict) -> None:
    if phase == "start":
        _gc["started"] = time.perf_counter()
        if _stacks is not None:
            faulthandler.dump_traceback_later(5, file=_stacks)
        if _native is not None:
            _native[:16] = struct.pack("<dd", 1.0, time.time())
    else:
        _gc["seconds"] += time.perf_counter() - _gc["started"]
        _gc["full"] += info.get("generation") == 2
        if _stacks is not None:
            faulthandler.cancel_dump_traceback_later()
        if _native is not None:
            _native[:16] = bytes(16)


gc.callbacks.append(_on_gc)


def _threads() -> dict[str, tuple[str, float]]:
    """CPU seconds of each thread of this process so far: tid -> (name, seconds)."""
    out = {}
    for task in Path("/proc/self/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[task.name] = (name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    return out


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    wall, cpu = time.perf_counter(), time.process_time()
    children = os.times()
    gc_s, full = _gc["seconds"], _gc["full"]
    before = _threads()
    yield
    after = _threads()
    busy: dict[str, float] = {}
    for tid, (name, seconds) in after.items():
        spent = seconds - before.get(tid, (name, 0.0))[1]
        busy[name] = busy.get(name, 0.0) + spent
    top = sorted(busy.items(), key=lambda kv: -kv[1])[:6]
    record = {
        "test": item.nodeid,
        "end": END,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
        "wall": round(time.perf_counter() - wall, 2),
        "cpu": round(time.process_time() - cpu, 2),
        # CPU of the child processes the test started and waited for (commands,
        # examples, servers, JAX children)
        "child_cpu": round(
            os.times().children_user
            + os.times().children_system
            - children.children_user
            - children.children_system,
            2,
        ),
        "gc": round(_gc["seconds"] - gc_s, 2),
        "full_gcs": _gc["full"] - full,
        "objects": len(gc.get_objects()) if time.perf_counter() - wall > 20 else None,
        "threads": len(after),
        "busiest": [(n, round(t, 1)) for n, t in top if t >= 0.5],
    }
    with open(_TIMES, "a") as f:
        f.write(json.dumps(record) + "\n")
