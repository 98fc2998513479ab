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
from collections.abc import Iterator
from typing import Any

from tfinput.errors import ConfigError
from tfinput.graph import assert_native

__all__ = ["distribute", "local_cluster", "PROCESSING_MODES"]

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
        )
    )


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
