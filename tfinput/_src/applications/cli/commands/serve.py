"""``tfinput serve dispatcher`` and ``tfinput serve worker``: tf.data service servers
(`tfinput.service`) that run until SIGTERM or SIGINT.

Each prints, at start, the address it listens on as the socket table shows it
(`tfinput._src.applications.listeners`): tf.data service binds every interface and
has no option to bind one, and it has no authentication or encryption, which the
second line says."""

from __future__ import annotations

import argparse

from tfinput._src.applications.cli.registry import Command
from tfinput._src.applications.listeners import listening_on

__all__ = ["SERVE_COMMAND"]


def _open_to_the_network(port: int) -> str:
    """The one line `tfinput serve` prints at start about who can reach ``port``."""
    return (
        "tf.data service has no authentication or encryption: anyone who can reach port "
        f"{port} can read the data or register a worker of their own; keep the dispatcher "
        'and worker ports on a private network (docs/scaling.md, "Security")'
    )


def _dispatcher_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=0, help="port (0: a free one)")
    p.add_argument(
        "--work-dir",
        help="journal directory: restarted with it, the dispatcher resumes its jobs",
    )
    p.add_argument("--worker-timeout-ms", type=int, help="drop a worker silent this long (ms)")


def _dispatcher(args: argparse.Namespace) -> int:
    from tfinput._src.core.service import servers

    server = servers.start_dispatcher(
        port=args.port, work_dir=args.work_dir, worker_timeout_ms=args.worker_timeout_ms
    )
    port = int(server.target.rsplit(":", 1)[1])
    print(
        f"dispatcher listening on {listening_on(port)}; on this host: {server.target}",
        flush=True,
    )
    print(_open_to_the_network(port), flush=True)
    servers.serve_until_signal(server)
    return 0


def _worker_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dispatcher", required=True, help="dispatcher address, HOST:PORT")
    p.add_argument(
        "--port",
        type=int,
        default=0,
        help="port (0: a free one); fix it so that a worker restarted after a crash comes "
        "back at the address its clients wait on",
    )


def _worker(args: argparse.Namespace) -> int:
    from tfinput._src.core.service import servers

    server = servers.start_worker(args.dispatcher, port=args.port)
    # WorkerServer has no public address accessor; ``_address`` is what TF's tests use.
    port = int(server._address.rsplit(":", 1)[1])
    print(
        f"worker listening on {listening_on(port)}; registered with dispatcher "
        f"{args.dispatcher} as {server._address}",
        flush=True,
    )
    print(_open_to_the_network(port), flush=True)
    servers.serve_until_signal(server)
    return 0


SERVE_COMMAND = Command(
    name="serve",
    help="run a tf.data service dispatcher or worker until SIGTERM/SIGINT",
    actions=(
        Command(
            name="dispatcher",
            help="a tf.data service dispatcher (fault tolerant with --work-dir)",
            arguments=_dispatcher_arguments,
            run=_dispatcher,
        ),
        Command(
            name="worker",
            help="a tf.data service worker registered with a dispatcher",
            arguments=_worker_arguments,
            run=_worker,
        ),
    ),
)
