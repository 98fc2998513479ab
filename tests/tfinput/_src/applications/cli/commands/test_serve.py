"""``tfinput serve``: its actions parse their arguments (the servers themselves run as
subprocesses in tests/test_service_faults.py)."""

from __future__ import annotations

import argparse

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
