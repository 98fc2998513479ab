"""Reading a built pipeline through tf.data service, after proving it is native-only:
the client side, which `Pipeline.with_service` uses.

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

`Pipeline.with_service` attaches a `ServiceRead`; `Pipeline.build` then builds the
pipeline as usual and reads it through `distribute` with the config's
``service_compression`` and ``service_max_outstanding_requests``. Its service is a
dispatcher address or a `Fleet` (workers by count, as `servers.LocalFleet`), which the
client knows only by this protocol.

Reads are guarded by default (``stall_timeout_s``): tf.data service waits forever for
a worker that died and never comes back, and ends an epoch short, with no error, when
a worker restarted on its address lost what it held. The guarded read (`guard`) raises
`ServiceError` once no batch came for ``stall_timeout_s`` and, given the epoch's rows,
logs at the epoch's end how many rows never arrived (`GuardedRead`). Starting the
servers (dispatchers, workers, local fleets) is `servers`; `tfinput.service` re-exports
the names of all three modules.

Native ops only (`tfinput.graph`, defined here):

Is a dataset made of native ops only? The check tf.data service needs.

    from tfinput import graph
    ds = tfinput.columnar("data/criteo-col").build(config)
    assert graph.find_python_ops(ds) == []
    graph.assert_native(ds, what="the training input")   # raises, naming the ops

tf.data service workers run a dataset's serialized graph in another process (often on
another host): an op that calls back into the Python interpreter that built the graph
(``tf.py_function``, ``tf.numpy_function``, ``Dataset.from_generator``) cannot run
there (tensorflow/tensorflow#50252). Neither can ``tf.data`` checkpointing of such
state, nor graph export. `find_python_ops` serializes the dataset with
``Dataset._as_serialized_graph`` and walks the GraphDef *and* its function library
(map, interleave and flat_map functions, and the functions those call), so an op
buried in a nested function is found too.

Reported ops: `PYTHON_OPS` (``PyFunc``, ``PyFuncStateless``, ``EagerPyFunc``: every
Python callback) and ``GeneratorDataset`` (what ``from_generator`` builds inside a
``FlatMapDataset``). tfinput's TFRecord and columnar sources are native; its Parquet
source (pyarrow) reads through a ``tf.numpy_function`` (``PyFuncStateless``) and is
reported, as is the columnar source's ``shuffle="global"`` mode (a positioned read).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tfinput._src.core.config import AUTOTUNE, PipelineConfig
from tfinput._src.core.errors import ConfigError
from tfinput._src.core.service.guard import DEFAULT_STALL_TIMEOUT_S, guarded_dataset

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

PROCESSING_MODES = ("off", "dynamic", "file", "data", "file_or_data", "hint")


# ------------------------------------------------------------- native ops only
#: Ops that run Python code in the process that built the graph.
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc", "GeneratorDataset"})


def _graph_def(dataset: tf.data.Dataset) -> Any:
    import tensorflow as tf

    policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    serialized = dataset._as_serialized_graph(external_state_policy=policy)
    return tf.compat.v1.GraphDef.FromString(serialized.numpy())


def _called(node: Any) -> list[str]:
    """Names of the functions a node refers to (``f``, ``init_func``, ``branches``...)."""
    out = []
    for value in node.attr.values():
        if value.HasField("func"):
            out.append(value.func.name)
        if value.HasField("list"):
            out.extend(f.name for f in value.list.func)
    return out


def find_python_ops(dataset: tf.data.Dataset) -> list[str]:
    """Ops of ``dataset`` that need the Python interpreter, one line each.

    Args:
      dataset: A `tf.data.Dataset` (for example `tfinput.Pipeline.build`'s result).

    Returns:
      Sorted, de-duplicated descriptions such as ``"EagerPyFunc in function
      '__inference_...' (used by ParallelMapDatasetV2 'ParallelMapDatasetV2/_7')"``;
      empty if the dataset is native-only.
    """
    graph = _graph_def(dataset)
    functions = {f.signature.name: f for f in graph.library.function}
    found: set[str] = set()

    def walk(name: str, owner: str, seen: set[str]) -> None:
        if name in seen or name not in functions:
            return
        seen.add(name)
        for node in functions[name].node_def:
            if node.op in PYTHON_OPS:
                found.add(f"{node.op} in function {name!r} (used by {owner})")
            for callee in _called(node):
                walk(callee, owner, seen)

    for node in graph.node:
        owner = f"{node.op} {node.name!r}"
        if node.op in PYTHON_OPS:
            found.add(f"{node.op} (graph node {node.name!r})")
        for callee in _called(node):
            walk(callee, owner, set())
    return sorted(found)


def is_native(dataset: tf.data.Dataset) -> bool:
    """Whether ``dataset`` is made of native TensorFlow ops only."""
    return not find_python_ops(dataset)


def assert_native(dataset: tf.data.Dataset, *, what: str = "dataset") -> None:
    """Raise unless ``dataset`` is native-only.

    Args:
      dataset: The dataset to check.
      what: How to call it in the message.

    Raises:
      ConfigError: naming the Python ops found and what to use instead.
    """
    ops = find_python_ops(dataset)
    if ops:
        shown = "; ".join(ops[:5]) + (f"; and {len(ops) - 5} more" if len(ops) > 5 else "")
        raise ConfigError(
            f"{what} is not native-only: {len(ops)} op(s) call back into Python, which "
            f"tf.data service workers cannot run: {shown}. Read with tfinput.columnar or "
            "tfinput.tfrecord (native) instead of Parquet (pyarrow, a Python callback), and replace "
            "tf.py_function/tf.numpy_function by TensorFlow ops"
        )


# ------------------------------------------------------- reading through the service
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
    dataset: tf.data.Dataset,
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
    stall_timeout_s: float | None = DEFAULT_STALL_TIMEOUT_S,
    expected_rows: int | Callable[[], int | None] | None = None,
    tail_rows: int = 0,
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
      stall_timeout_s: Raise `ServiceError` once no batch came for this long (a worker
        died and none came back at its address); None: tf.data's own read, which then
        waits forever and counts nothing.
      expected_rows: Rows one pass delivers (or a function computing them, called in
        the background when the read starts): an epoch that ends with fewer logs a
        warning counting the rows lost. None: not compared.
      tail_rows: Rows an epoch may end short by with no loss (the ``drop_remainder``
        tail of each worker's last batch); not reported.

    Returns:
      The distributed dataset (same element spec): the guarded read
      (`guarded_dataset`) unless ``stall_timeout_s`` is None.

    Raises:
      ConfigError: the dataset is not native-only, or an invalid processing mode or
        stall bound.
    """
    import tensorflow as tf

    if check_native:
        assert_native(dataset, what="the dataset given to tf.data service")
    distributed = dataset.apply(
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
    if stall_timeout_s is None:
        return distributed
    return guarded_dataset(
        distributed,
        expected_rows=expected_rows,
        tail_rows=tail_rows,
        stall_timeout_s=stall_timeout_s,
        address=service,
    )


def _target_workers(value: str) -> str:
    if not isinstance(value, str) or value.upper() not in ("AUTO", "ANY", "LOCAL"):
        raise ConfigError(
            f"target_workers: expected one of ['AUTO', 'ANY', 'LOCAL'], got {value!r}"
        )
    return value.upper()


@runtime_checkable
class Fleet(Protocol):
    """Service workers that a pipeline can be read from by worker count
    (`tfinput.service.LocalFleet` is one)."""

    max_workers: int

    def address_for(self, workers: int) -> str:
        """The dispatcher address of a cluster of ``workers`` workers (0: the largest)."""
        ...


@dataclasses.dataclass(frozen=True)
class ServiceRead:
    """How a pipeline is read through tf.data service (`Pipeline.with_service`).

    Attributes:
      service: A dispatcher address (``grpc://host:port``) or a `Fleet`.
      workers: The address's worker count (for `workers_needed`); a `LocalFleet`
        uses ``PipelineConfig.service_workers`` instead.
      processing_mode: ``dynamic`` (default: the dispatcher hands each file to one
        worker, so every example comes once per epoch, at most once if a worker dies)
        or ``off`` (every worker reads everything: use with one worker); see
        `tfinput.service`.
      job_name: Consumers with the same name share one job (None: a job per
        iterator).
      stall_timeout_s: A read with no batch for this long raises `ServiceError` (a
        worker died and none came back at its address); None: no bound, and no count
        of the rows lost (`tfinput.service.guarded_dataset`).
    """

    service: str | Fleet
    workers: int | None = None
    processing_mode: str = "dynamic"
    job_name: str | None = None
    stall_timeout_s: float | None = DEFAULT_STALL_TIMEOUT_S

    def __post_init__(self) -> None:
        if not isinstance(self.service, (str, Fleet)):
            raise ConfigError(
                "with_service: expected a dispatcher address (grpc://host:port) or a "
                f"tfinput.service.LocalFleet, got {type(self.service).__name__}"
            )
        if self.stall_timeout_s is not None and not self.stall_timeout_s > 0:
            raise ConfigError(
                f"with_service: stall_timeout_s must be > 0 or None, got {self.stall_timeout_s}"
            )
        if isinstance(self.service, Fleet) and self.workers is not None:
            raise ConfigError(
                "with_service: a LocalFleet takes its worker count from "
                "PipelineConfig.service_workers, not workers="
            )

    @property
    def fleet(self) -> Fleet | None:
        return self.service if isinstance(self.service, Fleet) else None

    def worker_count(self, config: PipelineConfig) -> int | None:
        """The workers serving a build with ``config`` (None: unknown)."""
        if self.fleet is not None:
            return config.service_workers or self.fleet.max_workers
        return self.workers

    def address(self, config: PipelineConfig) -> str:
        """The dispatcher a build with ``config`` reads from.

        Raises:
          ConfigError: ``service_workers`` asks a fixed fleet for another worker count.
        """
        if self.fleet is not None:
            return self.fleet.address_for(config.service_workers)
        if config.service_workers and self.workers and config.service_workers != self.workers:
            raise ConfigError(
                f"service_workers={config.service_workers}, but {self.service} has "
                f"{self.workers} workers; a remote fleet's size is set where it runs "
                "(search worker counts with a tfinput.service.LocalFleet)"
            )
        return str(self.service)

    def apply(
        self,
        dataset: tf.data.Dataset,
        config: PipelineConfig,
        *,
        rows: Callable[[], int | None] | None = None,
        files: int = 0,
        batch_size: int | None = None,
    ) -> Any:
        """``dataset`` read through the service with ``config``'s service knobs,
        guarded (`stall_timeout_s`).

        Args:
          rows: Computes the rows of one pass over the files, where one pass is read
            (None: a repeated or sharded build, nothing to compare).
          files: The files the workers share (dynamic sharding hands out whole files).
          batch_size: The batch size each worker batches its part with.
        """
        expected, tail = self._epoch(config, rows, files, batch_size or config.batch_size)
        outstanding = config.service_max_outstanding_requests
        return distribute(
            dataset,
            self.address(config),
            processing_mode=self.processing_mode,
            job_name=self.job_name,
            compression=config.service_compression,
            max_outstanding_requests=None if outstanding == AUTOTUNE else outstanding,
            stall_timeout_s=self.stall_timeout_s,
            expected_rows=expected,
            tail_rows=tail,
        )

    def _epoch(
        self,
        config: PipelineConfig,
        rows: Callable[[], int | None] | None,
        files: int,
        batch_size: int,
    ) -> tuple[Callable[[], int | None] | None, int]:
        """``(rows one epoch delivers, rows its drop_remainder tails may drop)``.

        Dynamic sharding: every row once; each worker that read a file batches its
        own part, so up to ``batch_size - 1`` rows per such worker (at most one per
        file) are dropped by ``drop_remainder``. ``off``: every worker reads every row.
        """
        workers = self.worker_count(config)
        if rows is None:
            return None, 0
        readers = min(workers, files) if workers else files
        if self.processing_mode == "off":
            if not workers:
                return None, 0
            count = rows

            def rows_off() -> int | None:
                n = count()
                return None if n is None else n * workers

            rows, readers = rows_off, workers
        elif self.processing_mode != "dynamic":
            return None, 0
        tail = readers * (batch_size - 1) if config.drop_remainder else 0
        return rows, tail

    def describe(self) -> dict[str, Any]:
        fleet = self.fleet
        where = (
            f"{type(fleet).__name__}(max_workers={fleet.max_workers})" if fleet else self.service
        )
        return {
            "service": where,
            "workers": self.workers,
            "processing_mode": self.processing_mode,
            "stall_timeout_s": self.stall_timeout_s,
        }
