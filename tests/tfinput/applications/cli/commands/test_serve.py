"""``tfinput serve``: its actions parse their arguments (a bad ``--worker-address`` is a
usage error), and a server killed with SIGKILL leaves nothing running (the servers
themselves run as subprocesses in tests/test_service_faults.py, and across two network
namespaces in tests/test_service_hosts.py)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from tests.helpers import kill_all, kill_and_wait_for
from tfinput._src.applications.cli.commands.serve import SERVE_COMMAND


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tfinput")
    SERVE_COMMAND.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(list(argv))


def test_dispatcher_and_worker_arguments():
    d = _parse("serve", "dispatcher", "--port", "0", "--work-dir", "/tmp/j")
    assert (d.port, d.work_dir, d.worker_timeout_ms) == (0, "/tmp/j", None)
    w = _parse("serve", "worker", "--dispatcher", "localhost:5050")
    assert (w.dispatcher, w.port, w.worker_address) == ("localhost:5050", 0, None)
    w = _parse("serve", "worker", "--dispatcher", "d:5050", "--worker-address", "10.0.0.2")
    assert w.worker_address == "10.0.0.2:%port%"  # the port the worker listens on
    w = _parse("serve", "worker", "--dispatcher", "d:5050", "--worker-address", "w-1:5051")
    assert w.worker_address == "w-1:5051"


@pytest.mark.parametrize(
    "bad, why",
    [
        ("w-1:0", "worker address 'w-1:0': the port must be 1 to 65535"),
        ("fd00::2", "worker address 'fd00::2': expected HOST or HOST:PORT (an IPv6 host in "
         "brackets: [fd00::2]:5051)"),
    ],
)  # fmt: skip
def test_a_bad_worker_address_is_refused_when_parsed(bad, why, capsys):
    with pytest.raises(SystemExit) as e:
        _parse("serve", "worker", "--dispatcher", "d:5050", "--worker-address", bad)
    assert e.value.code == 2
    assert f"argument --worker-address: {why}" in capsys.readouterr().err


def test_a_killed_server_leaves_nothing_running(tmp_path):
    """``tfinput serve dispatcher`` killed with SIGKILL: what it started (the filter of
    its stderr) exits with it."""
    psutil = pytest.importorskip("psutil")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # filter on
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfinput.cli", "serve", "dispatcher", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    children: list = []
    try:
        assert proc.stdout is not None
        assert "on this host: grpc://localhost:" in proc.stdout.readline()
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "the stderr filter runs"
        left = kill_and_wait_for(proc, children, timeout=20)
        assert not left, [" ".join(p.cmdline())[:80] for p in left]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        kill_all(children)
