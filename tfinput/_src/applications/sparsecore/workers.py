"""The workers of a SparseCore feed: one run of reading the batches and preprocessing them
ahead (`Feeder`), the job a worker runs on each batch (`job`), the conversions of the
batches to numpy, and what the feed measures per table (`TableUsage`,
`SparseCoreFeedStats`). `tfinput.sparsecore` is the public API.

A `Feeder` holds no reference to the feed that uses it: a feed that nobody holds any
more is collected, and its finalizer stops the feeder (`Feeder.stop`), which frees the
batches it holds and lets its threads end.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import linecache
import logging
import pickle
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np

from tfinput._src.applications.sparsecore.plan import SparseCorePlan
from tfinput._src.core.device_prefetch import input_stage
from tfinput._src.core.errors import ConfigError, DataError

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
    """What a feed whose batches are keyed in an all-reduce across hosts keeps, so that
    stopping it spends the same numbers on every host: its `AllReduce` (until
    `give_back`), the first number of its range, and the next batch number (set by the
    serial feed as it goes, by `Feeder.stop` when it has stopped)."""

    #: Seconds `Feeder.stop` waits for the other hosts to preprocess the same batches
    #: (after `PATIENCE` seconds, it says so).
    TIMEOUT = 600.0
    PATIENCE = 10.0

    def __init__(self, all_reduce: Any, start: int) -> None:
        self.all_reduce = all_reduce
        self.base = all_reduce.take()
        self.start = start
        self.next = start

    def sync(self, number: int) -> tuple[Any, int]:
        """The interface and the number keying batch ``number``'s all-reduce."""
        return self.all_reduce.interface, self.all_reduce.check(self.base + number - self.start)

    def give_back(self) -> None:
        """The batches before `next` were preprocessed: their numbers are spent (once)."""
        if self.all_reduce is not None:
            self.all_reduce.give_back(self.next - self.start)
            self.all_reduce = None


