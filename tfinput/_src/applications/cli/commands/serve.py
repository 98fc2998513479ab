"""``tfinput serve dispatcher`` and ``tfinput serve worker``: tf.data service servers
(`tfinput.service`) that run until SIGTERM or SIGINT; and ``tfinput export``: a
SavedModel serving a saved Keras model from raw requests with the training transforms
(`tfinput.serving.export`).

Each server prints, at start, the address it listens on as the socket table shows it:
tf.data service binds every interface and has no option to bind one, and it has no
authentication or encryption, which the second line says.

The TCP addresses a process listens on are read from the kernel's socket table:

    listening_addresses()             # this process: ["[::]:5099"] for a tf.data server
    listening_addresses(pid)          # another process (Linux: /proc/PID/fd and net/tcp*)

A server's own word for its address is not enough: tf.data service prints
``grpc://localhost:PORT`` while it accepts connections on every interface. The socket
table (what ``ss -ltn`` shows) says where a port is open, so `tfinput serve` prints that.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
from pathlib import Path

from tfinput._src.applications.cli.args import add_output_arguments, check_output
from tfinput._src.applications.cli.console import console
from tfinput._src.applications.cli.registry import Command
from tfinput._src.core.errors import ConfigError


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


def _worker_address(text: str) -> str:
    """An argparse type: ``--worker-address`` checked (`parse_worker_address`)."""
    from tfinput._src.core.service import servers

    try:
        return servers.parse_worker_address(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _worker_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dispatcher", required=True, help="dispatcher address, HOST:PORT")
    p.add_argument(
        "--port",
        type=int,
        default=0,
        help="port (0: a free one); fix it so that a worker restarted after a crash comes "
        "back at the address its clients wait on",
    )
    p.add_argument(
        "--worker-address",
        type=_worker_address,
        metavar="HOST[:PORT]",
        help="the address trainers reach this worker at, which the dispatcher hands them "
        "(this host's name or IP on their network; PORT defaults to the port the worker "
        "listens on). Default: localhost, which only trainers on this host reach. It does "
        "not change where the worker listens (every interface)",
    )


def _worker(args: argparse.Namespace) -> int:
    from tfinput._src.core.service import servers

    server = servers.start_worker(
        args.dispatcher, port=args.port, worker_address=args.worker_address
    )
    # WorkerServer has no public address accessor; ``_address`` is what TF's tests use.
    port = int(server._address.rsplit(":", 1)[1])
    registered = servers.registered_address(server, args.worker_address)
    print(
        f"worker listening on {listening_on(port)}; registered with dispatcher "
        f"{args.dispatcher} as {registered}",
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


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", metavar="MODEL_DIR", help="the SavedModel directory to write")
    p.add_argument(
        "--model", required=True, help="the trained model, saved with model.save('m.keras')"
    )
    p.add_argument("--schema", required=True, help="the training schema JSON")
    p.add_argument(
        "--layout",
        choices=["per_feature", "packed"],
        default="per_feature",
        help="the layout the model was trained on (default: per_feature)",
    )
    p.add_argument(
        "--multi-hot-format",
        choices=["dense", "sparse", "ragged"],
        default="dense",
        help="the multi-hot format the model was trained on (default: dense)",
    )
    add_output_arguments(p, json_help="machine-readable summary")


def _tensorflow_backend() -> None:
    """Run Keras on TensorFlow: the SavedModel calls the model in TensorFlow. A model
    trained on JAX exports the same (its ``.keras`` weights are backend-independent)."""
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "config"):
        if keras.config.backend() != "tensorflow":
            raise ConfigError(
                f"export: Keras already runs on {keras.config.backend()!r} in this process; "
                "run tfinput export in its own process"
            )
        return
    os.environ["KERAS_BACKEND"] = "tensorflow"


def _export(args: argparse.Namespace) -> int:
    """Load the model and write the SavedModel."""
    from tfinput._src.core.schema import Schema

    if not os.path.isfile(args.model):
        raise ConfigError(f"export: --model {args.model}: no such file")
    check_output(args.out, "export: MODEL_DIR", directory=True)
    schema = Schema.from_json(args.schema)
    _tensorflow_backend()
    import keras

    import tfinput._src.measurement.models  # noqa: F401  (registers tfinput's layers and models)
    from tfinput._src.applications import serving

    try:
        model = keras.saving.load_model(args.model)
    except (ValueError, TypeError, OSError) as e:
        raise ConfigError(f"export: cannot load --model {args.model}: {e}") from e
    summary = serving.export(
        args.out, schema, model, multi_hot_format=args.multi_hot_format, layout=args.layout
    )
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    out = console()
    out.print(f"wrote SavedModel {args.out}", markup=False)
    for name, what in serving.SIGNATURES.items():
        out.print(f"  {name}: {what}", markup=False)
    out.print(f"  schema and layout: {os.path.join(args.out, serving.ASSETS_DIR)}", markup=False)
    return 0


EXPORT_COMMAND = Command(
    name="export",
    help="write a SavedModel serving a Keras model from raw tf.Example or feature tensors",
    description=(
        "The SavedModel applies exactly the training transforms (hashing, clipping, log1p, "
        "padding, id checks, layout) before the model. Signatures: serving_default "
        "(serialized tf.Example), serve_raw (raw tensors by column), transform (the model "
        "inputs)."
    ),
    arguments=_export_arguments,
    run=_export,
    error_first_line=True,
)


#: What `is_loopback` accepts: IPv4 127.0.0.0/8 and IPv6 ::1 (and ::ffff:127.x).
LOOPBACK = ("127.0.0.0/8", "::1")

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's ``st`` column


def listening_addresses(pid: int | None = None) -> list[str] | None:
    """The ``host:port`` addresses (IPv6 in brackets) that process ``pid`` (None: this
    one) has TCP sockets listening on, sorted; None where the socket table cannot be read
    (not Linux, or another user's process).

    ``0.0.0.0:P`` and ``[::]:P`` mean every interface (``[::]`` takes IPv4 too unless the
    socket is IPv6-only); ``127.0.0.1:P`` and ``[::1]:P`` mean this host only.
    """
    proc = Path("/proc") / str(pid if pid is not None else os.getpid())
    try:
        inodes = _socket_inodes(proc / "fd")
        tables = [(proc / "net" / name).read_text() for name in ("tcp", "tcp6")]
    except OSError:
        return None
    found = set()
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and fields[9] in inodes:
                found.add(_address(fields[1]))
    return sorted(found)


def is_loopback(address: str) -> bool:
    """Whether ``host:port`` (as `listening_addresses` writes it) is reachable from this
    host only."""
    host = address.rsplit(":", 1)[0].strip("[]")
    ip = ipaddress.ip_address(host)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def listening_on(port: int, pid: int | None = None) -> str:
    """Where ``port`` is open, for a message: the addresses the socket table of ``pid``
    (None: this process) has listening on it, and whether that is every interface or
    this host only (``[::]:5050 (every interface)``). Where the table cannot be read:
    ``0.0.0.0:PORT``, the address tf.data service binds (``AddListeningPort("0.0.0.0:" +
    port)`` in TensorFlow's ``core/data/service/server_lib.cc``)."""
    found = [a for a in listening_addresses(pid) or () if a.endswith(f":{port}")]
    found = found or [f"0.0.0.0:{port}"]
    scope = "this host only" if all(is_loopback(a) for a in found) else "every interface"
    return f"{' and '.join(found)} ({scope})"


def _socket_inodes(fd_dir: Path) -> set[str]:
    inodes = set()
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _address(field: str) -> str:
    """``0100007F:1F90`` -> ``127.0.0.1:8080``; IPv6 as ``[::1]:8080``. The kernel writes
    each 32-bit word of the address in host byte order."""
    hex_ip, hex_port = field.split(":")
    port = int(hex_port, 16)
    raw = b"".join(
        int(hex_ip[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(hex_ip), 8)
    )
    if len(raw) == 4:
        return f"{ipaddress.IPv4Address(raw)}:{port}"
    return f"[{ipaddress.IPv6Address(raw)}]:{port}"
