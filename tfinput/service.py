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
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from tfinput.errors import ConfigError, ServiceError
from tfinput.graph import assert_native

__all__ = [
    "distribute",
    "GuardedRead",
    "guarded",
    "local_cluster",
    "PROCESSING_MODES",
    "start_dispatcher",
    "start_worker",
    "serve_until_signal",
]

log = logging.getLogger(__name__)

PROCESSING_MODES = ("off", "dynamic", "file", "data", "file_or_data", "hint")


def _policy(mode: Any) -> Any:
    import tensorflow as tf

    policies = tf.data.experimental.service.ShardingPolicy
    if isinstance(mode, policies):
        return mode
    if isinstance(mode, str) and mode.lower() in PROCESSING_MODES:
        return getattr(policies, mode.upper())
    raise ConfigError(
        f"processing_mode: expected one of {list(PROCESSING_MODES)} or a ShardingPolicy, "
        f"got {mode!r}"
    )


def distribute(
    dataset: Any,
    service: str,
    *,
    processing_mode: Any = "off",
    job_name: str | None = None,
    consumer_index: int | None = None,
    num_consumers: int | None = None,
    max_outstanding_requests: int | None = None,
    compression: str | None = "AUTO",
    target_workers: str = "AUTO",
    check_native: bool = True,
) -> Any:
    """Read ``dataset`` through a tf.data service.

    Args:
      dataset: The dataset, for example `tfinput.Pipeline.build`'s result.
      service: The dispatcher address (``grpc://host:port``).
      processing_mode: ``off``, ``dynamic`` (see the module docstring) or another
        `tf.data.experimental.service.ShardingPolicy`, as a name or the enum.
      job_name: Consumers giving the same name share one job (and its data); None
        gives each consumer its own job.
      consumer_index, num_consumers: For coordinated reads across trainers.
      max_outstanding_requests: Bounds the memory of batches in flight (None: one per
        worker, tf.data's default).
      compression: ``"AUTO"`` (snappy where it helps) or None. Already compact
        batches (ids, floats) often compress poorly: None saves worker CPU.
      target_workers: Which workers to read from: ``"AUTO"`` (tf.data's default),
        ``"ANY"`` (every worker) or ``"LOCAL"`` (only workers on this host, e.g. one
        worker per trainer host).
      check_native: Refuse a dataset that calls back into Python (default).

    Returns:
      The distributed dataset (same element spec).

    Raises:
      ConfigError: the dataset is not native-only, or an invalid processing mode.
    """
    import tensorflow as tf

    if check_native:
        assert_native(dataset, what="the dataset given to tf.data service")
    return dataset.apply(
        tf.data.experimental.service.distribute(
            processing_mode=_policy(processing_mode),
            service=service,
            job_name=job_name,
            consumer_index=consumer_index,
            num_consumers=num_consumers,
            max_outstanding_requests=max_outstanding_requests,
            compression=compression,
            target_workers=_target_workers(target_workers),
        )
    )


