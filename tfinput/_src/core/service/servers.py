"""Starting tf.data service servers: a dispatcher or a worker in this process
(`start_dispatcher`, `start_worker`, what ``tfinput serve`` runs), an in-process cluster
for tests (`local_cluster`), and local fleets of worker processes for measuring how many
workers a host needs (`LocalFleet`, `workers_needed`).

    fleet = LocalFleet(max_workers=2)                      # processes on this machine
    pipeline = tfinput.columnar("data/col", schema).with_service(fleet)
    ds = pipeline.build(config.replace(service_workers=2))  # 2 workers serve it

    pipeline = pipeline.with_service("grpc://dispatcher:5050", workers=8)  # a real fleet

The tuner searches ``service_compression`` and ``service_max_outstanding_requests`` for a
service pipeline, and ``service_workers`` too when the service is a `LocalFleet` (a
cluster per worker count: a dispatcher and that many worker processes, started on first
use and stopped by `LocalFleet.close`, or exiting by themselves when the process that
started them ends, however it ends). From the measured rate it reports how many workers
a target rate needs (`workers_needed`).

Workers of a local fleet share this machine's cores with the trainer: the rate it
measures is what these cores give through the service, a lower bound for a fleet of
separate machines. The trainer reaches them through loopback, but like every tf.data
server they listen on every interface, with no authentication, while they run:
TensorFlow has no option to bind loopback only (docs/scaling.md, "Security").
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import ipaddress
import logging
import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from tfinput._src.core.errors import ConfigError

log = logging.getLogger("tfinput.service")  # the public module's name


def start_dispatcher(
    *, port: int = 0, work_dir: str | None = None, worker_timeout_ms: int | None = None
) -> Any:
    """Start a tf.data service dispatcher in this process.

    Args:
      port: The port (0: a free one; see the server's ``target``).
      work_dir: Journal directory; with it the dispatcher is fault tolerant: restarted
        on the same port with the same directory it resumes its jobs.
      worker_timeout_ms: A worker silent this long is dropped and its clients move on
        to the other workers (None: tf.data's default).

    Returns:
      The started `tf.data.experimental.service.DispatchServer`.
    """
    import tensorflow as tf

    svc = tf.data.experimental.service
    options: dict[str, Any] = {}
    if worker_timeout_ms is not None:
        options["worker_timeout_ms"] = worker_timeout_ms
    return svc.DispatchServer(
        svc.DispatcherConfig(
            port=port, work_dir=work_dir, fault_tolerant_mode=work_dir is not None, **options
        )
    )


def start_worker(dispatcher: str, *, port: int = 0, worker_address: str | None = None) -> Any:
    """Start a tf.data service worker in this process, registered with ``dispatcher``.

    The worker registers an address with the dispatcher, which hands it to the clients
    (the trainers) that read from this worker: ``worker_address``, by default
    ``localhost`` and the worker's port, which reaches this host only. A worker whose
    trainers run on other hosts must register the address they reach it at, or they wait
    for its batches until the read's stall timeout ("a tf.data service worker probably
    died"); a worker that registers a loopback address with a dispatcher that is not on
    loopback logs a warning saying so.

    Args:
      dispatcher: The dispatcher address (``host:port`` or ``grpc://host:port``).
      port: The worker's port (0: a free one).
      worker_address: The address clients reach this worker at: ``HOST:PORT``, or
        ``HOST`` alone for the port the worker listens on (``port``, or the free one it
        took). It does not change where the worker listens (every interface). None:
        ``localhost`` and the worker's port (clients on this host only).

    Returns:
      The started `tf.data.experimental.service.WorkerServer`.

    Raises:
      ConfigError: ``worker_address`` is not ``HOST`` or ``HOST:PORT``.
    """
    import tensorflow as tf

    svc = tf.data.experimental.service
    address = dispatcher.split("://", 1)[-1]
    advertised = parse_worker_address(worker_address or _DEFAULT_WORKER_HOST)
    server = svc.WorkerServer(
        svc.WorkerConfig(dispatcher_address=address, worker_address=advertised, port=port)
    )
    registered = registered_address(server, advertised)
    if _reaches_this_host_only(_host(registered)) and not _reaches_this_host_only(_host(address)):
        log.warning(
            "tf.data service worker: registered with dispatcher %s as %s, an address only "
            "this host reaches: trainers on other hosts will wait for its batches until the "
            "read's stall timeout. Register the address they reach it at: "
            "--worker-address HOST[:PORT] (tfinput serve worker), "
            'worker_address="HOST[:PORT]" (tfinput.service.start_worker)',
            address,
            registered,
        )
    return server


#: Where TensorFlow puts the port a worker listens on in its registered address.
_PORT_PLACEHOLDER = "%port%"
#: The host a worker registers without ``worker_address`` (TensorFlow's default too).
_DEFAULT_WORKER_HOST = "localhost"


def parse_worker_address(text: str) -> str:
    """A worker address as `tf.data.experimental.service.WorkerConfig` takes it:
    ``HOST:PORT`` as it is, ``HOST`` as ``HOST:%port%`` (the port the worker listens on,
    filled in by TensorFlow). IPv6 hosts in brackets: ``[fd00::2]:5051``.

    Raises:
      ConfigError: no host, a port that is not a number from 1 to 65535, or an IPv6
        address without brackets.
    """
    expected = "expected HOST or HOST:PORT (an IPv6 host in brackets: [fd00::2]:5051)"
    text = text.strip()
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
        valid = bracket and (rest == "" or port is not None) and _is_ipv6(host)
        host = f"[{host}]"
    else:
        host, colon, port = text.partition(":")
        valid = ":" not in port
        port = port if colon else None
    if not valid or not host or any(c.isspace() for c in text):
        raise ConfigError(f"worker address {text!r}: {expected}")
    if port is None or port == _PORT_PLACEHOLDER:
        return f"{host}:{_PORT_PLACEHOLDER}"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"worker address {text!r}: the port must be 1 to 65535; {expected}")
    return f"{host}:{int(port)}"


def registered_address(server: Any, worker_address: str | None) -> str:
    """The address ``server`` (a worker `start_worker` started) registered with its
    dispatcher, given the ``worker_address`` it was started with (None: the default)."""
    # WorkerServer has no public address accessor; ``_address`` is what TF's tests use.
    port = server._address.rsplit(":", 1)[1]
    advertised = parse_worker_address(worker_address or _DEFAULT_WORKER_HOST)
    return advertised.replace(_PORT_PLACEHOLDER, port)


def _is_ipv6(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
    except ValueError:
        return False


def _host(address: str) -> str:
    """``host`` of ``host:port`` or ``grpc://host:port`` (IPv6 brackets removed)."""
    return address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")


def _reaches_this_host_only(host: str) -> bool:
    """Whether a client connecting to ``host`` reaches this host only: a loopback or
    unspecified address, or a name that resolves to such addresses only. A name that
    does not resolve here counts as another host's."""
    try:
        ips = {ipaddress.ip_address(host)}
    except ValueError:
        try:
            found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            return False
        ips = {ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in found}
    local = set()
    for ip in ips:
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        local.add(ip.is_loopback or ip.is_unspecified)
    return local == {True}


def serve_until_signal(server: Any) -> None:
    """Block until SIGTERM or SIGINT, then stop ``server``."""
    import signal

    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.stop()


@contextlib.contextmanager
def local_cluster(*, workers: int = 1, work_dir: str | None = None) -> Iterator[str]:
    """An in-process tf.data service (one dispatcher, ``workers`` workers), read
    through loopback.

    For tests and single-host experiments: the workers run in this process's thread
    pools, so it shows that a dataset *can* run on the service, not how fast a remote
    fleet would be. Like every tf.data server, they listen on every interface, with no
    authentication, while the context is open: TensorFlow has no option to bind
    loopback only (docs/scaling.md, "Security").

    Args:
      workers: Number of workers.
      work_dir: Dispatcher journal directory (None: no fault tolerance).

    Yields:
      The dispatcher address (``grpc://localhost:port``).
    """
    import tensorflow as tf

    svc = tf.data.experimental.service
    if workers < 1:
        raise ConfigError(f"local_cluster: workers must be >= 1, got {workers}")
    dispatcher = svc.DispatchServer(
        svc.DispatcherConfig(port=0, work_dir=work_dir, fault_tolerant_mode=work_dir is not None)
    )
    address = dispatcher.target.split("://", 1)[-1]
    servers = [
        svc.WorkerServer(svc.WorkerConfig(dispatcher_address=address, port=0))
        for _ in range(workers)
    ]
    try:
        yield dispatcher.target
    finally:
        # Iterators left in reference cycles keep their jobs' clients alive, and a
        # worker's stop then waits for them (seconds to a minute): collect them first.
        gc.collect()
        for w in servers:
            w.stop()
        dispatcher.stop()


#: A tf.data service server in its own process: prints its dispatcher address, then
#: serves until SIGTERM, or until the process that started it is gone. argv: the parent's
#: pid, whether the parent-death signal applies (``1``: started from the parent's main
#: thread), then ``dispatcher`` | ``worker DISPATCHER_ADDRESS``.
_SERVER = r"""
import os, select, signal, sys, threading
parent, main_thread, role = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3:]
if main_thread and sys.platform.startswith("linux"):
    try:  # the kernel kills this process when the parent ends, even by SIGKILL
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass

def orphaned():
    # stdin is a pipe the parent holds and never writes: end of file once the parent is
    # gone, however it ended. A changed parent pid covers a copy of that pipe's end
    # kept open elsewhere (a forked child of the parent).
    while os.getppid() == parent:
        try:
            ready, _, _ = select.select([0], [], [], 1.0)
            if ready and not os.read(0, 1 << 12):
                break
        except OSError:
            break
    os._exit(0)

threading.Thread(target=orphaned, daemon=True).start()
import tensorflow as tf
svc = tf.data.experimental.service
if role[0] == "dispatcher":
    server = svc.DispatchServer(svc.DispatcherConfig(port=0))
    print(server.target, flush=True)
else:
    server = svc.WorkerServer(svc.WorkerConfig(dispatcher_address=role[1], port=0))
    print("worker", flush=True)
# A measuring fleet keeps no state worth a graceful stop: leave at once.
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
signal.signal(signal.SIGINT, lambda *_: os._exit(0))
threading.Event().wait()
"""


class LocalFleet:
    """tf.data service clusters on this machine, one per worker count, started on
    first use: `address_for` ``(w)`` is a dispatcher with ``w`` worker processes.

    Args:
      max_workers: The most workers a cluster may have (the tuner searches 1 to this).
      startup_timeout: Seconds a server process may take to start.

    Use it as a context manager, or call `close`; clusters still running at exit are
    stopped then. The server processes also exit by themselves when this process ends
    any other way (killed, SIGKILL and out-of-memory kills included): each watches a
    pipe from this process and its parent pid.
    """

    def __init__(self, max_workers: int = 2, *, startup_timeout: float = 120.0):
        if not isinstance(max_workers, int) or max_workers < 1:
            raise ConfigError(f"LocalFleet: max_workers must be >= 1, got {max_workers!r}")
        self.max_workers = max_workers
        self.startup_timeout = startup_timeout
        self._clusters: dict[int, tuple[str, list[subprocess.Popen]]] = {}
        self._lock = threading.Lock()
        atexit.register(self.close)

    def __repr__(self) -> str:
        return f"LocalFleet(max_workers={self.max_workers})"

    def __enter__(self) -> LocalFleet:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def address_for(self, workers: int) -> str:
        """The dispatcher address of the cluster with ``workers`` worker processes
        (``0``: ``max_workers``), starting it if needed.

        Raises:
          ConfigError: more workers than ``max_workers``.
          RuntimeError: a server process failed to start (its output is quoted).
        """
        workers = workers or self.max_workers
        if workers > self.max_workers:
            raise ConfigError(
                f"service_workers={workers}: this LocalFleet has at most {self.max_workers}"
            )
        with self._lock:
            if workers not in self._clusters:
                dispatcher = self._start("dispatcher")
                procs = [dispatcher]
                address = _read_line(dispatcher, self.startup_timeout)
                self._clusters[workers] = (address, procs)
                started = [
                    self._start("worker", address.split("://", 1)[-1]) for _ in range(workers)
                ]
                procs += started  # started together: each imports TensorFlow (seconds)
                for worker in started:
                    _read_line(worker, self.startup_timeout)
            return self._clusters[workers][0]

    def close(self) -> None:
        """Stop every cluster's processes (SIGTERM, then SIGKILL after 10 s)."""
        # Iterators over these clusters left in reference cycles: collected while the
        # servers still answer (collected later, each would wait on retries to the gone
        # servers, in whatever code the collection ran in).
        gc.collect()
        with self._lock:
            procs = [p for _, ps in self._clusters.values() for p in ps]
            self._clusters.clear()
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
            if p.stdin is not None:
                p.stdin.close()
        deadline = time.monotonic() + 10
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def _start(self, *argv: str) -> subprocess.Popen:
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
        # The parent-death signal follows the thread that starts the process: only the
        # main thread lives as long as this process.
        main = "1" if threading.current_thread() is threading.main_thread() else "0"
        return subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(os.getpid()), main, *argv],
            stdin=subprocess.PIPE,  # never written: its end of file tells the server to go
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    """The first line a server prints that is not a TensorFlow log line."""
    lines: list[str] = []
    result: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            text = line.strip()
            if text.startswith("grpc://") or text == "worker":
                result.append(text)
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if not result:
        proc.kill()
        raise RuntimeError(
            f"tf.data service server did not start within {timeout:.0f} s: " + "".join(lines[-20:])
        )
    # Keep draining its output so a chatty server never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
    return result[0]


def workers_needed(rate: float, workers: int, target_rate: float) -> int:
    """Workers that serve ``target_rate`` examples/s if ``workers`` served ``rate``
    (linear scaling per worker: a lower bound where the dispatcher or network binds).

    Raises:
      ConfigError: a non-positive rate, worker count or target.
    """
    if rate <= 0 or workers < 1 or target_rate <= 0:
        raise ConfigError(
            f"workers_needed: expected positive values, got rate={rate}, workers={workers}, "
            f"target_rate={target_rate}"
        )
    return max(1, math.ceil(target_rate / (rate / workers)))
