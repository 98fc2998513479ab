"""Run a tfinput pipeline on tf.data service workers, after proving it is native-only.

    from tfinput import service
    ds = tfinput.columnar("gs://bucket/criteo-col").build(config)
    ds = service.distribute(ds, "grpc://dispatcher:5050", job_name="train")

    with service.local_cluster(workers=2) as address:     # tests, single-host trials
        ds = service.distribute(ds, address)

tf.data service moves the input pipeline off the training host: a dispatcher hands
the serialized dataset graph to worker processes, which run it and stream batches back.
Workers cannot call back into the Python that built the graph, so `distribute` first
runs `tfinput.graph.assert_native` and fails with the offending ops named, instead of
the workers failing later with an opaque error (tensorflow/tensorflow#50252).

Processing modes (``processing_mode``):

- ``"off"`` (`ShardingPolicy.OFF`): every worker runs the whole dataset; with several
  workers each example is seen once per worker. Use one worker, or shuffled data.
- ``"dynamic"``: the dispatcher hands out the dataset's first source elements (tfinput:
  its files) to workers on demand, so each file is read by one worker (at most once:
  a split being processed by a worker that dies is lost). Output order is not
  deterministic. Needs a pipeline without file shuffling or ``input_context``.

Reads are guarded by default (``stall_timeout_s``): tf.data service waits forever for
a worker that died and never comes back, and ends an epoch short, with no error, when
a worker restarted on its address lost what it held. The guarded read raises
`ServiceError` once no batch came for ``stall_timeout_s`` and, given the epoch's rows,
logs at the epoch's end how many rows never arrived (`GuardedRead`).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from typing import Any

from tfinput._src.core._service_read import (
    DEFAULT_STALL_TIMEOUT_S,
    PROCESSING_MODES,
    GuardedRead,
    distribute,
    guarded,
    guarded_dataset,
    unguarded,
)
from tfinput._src.core.errors import ConfigError

__all__ = [
    "distribute",
    "DEFAULT_STALL_TIMEOUT_S",
    "GuardedRead",
    "guarded",
    "guarded_dataset",
    "unguarded",
    "local_cluster",
    "PROCESSING_MODES",
    "start_dispatcher",
    "start_worker",
    "serve_until_signal",
]

#: What a command that starts a fleet of servers on this host (``--service local:N``)
#: says once, at start: TensorFlow binds them to every interface, with no option to
#: bind loopback only.
LOCAL_FLEET_OPEN = (
    "--service {spec}: the tf.data service dispatcher and workers this starts on this "
    "host listen on every interface, not loopback only (TensorFlow has no option to bind "
    "one), with no authentication or encryption: while they run, anyone who can reach "
    "this host's ports can read the data or register a worker "
    '(docs/scaling.md, "Security")'
)


def open_to_the_network(port: int) -> str:
    """The one line `tfinput serve` prints at start about who can reach ``port``."""
    return (
        "tf.data service has no authentication or encryption: anyone who can reach port "
        f"{port} can read the data or register a worker of their own; keep the dispatcher "
        'and worker ports on a private network (docs/scaling.md, "Security")'
    )


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


def start_worker(dispatcher: str, *, port: int = 0) -> Any:
    """Start a tf.data service worker in this process, registered with ``dispatcher``.

    Args:
      dispatcher: The dispatcher address (``host:port`` or ``grpc://host:port``).
      port: The worker's port (0: a free one).

    Returns:
      The started `tf.data.experimental.service.WorkerServer`.
    """
    import tensorflow as tf

    svc = tf.data.experimental.service
    address = dispatcher.split("://", 1)[-1]
    return svc.WorkerServer(svc.WorkerConfig(dispatcher_address=address, port=port))


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