class Feeder:
    """One run of a feed's workers, as keras-rs's MLPerf loader runs them: each of
    ``workers`` threads takes the next batch from ``source`` (one at a time, numbered
    from ``start``), preprocesses it (or has a worker process do it) and keeps the
    result until the training loop takes it, in order (`take`). At most ``prefetch``
    batches past those taken are read.

    `stop` ends it: the threads return after the batch they are on, and the results held
    are dropped; worker processes are shut down, their queued jobs cancelled. With a
    `Lockstep` (minibatching across hosts), it first preprocesses every batch any host
    may have read (up to ``prefetch`` past those taken) and waits for them: each one's
    all-reduce needs every host. The threads are daemons: one waiting in an all-reduce
    that no other host answers cannot hold up the interpreter's exit.
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
        self.source, self.plan, self.prefetch = source, plan, prefetch
        self.lockstep = lockstep
        self.start = start
        self.pool: ProcessPoolExecutor | None = None
        if processes:
            import multiprocessing

            check_main_guard("sparsecore_feed(processes=True)")

            # spawn: the training process has TensorFlow's and JAX's threads running, which
            # a fork would copy mid-state. A worker imports numpy and jax-tpu-embedding only.
            self.pool = ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(_shippable(plan),),
            )
        self.changed = threading.Condition()  # guards what follows
        self.reading = threading.Lock()  # one thread reads the source at a time
        self.next_read = start  # the number of the next batch to read
        self.taken = start  # the number of the next batch the training loop takes
        self.end: int | None = None  # no batch from this number on (or an error at it)
        self.drain_to: int | None = None  # stopping in lockstep: read up to here
        self.stopped = False
        self.results: dict[int, Any] = {}  # number -> (batch, Result), or an exception
        self.threads = [
            threading.Thread(target=self._work, name=f"tfinput-sparsecore_{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self.threads:
            thread.start()

    def _claim(self) -> int | None:
        """The number of the next batch for this thread to read (None: no more); holds
        ``reading``."""
        with self.changed:

            def may_read() -> bool:  # stopping reads up to drain_to without waiting
                if self.stopped or self.end is not None or self.drain_to is not None:
                    return True
                return self.next_read < self.taken + self.prefetch

            self.changed.wait_for(may_read)
            if self.stopped or self.end is not None:
                return None
            if self.drain_to is not None and self.next_read >= self.drain_to:
                return None
            number = self.next_read
            self.next_read += 1
            return number

    def _work(self) -> None:
        while True:
            with self.reading:
                number = self._claim()
                if number is None:
                    return
                try:
                    with input_stage("tfinput/sparsecore/read"):
                        batch = next(self.source, END)
                except BaseException as e:  # the source's own error, raised in take()
                    batch = e
                if self.stopped:  # stopped while this thread read: nothing to do
                    return
                if batch is END or isinstance(batch, BaseException):
                    with self.changed:
                        self.end = number
                        if batch is not END:
                            self.results[number] = batch
                        self.changed.notify_all()
                    return
            try:
                result = self._run(number, batch)
            except BaseException as e:  # a worker process died (BrokenProcessPool)
                result = e
            kept = result if isinstance(result, BaseException) else (batch, result)
            with self.changed:
                if not self.stopped:
                    self.results[number] = kept
                self.changed.notify_all()

    def _run(self, number: int, batch: Any) -> Result:
        """Batch ``number`` preprocessed: here, with the whole features, or by a worker
        process, with only the ids and weights (what preprocessing reads)."""
        try:
            features, _labels = batch
            if self.pool is not None:
                features = {"ids": features["ids"], "weights": features.get("weights", {})}
        except (TypeError, ValueError, KeyError) as e:
            return Result(number, error=e)  # raised in take(), in order
        sync = self.lockstep.sync(number) if self.lockstep is not None else None
        if self.pool is None:
            return job(self.plan, number, features, False, sync)
        try:
            return self.pool.submit(job, None, number, features, True).result()
        except BrokenProcessPool:
            raise DataError(
                f"sparsecore_feed: a worker process ended abruptly while preprocessing batch "
                f"{number} (killed, out of memory, or it failed to start: each one imports "
                "the main module again, so a script must start the feed under "
                '`if __name__ == "__main__":`; its own error, if any, is on stderr above)'
            ) from None

    def take(self) -> Any:
        """The next batch's ``(batch, Result)``, in order (waiting for it), `END` after
        the last, or the error reading or preprocessing it raised."""
        with self.changed:
            self.changed.wait_for(
                lambda: self.taken in self.results or self.taken == self.end or self.stopped
            )
            if self.stopped or (self.taken == self.end and self.taken not in self.results):
                return END
            item = self.results.pop(self.taken)
            self.taken += 1
            self.changed.notify_all()
            return item

    def stop(self) -> None:
        """End this run: the threads return after the batch they are on, the results
        held are dropped (with a `Lockstep`: every batch any host may have read is
        preprocessed first, and its numbers given back).

        Raises:
          DataError: with a `Lockstep`, the other hosts did not preprocess the same
            batches within `Lockstep.TIMEOUT` seconds (they did not stop their feeds at
            the same batch).
        """
        step = self.lockstep
        with self.changed:
            if step is None:
                self.stopped = True
            else:  # any host may have read up to prefetch past those taken
                self.drain_to = self.taken + self.prefetch
            self.results.clear()
            self.changed.notify_all()
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
        if step is None:
            return
        if not _joined(self.threads, Lockstep.PATIENCE):
            log.warning(
                "tfinput: sparsecore_feed: closing waits for the other hosts to preprocess "
                "batches %d-%d too (minibatching all-reduce; at most %.0f s)",
                self.start,
                self.drain_to - 1,
                Lockstep.TIMEOUT,
            )
            if not _joined(self.threads, Lockstep.TIMEOUT):
                raise DataError(
                    f"sparsecore_feed: batches {self.start}-{self.drain_to - 1} of this feed "
                    f"were not preprocessed by every host within {Lockstep.TIMEOUT:.0f} s: "
                    "with minibatching across hosts, every host must stop its feed after the "
                    "same batch (this AllReduce cannot be used again)"
                )
        with self.changed:
            self.stopped = True
            self.results.clear()
        spent = min(self.next_read, self.drain_to)
        step.next = spent if self.end is None else min(spent, self.end)
        step.give_back()


def check_main_guard(what: str) -> None:
    """Refuse to start worker processes from a script's top-level code that is not under
    ``if __name__ == "__main__":``.

    A process started with ``spawn`` imports the parent's main module again (a script
    by its path, ``python -m`` by its name) before it runs anything: top-level code that
    is not behind the guard runs again in every worker, which would start workers of
    its own (and fails: the pool breaks, a bare ``BrokenProcessPool``). The main
    thread's stack says which top-level statement of the main module is running; the
    main module's source says whether that statement is the guard.

    Raises:
      ConfigError: the statement that started ``what`` is not under the guard, naming
        the script, its line and the fix.
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    path = getattr(main, "__file__", None)
    if main is None or path is None:
        return  # an interactive session, ``python -c``: nothing is imported again
    if spec is not None and (spec.name == "__main__" or spec.name.endswith(".__main__")):
        return  # a package's __main__ is not run again (multiprocessing.spawn)
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    while frame is not None and not (
        frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)
    ):
        frame = frame.f_back
    if frame is None:
        return  # the main module's top-level code has finished
    line = frame.f_lineno
    try:
        tree = ast.parse("".join(linecache.getlines(path)))
    except (SyntaxError, ValueError):
        return
    statement = next((s for s in tree.body if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
    if statement is None or _is_main_guard(statement):
        return
    raise ConfigError(
        f'{what}: {path}, line {line}, starts it outside `if __name__ == "__main__":`; '
        "each worker process is started with spawn and imports that script again, which "
        "would run this line again in every worker (and break the pool). Move the code "
        'that starts it under `if __name__ == "__main__":` (or into a function called '
        "from there), or use threads (processes=False)"
    )


def _is_main_guard(statement: ast.stmt) -> bool:
    """Whether ``statement`` is ``if __name__ == "__main__":`` (either way round)."""
    if not isinstance(statement, ast.If) or not isinstance(statement.test, ast.Compare):
        return False
    test = statement.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    values = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]


def _joined(threads: list[threading.Thread], timeout: float) -> bool:
    """Whether every thread ended within ``timeout`` seconds in all."""
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in threads)


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
