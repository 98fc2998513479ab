"""tf.data service across two hosts, simulated as two network namespaces joined by a veth
pair: the dispatcher and a worker (`tfinput serve`) on one, the trainer on the other. A
worker started with ``--worker-address`` registers the address the trainer reaches, and
the trainer reads every row through the dispatcher; a worker left at the default
registers ``localhost``, which the trainer cannot reach, and says so at start.

Needs root and ``ip netns`` (Linux); skipped with the reason otherwise. The namespaces
are removed at the end whatever happens, and their processes killed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

ROWS = 1000
#: Seconds a server may take to start (it imports TensorFlow; the machine may be busy).
START_S = 300
SERVER, TRAINER = "10.213.0.1", "10.213.0.2"
DISPATCHER_PORT, WORKER_PORT = 5050, 5051

# The trainer: every row of the columnar files through the dispatcher (one worker, every
# row once), its stall bound short enough that a worker it cannot reach fails the test
# in seconds rather than after the default 300 s. It prints the rows or the error and
# leaves at once (a failed read's iterator would retry the worker at exit).
_TRAIN = """
import json, os, sys
import tfinput
from tfinput import service
from tfinput.config import PipelineConfig
files, dispatcher = json.loads(sys.argv[1]), sys.argv[2]
config = PipelineConfig(batch_size=100, drop_remainder=False)
ds = service.distribute(tfinput.columnar(files).build(config), dispatcher, stall_timeout_s=30)
try:
    print(json.dumps([int(r) for f, _ in ds for r in f["dense"]["row_id"].numpy()]), flush=True)
except Exception as e:
    print(json.dumps(str(e)[-2000:]), flush=True)
os._exit(0)
"""


def _netns_unavailable() -> str | None:
    """Why two network namespaces cannot be made here, or None."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    name = f"tfi-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode:
        return f"`ip netns add` is not permitted here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, text=True)


@pytest.fixture
def hosts() -> Iterator[tuple[str, str]]:
    """Two namespaces, ``(server, trainer)``, at `SERVER` and `TRAINER` on a veth pair."""
    unavailable = _netns_unavailable()
    if unavailable:
        pytest.skip(unavailable)
    tag = str(os.getpid())
    server, trainer = f"tfi-srv-{tag}", f"tfi-trn-{tag}"
    try:
        try:
            for ns in (server, trainer):
                _ip("netns", "add", ns)
                _ip("-n", ns, "link", "set", "lo", "up")
            _ip("link", "add", f"tfi{tag}s", "type", "veth", "peer", "name", f"tfi{tag}t")
            for ns, end, address in ((server, "s", SERVER), (trainer, "t", TRAINER)):
                _ip("link", "set", f"tfi{tag}{end}", "netns", ns)
                _ip("-n", ns, "addr", "add", f"{address}/24", "dev", f"tfi{tag}{end}")
                _ip("-n", ns, "link", "set", f"tfi{tag}{end}", "up")
        except subprocess.CalledProcessError as e:
            pytest.skip(f"cannot join two network namespaces here: {' '.join(e.cmd)}: {e.stderr}")
        yield server, trainer
    finally:
        # Deleting a namespace deletes its end of the pair, and the pair with it.
        for ns in (server, trainer):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", f"tfi{tag}s"], capture_output=True)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(30)


def _run_in(ns: str, *argv: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""},
        **kwargs,
    )


def _serve(procs: list[subprocess.Popen], ns: str, *argv: str) -> tuple[subprocess.Popen, str]:
    """``tfinput serve ARGV`` in namespace ``ns``; returns it and its first line."""
    proc = _run_in(ns, "-m", "tfinput.cli", "serve", *argv)
    procs.append(proc)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_S)
    if not line or "listening on" not in line[0]:
        proc.kill()
        pytest.fail(f"tfinput serve {' '.join(argv)} did not start: {line!r} {proc.stderr.read()}")
    return proc, line[0].strip()


def _stderr_after_sigterm(proc: subprocess.Popen) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    return err


def test_a_worker_registered_at_its_network_address_serves_a_trainer_on_another_host(
    hosts, procs, small_columnar
):
    server, trainer = hosts
    dispatcher = f"{SERVER}:{DISPATCHER_PORT}"
    _serve(procs, server, "dispatcher", "--port", str(DISPATCHER_PORT))
    worker, line = _serve(
        procs, server, "worker", "--dispatcher", dispatcher,
        "--port", str(WORKER_PORT), "--worker-address", SERVER,
    )  # fmt: skip
    assert line.endswith(f"registered with dispatcher {dispatcher} as {SERVER}:{WORKER_PORT}")

    read = _run_in(trainer, "-c", _TRAIN, json.dumps(small_columnar), f"grpc://{dispatcher}")
    procs.append(read)
    out, err = read.communicate(timeout=START_S)
    assert read.returncode == 0, err[-3000:]
    rows = json.loads(out.strip().splitlines()[-1])
    assert isinstance(rows, list), rows  # else the read's error
    assert sorted(rows) == list(range(ROWS))
    assert "--worker-address" not in _stderr_after_sigterm(worker)

    # The default: registered as localhost, with a warning naming the option.
    default, line = _serve(procs, server, "worker", "--dispatcher", dispatcher)
    assert f"registered with dispatcher {dispatcher} as localhost:" in line
    err = _stderr_after_sigterm(default)
    registered = line.rsplit(" as ", 1)[1]
    assert (
        f"tf.data service worker: registered with dispatcher {dispatcher} as {registered}, an "
        "address only this host reaches: trainers on other hosts will wait for its batches "
        "until the read's stall timeout. Register the address they reach it at: "
        "--worker-address HOST[:PORT] (tfinput serve worker), "
        'worker_address="HOST[:PORT]" (tfinput.service.start_worker)'
    ) in err, err
