"""The workers of a SparseCore feed: one run of reading the batches and preprocessing them
ahead (`Feeder`), the job a worker runs on each batch (`job`), the conversions of the
batches to numpy, and what the feed measures per table (`TableUsage`,
`SparseCoreFeedStats`). `tfinput.sparsecore` is the public API.

A `Feeder` holds no reference to the feed that uses it: a feed that nobody holds any
more is collected, and its finalizer stops the feeder (`Feeder.stop`), which frees the
batches it holds and lets its threads end.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
import pickle
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from tfinput._src.applications.sparsecore.plan import SparseCorePlan
from tfinput._src.core.device_prefetch import input_stage
from tfinput._src.core.errors import ConfigError, DataError

__all__ = [
    "END",
    "DaemonThreads",
    "Feeder",
    "Lockstep",
    "Result",
    "SparseCoreFeedStats",
    "TableUsage",
    "explain",
    "job",
    "numpy_batches",
    "used_entries",
    "used_entries_minibatched",
]

log = logging.getLogger("tfinput")


@dataclasses.dataclass
class TableUsage:
    """One stacked table's COO buffers over the batches fed so far.

    Attributes:
      batches: Batches preprocessed.
      buffer_entries: Entries of the table's static COO buffers, summed over batches.
      used_entries: Entries that carry an id (the rest is padding).
      dropped_ids: Ids dropped because a partition overflowed (``allow_id_dropping``).
      max_ids_per_partition: The most ids one partition needed in one batch.
      max_unique_ids_per_partition: The most distinct ids one partition needed.
    """

    batches: int = 0
    buffer_entries: int = 0
    used_entries: int = 0
    dropped_ids: int = 0
    max_ids_per_partition: int = 0
    max_unique_ids_per_partition: int = 0

    @property
    def usage(self) -> float:
        """The share of the buffers that carried ids."""
        return self.used_entries / self.buffer_entries if self.buffer_entries else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "usage": round(self.usage, 4)}


@dataclasses.dataclass
class SparseCoreFeedStats:
    """What a `SparseCoreFeed` did.

    Attributes:
      batches: Batches handed to the training loop.
      tables: `TableUsage` per stacked table.
      preprocess_seconds: Wall time of the preprocessing calls, summed over workers.
      wait_seconds: Time the training loop waited in ``next()`` for a ready batch.
      minibatched: Batches split into more than one minibatch (``minibatching``).
      max_minibatches: The most minibatches one batch was split into.
    """

    batches: int = 0
    tables: dict[str, TableUsage] = dataclasses.field(default_factory=dict)
    preprocess_seconds: float = 0.0
    wait_seconds: float = 0.0
    minibatched: int = 0
    max_minibatches: int = 0

    @property
    def dropped_ids(self) -> int:
        """Ids dropped over every table."""
        return sum(t.dropped_ids for t in self.tables.values())

    def add(self, other: SparseCoreFeedStats) -> None:
        """Add another feed's statistics to these (maxima: the larger)."""
        self.batches += other.batches
        self.preprocess_seconds += other.preprocess_seconds
        self.wait_seconds += other.wait_seconds
        self.minibatched += other.minibatched
        self.max_minibatches = max(self.max_minibatches, other.max_minibatches)
        for name, t in other.tables.items():
            mine = self.tables.setdefault(name, TableUsage())
            for field in ("batches", "buffer_entries", "used_entries", "dropped_ids"):
                setattr(mine, field, getattr(mine, field) + getattr(t, field))
            for field in ("max_ids_per_partition", "max_unique_ids_per_partition"):
                setattr(mine, field, max(getattr(mine, field), getattr(t, field)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "preprocess_seconds": round(self.preprocess_seconds, 4),
            "wait_seconds": round(self.wait_seconds, 4),
            "dropped_ids": self.dropped_ids,
            "minibatched": self.minibatched,
            "max_minibatches": self.max_minibatches,
            "tables": {name: t.to_dict() for name, t in sorted(self.tables.items())},
        }


def used_entries(row_pointers: np.ndarray, buffer_size: int, partitions: int) -> int:
    """Ids in one table's flat COO buffer: per SparseCore, its partitions' row pointers
    are running ends, and each partition starts at the previous end rounded up to 8."""
    ends = np.asarray(row_pointers, dtype=np.int64).reshape(-1)
    if ends.size == 0:
        return 0
    per_sc = ends.reshape(-1, partitions) if ends.size % partitions == 0 else ends[None, :]
    starts = np.zeros_like(per_sc)
    starts[:, 1:] = -(-per_sc[:, :-1] // 8) * 8  # the previous end rounded up to 8
    return min(int(np.clip(per_sc - starts, 0, None).sum()), buffer_size)


def used_entries_minibatched(
    row_pointers: np.ndarray, buffer_size: int, devices: int, rows: int
) -> int:
    """Ids in one table's flat COO buffer with minibatching: per device, its first
    ``rows`` row pointers (SparseCores x minibatches x partitions; the rest are not
    written) are running ends within the device's buffer, each partition starting at
    the previous end rounded up to 8."""
    ends = np.asarray(row_pointers, dtype=np.int64).reshape(devices, -1)[:, :rows]
    if ends.size == 0:
        return 0
    starts = np.zeros_like(ends)
    starts[:, 1:] = -(-ends[:, :-1] // 8) * 8
    return min(int(np.clip(ends - starts, 0, None).sum()), buffer_size)


#: What the feeder queues after the last batch.
END = object()


class Result:
    """A batch's preprocessed input (``item``) with its buffer usage and statistics, or
    the error preprocessing it raised. Returned by worker processes too (pickled)."""

    __slots__ = ("error", "item", "minibatches", "number", "seconds", "stats")

    def __init__(self, number: int, *, error: BaseException | None = None) -> None:
        self.number = number
        self.item: Any = None
        self.stats: Any = None
        self.error = error
        self.seconds = 0.0
        self.minibatches = 1


#: The plan of a worker process (`_start_worker`).
_WORKER_PLAN: SparseCorePlan | None = None


def _shippable(plan: SparseCorePlan) -> bytes:
    """The plan pickled for worker processes. The table specs' initializers (closures
    that do not pickle, and that preprocessing never reads) are left out of a copy."""
    specs = copy.deepcopy(dict(plan.feature_specs))  # shared table specs stay shared
    for f in specs.values():
        # jax-tpu-embedding refuses setattr on a stacked table spec; the copy is ours.
        object.__setattr__(f.table_spec, "initializer", None)
    return pickle.dumps(dataclasses.replace(plan, feature_specs=specs))


def _start_worker(plan: bytes) -> None:
    global _WORKER_PLAN
    _WORKER_PLAN = pickle.loads(plan)


def job(
    plan: SparseCorePlan | None,
    number: int,
    features: Mapping[str, Any],
    in_process: bool,
    sync: tuple[Any, int] | None = None,
) -> Result:
    """Preprocess batch ``number`` (with ``plan``, or the worker process's own): the
    input, its buffer usage per table and jax-tpu-embedding's statistics. ``sync``:
    the all-reduce interface and the number keying this batch's (minibatching on
    several hosts)."""
    plan = plan if plan is not None else _WORKER_PLAN
    assert plan is not None
    result = Result(number)
    start = time.perf_counter()
    all_reduce, sync_number = sync if sync is not None else (None, None)
    try:
        with input_stage("tfinput/sparsecore/preprocess"):
            sparse, stats = plan.preprocess(
                features, batch_number=number, all_reduce=all_reduce, sync_number=sync_number
            )
        partitions = plan.num_sc_per_device * plan.global_device_count
        count: Callable[[Any, int], int]
        if plan.minibatching:
            result.minibatches = int(np.max(sparse.num_minibatches))
            rows = plan.num_sc_per_device * result.minibatches * partitions
            devices = plan.local_device_count

            def count(pointers: Any, size: int) -> int:
                return used_entries_minibatched(pointers, size, devices, rows)
        else:

            def count(pointers: Any, size: int) -> int:
                return used_entries(pointers, size, partitions)

        used = {
            table: (int(np.size(ids)), count(sparse.lhs_row_pointers[table], int(np.size(ids))))
            for table, ids in sparse.lhs_embedding_ids.items()
        }
        result.item, result.stats = plan.formatted(sparse), (used, stats)
    except BaseException as e:  # raised in next(), in order
        # From a process, as tfinput's own error: any exception pickles as that.
        result.error = explain(e, number) if in_process else e
    result.seconds = time.perf_counter() - start
    return result


class Lockstep:
    """What a `Feeder` whose batches are keyed in an all-reduce across hosts keeps, so
    that stopping it spends the same numbers on every host: its `AllReduce`, the first
    number of its range, the batches the training loop took (the feed counts them),
    the next batch number to submit, and the jobs not yet done."""

    #: Seconds `Feeder.stop` waits for the other hosts to preprocess the same batches
    #: (after `PATIENCE` seconds, it says so).
    TIMEOUT = 600.0
    PATIENCE = 10.0

    def __init__(self, all_reduce: Any, start: int) -> None:
        self.all_reduce = all_reduce
        self.base = all_reduce.take()
        self.start = start
        self.taken = 0
        self.next = start
        self.pending: list[Future[Result]] = []

    def sync(self, number: int) -> tuple[Any, int]:
        """The interface and the number keying batch ``number``'s all-reduce."""
        return self.all_reduce.interface, self.all_reduce.check(self.base + number - self.start)


class DaemonThreads(Executor):
    """Worker threads that do not hold up the interpreter's exit, for a feed in lockstep
    (`ThreadPoolExecutor` joins its threads at exit: one blocked in an all-reduce that
    no other host answers would hang the exit for ever)."""

    def __init__(self, workers: int, name: str) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}_{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._jobs.put((future, fn, args, kwargs))
        return future

    def _run(self) -> None:
        while (item := self._jobs.get()) is not None:
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:
                future.set_exception(e)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            while True:
                try:
                    item = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in self._threads:
            self._jobs.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


class Feeder:
    """One run of a feed's workers: a thread reads the batches from ``source`` (numbered
    from ``start``) and hands each to a worker of ``pool``; the bounded queue `ready` of
    ``(batch, future)`` keeps at most ``prefetch`` batches ahead of the training loop.

    `stop` ends it: the reading thread returns at its next batch (a blocked hand-over
    waits at most a tenth of a second), the batches held are dropped and the pool shuts
    down, its queued jobs cancelled. With a `Lockstep` (minibatching across hosts), it
    first preprocesses every batch any host may have started (up to ``prefetch + 1``
    past those the training loop took) and waits for them: each one's all-reduce needs
    every host.
    """

    def __init__(
        self,
        source: Iterator[Any],
        plan: SparseCorePlan,
        *,
        workers: int,
        prefetch: int,
        processes: bool,
        start: int,
        lockstep: Lockstep | None = None,
    ) -> None:
        self.ready: queue.Queue[Any] = queue.Queue(maxsize=prefetch)
        self.stopped = threading.Event()
        self.source, self.plan, self.prefetch = source, plan, prefetch
        self.lockstep = lockstep
        self.pool: Executor
        if processes:
            import multiprocessing

            # spawn: the training process has TensorFlow's and JAX's threads running, which
            # a fork would copy mid-state. A worker imports numpy and jax-tpu-embedding only.
            self.pool = ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(_shippable(plan),),
            )
        elif lockstep is not None:
            self.pool = DaemonThreads(workers, "tfinput-sparsecore")
        else:
            self.pool = ThreadPoolExecutor(workers, thread_name_prefix="tfinput-sparsecore")
        self.thread = threading.Thread(
            target=_feed,
            args=(
                source,
                self.ready,
                self.stopped,
                self.pool,
                None if processes else plan,
                start,
                lockstep,
            ),
            name="tfinput-sparsecore-feeder",
            daemon=True,
        )
        self.thread.start()

    def stop(self) -> None:
        """End this run: the reading thread stops, the batches held are dropped, the
        workers finish the batch they are on and exit (with a `Lockstep`: every batch
        any host may have started is preprocessed first, and its numbers given back).

        Raises:
          DataError: with a `Lockstep`, the other hosts did not preprocess the same
            batches within `Lockstep.TIMEOUT` seconds (they did not stop their feeds at
            the same batch).
        """
        self.stopped.set()
        while True:
            try:
                self.ready.get_nowait()
            except queue.Empty:
                break
        step = self.lockstep
        if step is None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            return
        self.thread.join()
        # Any host may have started batches up to prefetch + 1 past those taken (the
        # queue, and one handed to a worker while the reader waits to queue it).
        end = step.start + step.taken + self.prefetch + 1
        try:
            while step.next < end:
                batch = next(self.source, END)
                if batch is END:
                    break
                step.pending.append(_submit(self.pool, self.plan, step.next, batch, step))
                step.next += 1
        except Exception:  # the source's own error: every host reads the same data
            pass
        _done, late = wait(step.pending, timeout=Lockstep.PATIENCE)
        if late:
            log.warning(
                "tfinput: sparsecore_feed: closing waits for the other hosts to preprocess "
                "batches %d-%d too (minibatching all-reduce; at most %.0f s)",
                step.start,
                step.next - 1,
                Lockstep.TIMEOUT,
            )
            _done, late = wait(late, timeout=Lockstep.TIMEOUT)
        self.pool.shutdown(wait=False)
        if late:
            raise DataError(
                f"sparsecore_feed: batches {step.start}-{step.next - 1} of this feed were not "
                f"preprocessed by every host within {Lockstep.TIMEOUT:.0f} s: with "
                "minibatching across hosts, every host must stop its feed after the same "
                "batch (this AllReduce cannot be used again)"
            )
        step.pending.clear()
        step.all_reduce.give_back(step.next - step.start)


def _feed(
    source: Iterator[Any],
    ready: queue.Queue[Any],
    stopped: threading.Event,
    pool: Executor,
    plan: SparseCorePlan | None,
    start: int,
    lockstep: Lockstep | None,
) -> None:
    """The reading thread of a `Feeder` (``plan`` None: the pool's workers are processes
    with a plan of their own)."""

    def put(item: Any) -> bool:
        while not stopped.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    try:
        for number in itertools.count(start):
            with input_stage("tfinput/sparsecore/read"):
                batch = next(source, END)
            if batch is END:
                break
            if stopped.is_set():
                return
            future = _submit(pool, plan, number, batch, lockstep)
            if lockstep is not None:
                lockstep.pending = [f for f in lockstep.pending if not f.done()]
                lockstep.pending.append(future)
                lockstep.next = number + 1
            if not put((batch, future)):
                return
    except BaseException as e:  # the source's own error, raised in next()
        if not stopped.is_set():
            put(e)
        return
    put(END)


def _submit(
    pool: Executor,
    plan: SparseCorePlan | None,
    number: int,
    batch: Any,
    lockstep: Lockstep | None = None,
) -> Future[Result]:
    """Batch ``number`` handed to a worker: the whole features to a thread, only the
    ids and weights (what preprocessing reads) to a process (``plan`` None)."""
    try:
        features, _labels = batch
        if plan is None:
            features = {"ids": features["ids"], "weights": features.get("weights", {})}
    except (TypeError, ValueError, KeyError) as e:
        done: Future[Result] = Future()
        done.set_result(Result(number, error=e))  # raised in next(), in order
        return done
    sync = lockstep.sync(number) if lockstep is not None else None
    return pool.submit(job, plan, number, features, plan is None, sync)


def explain(error: BaseException, number: int) -> BaseException:
    """A preprocessing error with the batch it happened in (tfinput's own errors name
    it already, or get it prefixed)."""
    if isinstance(error, DataError):
        return error
    if isinstance(error, ConfigError):
        return ConfigError(f"batch {number}: {error}")
    return DataError(
        f"SparseCore preprocessing of batch {number} failed: {type(error).__name__}: {error}"
    )


def numpy_batches(batches: Iterable[Any]) -> Iterator[Any]:
    """The batches as numpy: a `tf.data.Dataset` through ``as_numpy_iterator``, other
    iterables (an `InputIterator` yields TensorFlow tensors) converted batch by batch."""
    as_numpy = getattr(batches, "as_numpy_iterator", None)
    if callable(as_numpy):
        return iter(as_numpy())
    return (_to_numpy(batch) for batch in batches)


def _to_numpy(tree: Any) -> Any:
    """Tensors (anything with ``.numpy()``) in dicts, tuples and lists as numpy."""
    if isinstance(tree, Mapping):
        return {k: _to_numpy(v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_to_numpy(v) for v in tree)
    to_numpy = getattr(tree, "numpy", None)
    return to_numpy() if callable(to_numpy) else tree