def _target_workers(value: str) -> str:
    if not isinstance(value, str) or value.upper() not in ("AUTO", "ANY", "LOCAL"):
        raise ConfigError(
            f"target_workers: expected one of ['AUTO', 'ANY', 'LOCAL'], got {value!r}"
        )
    return value.upper()


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
    import threading

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
    """An in-process tf.data service (one dispatcher, ``workers`` workers) on loopback.

    For tests and single-host experiments: the workers run in this process's thread
    pools, so it shows that a dataset *can* run on the service, not how fast a remote
    fleet would be.

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
        for w in servers:
            w.stop()
        dispatcher.stop()


_END = object()


class GuardedRead:
    """Iterate a tf.data service read with a bounded wait and a row count.

    tf.data service keeps retrying a worker that stopped answering until a worker comes
    back at its address (a cluster manager restarts it), so a worker that died for good
    stalls its clients forever. This iterator raises `ServiceError` instead once no batch
    has arrived for ``stall_timeout_s``, and counts the rows of the epoch: with
    ``expected_rows`` it reports, at the end of the epoch, how many rows a worker that
    died took with it (`lost`; dynamic sharding loses the unread part of that worker's
    files, and never delivers a row twice).

    Batches come from a background thread one ahead of the consumer, in order. Use it
    in a custom training loop; `model.fit` reads the dataset itself.

    Args:
      dataset: The distributed dataset (`distribute`, or a service pipeline's build).
      expected_rows: Rows in one epoch (for example a columnar manifest's row count);
        None: rows are counted, not compared.
      stall_timeout_s: Longest wait for one batch. Leave room for the first batch,
        which includes the workers' start of the job.
      address: The dispatcher, named in errors.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        expected_rows: int | None = None,
        stall_timeout_s: float = 120.0,
        address: str | None = None,
    ) -> None:
        if stall_timeout_s <= 0:
            raise ConfigError(f"guarded: stall_timeout_s must be > 0, got {stall_timeout_s}")
        self.dataset = dataset
        self.expected_rows = expected_rows
        self.stall_timeout_s = stall_timeout_s
        self.address = address
        self.rows = 0
        self.batches = 0
        self.finished = False
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def lost(self) -> int | None:
        """Rows of the epoch never delivered (once the epoch ended; None before, or
        without ``expected_rows``)."""
        if not self.finished or self.expected_rows is None:
            return None
        return max(self.expected_rows - self.rows, 0)

    def summary(self) -> str:
        """One line: batches, rows, and the rows lost where known."""
        line = f"tf.data service read: {self.batches} batches, {self.rows:,} rows"
        if self.lost:
            line += (
                f"; {self.lost:,} of {self.expected_rows:,} rows lost (a worker stopped "
                "mid-epoch: dynamic sharding drops the unread part of its files)"
            )
        elif self.lost == 0:
            line += f" of {self.expected_rows:,} expected, none lost"
        return line

    def __iter__(self) -> GuardedRead:
        if self._thread is None:
            self._thread = threading.Thread(target=self._produce, daemon=True, name="tfinput-svc")
            self._thread.start()
        return self

    def _produce(self) -> None:
        try:
            for element in self.dataset:
                while not self._stop.is_set():
                    try:
                        self._queue.put(element, timeout=0.5)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            self._queue.put(_END)
        except BaseException as e:  # handed to the consumer, in order
            self._queue.put(e)

    def __next__(self) -> Any:
        if self._thread is None:
            iter(self)
        if self.finished:
            raise StopIteration
        started = time.monotonic()
        try:
            item = self._queue.get(timeout=self.stall_timeout_s)
        except queue.Empty:
            self._stop.set()
            where = f" from {self.address}" if self.address else ""
            expected = f" of {self.expected_rows:,} expected" if self.expected_rows else ""
            raise ServiceError(
                f"no batch{where} in {time.monotonic() - started:.0f} s after "
                f"{self.batches} batches ({self.rows:,} rows{expected}): a tf.data service worker "
                "probably died. Restart it on the same address (its clients reconnect), "
                "or start the job again; raise stall_timeout_s if batches are just slow"
            ) from None
        if item is _END:
            self.finished = True
            if self.lost:
                log.warning("%s", self.summary())
            raise StopIteration
        if isinstance(item, BaseException):
            self._stop.set()
            raise item
        self.batches += 1
        self.rows += _batch_rows(item)
        return item

    def close(self) -> None:
        """Stop the background thread once its current batch arrives."""
        self._stop.set()


def _batch_rows(element: Any) -> int:
    import tensorflow as tf

    first = tf.nest.flatten(element)[0]
    return int(first.shape[0]) if first.shape.rank else 1


def guarded(
    dataset: Any,
    *,
    expected_rows: int | None = None,
    stall_timeout_s: float = 120.0,
    address: str | None = None,
) -> GuardedRead:
    """``dataset``'s batches with a bounded wait and a row count: see `GuardedRead`."""
    return GuardedRead(
        dataset, expected_rows=expected_rows, stall_timeout_s=stall_timeout_s, address=address
    )
