"""Every kind of server tfinput starts, started for real, and the addresses it listens on
read from the kernel's socket table (`tfinput._src.applications.cli.commands.serve`):
``tfinput serve dispatcher`` and ``serve worker``, a ``local:N`` fleet as ``bench`` and
``tune --service local:N`` start it, the local Ray instance of ``convert --engine ray``,
and the profilers ``tfinput profile`` runs (which open none). Each command's message
says what the table shows. Clients connect through loopback only; every server is
stopped at the end of its test."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tfinput._src.applications.cli.commands.serve import is_loopback, listening_addresses

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the socket table in /proc (Linux)"
)

#: Seconds a server may take to start (it imports TensorFlow; the machine may be busy).
START_S = 400


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``, and theirs, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path("/proc", entry, "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _serve(*argv: str) -> tuple[subprocess.Popen, list[str]]:
    """``tfinput serve ARGV`` started; returns it and its first two lines."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfinput.cli", "serve", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""},
    )
    lines: list[str] = []

    def read() -> None:
        for _ in range(2):
            lines.append(proc.stdout.readline().strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(START_S)
    if len(lines) < 2:
        proc.kill()
        pytest.fail(f"tfinput serve {' '.join(argv)} did not start: {lines!r}")
    return proc, lines


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def test_serve_prints_where_it_listens_and_that_anyone_who_reaches_it_can_use_it():
    procs: list[subprocess.Popen] = []
    try:
        dispatcher, d_lines = _serve("dispatcher", "--port", "0")
        procs.append(dispatcher)
        port = d_lines[0].split("listening on ", 1)[1].split()[0].rsplit(":", 1)[1]
        worker, w_lines = _serve("worker", "--dispatcher", f"localhost:{port}")
        procs.append(worker)
        for proc, lines, kind in ((dispatcher, d_lines, "dispatcher"), (worker, w_lines, "worker")):
            table = listening_addresses(proc.pid)
            assert table, f"{kind} listens on nothing?"
            # The address printed is the one in the socket table, not "localhost".
            said = lines[0].split("listening on ", 1)[1].split()[0]
            assert lines[0].startswith(f"{kind} listening on ") and said in table, (lines, table)
            assert "every interface" in lines[0] and not said.startswith("localhost")
            # TensorFlow binds every interface (no bind-host option in 2.17-2.21).
            assert not is_loopback(said) and said.rsplit(":", 1)[0] in ("[::]", "0.0.0.0")
            own_port = said.rsplit(":", 1)[1]
            assert lines[1] == (
                "tf.data service has no authentication or encryption: anyone who can reach "
                f"port {own_port} can read the data or register a worker of their own; keep "
                'the dispatcher and worker ports on a private network (docs/scaling.md, "Security")'
            )
        assert f"on this host: grpc://localhost:{port}" in d_lines[0]
        assert f"registered with dispatcher localhost:{port} as localhost:" in w_lines[0]
    finally:
        _stop(procs)


def test_a_local_fleet_listens_on_every_interface_and_its_commands_say_so(small_columnar, capsys):
    import tfinput
    from tfinput._src.applications.cli.args import service_from_args
    from tfinput.service import LocalFleet

    # What `bench` / `tune --service local:2` do at start: one line on stderr, no server yet.
    before = set(_children(os.getpid()))
    served = service_from_args(
        argparse.Namespace(service="local:2", service_workers=None),
        tfinput.columnar(small_columnar),
    )
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("--service local:2: the tf.data service dispatcher and workers")
    assert "listen on every interface, not loopback only" in err
    assert "no authentication or encryption" in err and "register a worker" in err
    assert set(_children(os.getpid())) == before  # started on first use, not here
    assert served.describe()["service"]
    with LocalFleet(max_workers=1, startup_timeout=START_S) as fleet:
        address = fleet.address_for(1)
        assert address.startswith("grpc://localhost:")
        servers = [p for p in _children(os.getpid()) if p not in before]
        tables = {pid: listening_addresses(pid) for pid in servers}
        assert len(servers) == 2 and all(tables.values()), tables
        listened = [a for table in tables.values() for a in table]
        assert f"[::]:{address.rsplit(':', 1)[1]}" in listened  # the dispatcher
        assert not [a for a in listened if is_loopback(a)], listened


_RAY = """
import contextlib, io, json, os, sys
sys.path.insert(0, sys.argv[1])
import ray
from tests.test_open_ports import _children
from tfinput._src.applications.cli.registry import main
from tfinput._src.applications.convert.ray_engine import _start_ray
from tfinput._src.applications.cli.commands.serve import listening_addresses
_start_ray(ray, None, 1)  # what convert --engine ray does without --ray-address
try:
    pids = [os.getpid(), *_children(os.getpid())]
    tables = {pid: listening_addresses(pid) for pid in pids}
    # The command itself (it converts on the instance already running): its stderr.
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["convert", sys.argv[2], "--out", sys.argv[3], "--engine", "ray"])
    print(json.dumps({"tables": tables, "code": code, "stderr": err.getvalue()}), flush=True)
finally:
    ray.shutdown()
"""


def test_the_local_ray_instance_listens_on_every_interface_and_convert_says_so(tmp_path):
    pytest.importorskip("ray.data")
    from tfinput._src.applications.cli.commands.convert import LOCAL_RAY_OPEN

    csv = tmp_path / "rows.csv"
    csv.write_text("a,b,label\n1,x,0\n2,y,1\n")
    proc = subprocess.run(
        [sys.executable, "-c", _RAY, str(Path(__file__).parents[1]), str(csv), str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    listened = [a for table in seen["tables"].values() for a in table or ()]
    wildcard = [a for a in listened if a.rsplit(":", 1)[0] in ("[::]", "0.0.0.0")]
    # Ray's core servers (GCS, raylet, the driver's and a worker's) bind every interface.
    assert len(wildcard) >= 3, seen["tables"]
    assert seen["code"] == 0 and seen["stderr"].count(LOCAL_RAY_OPEN) == 1, seen
    assert "listens on every interface, not loopback only" in LOCAL_RAY_OPEN


def test_the_profilers_tfinput_profile_runs_open_no_port(tmp_path):
    import tensorflow as tf

    before = set(listening_addresses() or ())
    tf.profiler.experimental.start(str(tmp_path / "tf"))
    try:
        during_tf = set(listening_addresses() or ())
    finally:
        tf.profiler.experimental.stop()
    jax_profiler = pytest.importorskip("jax.profiler")
    jax_profiler.start_trace(str(tmp_path / "jax"))
    try:
        during_jax = set(listening_addresses() or ())
    finally:
        jax_profiler.stop_trace()
    assert during_tf <= before and during_jax <= before, (before, during_tf, during_jax)


_GRPC_LOCAL = """
import os
import tensorflow as tf
svc = tf.data.experimental.service
try:
    svc.DispatchServer(svc.DispatcherConfig(port=0, protocol="grpc+local"))
    print("started", flush=True)
except Exception as e:
    print(e, flush=True)
os._exit(0)  # the half-built server's destructor may crash the process at exit
"""


def test_tensorflow_offers_no_loopback_only_server():
    """What the docs say: no host to bind in the configs, and TensorFlow's loopback-only
    credentials (``grpc+local``) are not in the pip package."""
    from tensorflow.core.protobuf import service_config_pb2

    for config in (service_config_pb2.DispatcherConfig, service_config_pb2.WorkerConfig):
        fields = {f.name for f in config.DESCRIPTOR.fields}
        assert "port" in fields and not {"host", "bind_address", "listen_address"} & fields
    proc = subprocess.run(
        [sys.executable, "-c", _GRPC_LOCAL],
        capture_output=True,
        text=True,
        timeout=START_S,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert "No credentials factory has been registered for protocol grpc+local" in proc.stdout, (
        proc.stdout + proc.stderr[-2000:]
    )
