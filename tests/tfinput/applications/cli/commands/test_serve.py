"""``tfinput serve``: its actions parse their arguments, and a server killed with SIGKILL
leaves nothing running (the servers themselves run as subprocesses in
tests/test_service_faults.py)."""

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
    assert (w.dispatcher, w.port) == ("localhost:5050", 0)


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
