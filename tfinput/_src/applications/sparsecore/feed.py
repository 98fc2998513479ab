"""SparseCore-ready batches: jax-tpu-embedding's input preprocessing off the training thread.

On TPUs with SparseCore (v5p, v6e and later) on JAX, every batch is first turned on the
host into SparseCore's input form: per device and per SparseCore partition, sorted and
grouped COO buffers (row pointers, embedding ids, sample ids, gains) of static sizes.
jax-tpu-embedding's ``preprocess_sparse_dense_matmul_input`` does it; keras-rs's
``DistributedEmbedding.preprocess`` calls it on JAX. Called before each step on the
training thread (keras-rs's own JAX example wraps the dataset in a Python generator), its
whole time adds to every step.

`sparsecore_feed` calls it for each batch of a tfinput pipeline on background worker
threads, up to ``prefetch`` batches ahead, and hands the batches over in order::

    plan = SparseCorePlan(feature_specs=specs, local_device_count=8,
                          global_device_count=8, num_sc_per_device=4)
    with sparsecore_feed(pipeline.build(config), plan, workers=2) as feed:
        for (dense, sparse), labels in feed:
            state = train_step(state, dense, sparse, labels)
    print(feed.stats.to_dict())   # COO buffer usage and dropped ids, per table

``sparse`` is exactly what ``preprocess_sparse_dense_matmul_input`` returns for that
batch's entries of weight above 0 (a ``PreprocessedInput``; a list's padding is left
out), called with the plan's arguments and the batch's number in the stream
(`SparseCorePlan.preprocess`); the tests compare every buffer with a serial call, bit
for bit. With keras-rs (``SparseCorePlan.from_keras_rs(layer)``), it is what
``layer.preprocess`` returns instead. ``dense`` is the batch's ``features["dense"]``.

The input: tfinput's ``per_feature`` batches with the ``dense`` multi-hot format.
``features["ids"][name]`` is ``[B]`` for a single id (fed as ``[B, 1]`` with weight 1) or
``[B, max_len]`` for a multi-hot list (padded with id 0 and weight 0, weights in
``features["weights"][name]``; the padding is not fed); the plan's ``feature_specs``
name the features it feeds.

Profiles: with JAX's profiler on, the feed's stages are input-pipeline stages that
xprof's input-pipeline analyzer counts and `profiles.analyze` lists (``host_stages``):
``tfinput/sparsecore/read`` (a worker takes a batch from tf.data),
``tfinput/sparsecore/preprocess`` (a worker thread's preprocessing; not seen from worker
processes) and ``tfinput/sparsecore/wait`` (the training loop waits for a ready batch).

Resuming: feed from a `tfinput.resume.InputIterator` (``pipeline.iterator(config)``)
and save ``feed.get_state()``: the position after the last batch the training loop
took, not after what the workers ran ahead to. A new feed over an iterator restored
from it (``iterator.set_state(state)``) continues with the next batch, and numbers the
batches from the iterator's position, so every batch is preprocessed as before::

    it = pipeline.iterator(config)
    it.set_state(saved)                      # when resuming
    with sparsecore_feed(it, plan) as feed:
        for step, ((dense, sparse), labels) in enumerate(feed):
            ...
            if step % 1000 == 0:
                save(feed.get_state())
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from tfinput._src.applications.sparsecore.minibatching import AllReduce
from tfinput._src.applications.sparsecore.plan import SparseCorePlan
from tfinput._src.applications.sparsecore.stacks import embedding_module
from tfinput._src.applications.sparsecore.workers import (
    END,
    Feeder,
    Lockstep,
    Result,
    SparseCoreFeedStats,
    TableUsage,
    explain,
    job,
    numpy_batches,
)
from tfinput._src.core._input_iterator import InputIterator
from tfinput._src.core.device_prefetch import input_stage
from tfinput._src.core.errors import ConfigError, ResumeError

#: jax-tpu-embedding's statistics an FDO client records (``SparseDenseMatmulInputStats``).
_FDO_FIELDS = (
    "max_ids_per_partition",
    "max_unique_ids_per_partition",
    "required_buffer_size_per_sc",
    "id_drop_counters",
)

log = logging.getLogger("tfinput")


class SparseCoreFeed(Iterator[Any]):
    """Batches with their SparseCore preprocessing done ahead on worker threads, in
    order (`sparsecore_feed`). Iterate it, then `close` it (or use it as a context
    manager); `stats` says what it did. A feed that is not closed stops its workers
    and frees the batches it holds when it is collected (its last reference gone, as
    when a loop over ``sparsecore_feed(...)`` is left)."""

    def __init__(
        self,
        batches: Iterable[Any],
        plan: SparseCorePlan,
        *,
        workers: int,
        prefetch: int,
        processes: bool = False,
        fdo: Any = None,
        all_reduce: AllReduce | None = None,
        warned: set[str] | None = None,
    ) -> None:
        for name, value, least in (("workers", workers, 0), ("prefetch", prefetch, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(
                    f"sparsecore_feed: {name} must be an int >= {least}, got {value!r}"
                )
        embedding_module()  # a missing library fails here, not in a worker
        for method in ("record", "publish"):
            if fdo is not None and not callable(getattr(fdo, method, None)):
                raise ConfigError(
                    "sparsecore_feed: fdo must be a jax-tpu-embedding FDO client (record, "
                    f"publish, load: NPZFileFDOClient), got {type(fdo).__name__}"
                )
        _check_minibatching(plan, all_reduce, processes and workers > 0)
        self.plan = plan
        self.stats = SparseCoreFeedStats()
        self._all_reduce = all_reduce
        self._lockstep: Lockstep | None = None
        self._fdo = fdo
        # jax-tpu-embedding's statistics of the batches taken since the last publish():
        # field -> stack -> element-wise maxima (drop counts: sums).
        self._unpublished: dict[str, dict[str, np.ndarray]] = {}
        # An InputIterator (tfinput.resume): batches are numbered from its position, and
        # get_state() saves the position after the last batch the training loop took.
        self._iterator = batches if isinstance(batches, InputIterator) else None
        self._start = self._iterator.position if self._iterator is not None else 0
        self._taken = 0  # batches next() returned since _start
        self._workers, self._prefetch = workers, prefetch
        if workers and self._iterator is not None and self._iterator.keep < prefetch + 1:
            raise ConfigError(
                f"sparsecore_feed: the iterator keeps {self._iterator.keep} batch(es), but "
                f"the feed may hold {prefetch + 1} it delivered and the training loop has "
                f"not taken (prefetch {prefetch} + 1): get_state() needs them. Make the "
                f"iterator with keep >= {prefetch + 1} (pipeline.iterator(config, keep=...))"
            )
        self._batches = batches
        # Tables whose drops were logged (shared by the feeds of one sparsecore_step).
        self._warned: set[str] = warned if warned is not None else set()
        self._serial = workers == 0  # each batch on the training thread, when asked
        self._processes = bool(processes) and not self._serial
        self._begin()

    def _begin(self) -> None:
        """Start a run: the source read from its current position and, unless serial, a
        `Feeder` (its own results and stop flag: one of an earlier run only sees its own).
        The feeder holds nothing of this feed: collected, the feed stops it."""
        self._closed = False
        source = numpy_batches(self._batches)
        self._lockstep = (
            Lockstep(self._all_reduce, self._start) if self._all_reduce is not None else None
        )
        if self._serial:
            self._source: Iterator[Any] | None = source
            self._feeder: Feeder | None = None
            if self._lockstep is not None:  # collected unclosed, it still gives them back
                self._stop_feeder = weakref.finalize(self, self._lockstep.give_back)
            return
        self._source = None
        self._feeder = Feeder(
            source,
            self.plan,
            workers=self._workers,
            prefetch=self._prefetch,
            processes=self._processes,
            start=self._start,
            lockstep=self._lockstep,
        )
        self._stop_feeder = weakref.finalize(self, self._feeder.stop)
        # In lockstep, stopping waits for the other hosts: not at the interpreter's exit
        # (its worker threads are daemons, and do not hold the exit up either).
        self._stop_feeder.atexit = self._lockstep is None

    @staticmethod
    def _item(batch: Any, result: Result) -> Any:
        features, labels = batch
        return (features["dense"], result.item), labels

    # ------------------------------------------------------------- the consumer
    def __iter__(self) -> SparseCoreFeed:
        return self

    def __next__(self) -> Any:
        start = time.perf_counter()
        if self._closed:
            raise StopIteration
        if self._source is not None:  # serial: each batch on this thread
            with input_stage("tfinput/sparsecore/read"):
                batch = next(self._source)  # the source's errors and its end, as they are
            number = self.position
            try:
                features, _labels = batch
            except (TypeError, ValueError) as e:
                raise explain(e, number) from e
            sync = self._lockstep.sync(number) if self._lockstep is not None else None
            result = job(self.plan, number, features, False, sync)
            if self._lockstep is not None:
                self._lockstep.next = number + 1
            self.stats.wait_seconds += time.perf_counter() - start
            if result.error is not None:
                self._fold(getattr(result.error, "stats", None))
                raise explain(result.error, result.number) from result.error
            self._record(result)
            return self._item(batch, result)
        assert self._feeder is not None
        with input_stage("tfinput/sparsecore/wait"):
            item = self._feeder.take()
        if item is END:  # later calls end too
            raise StopIteration
        if isinstance(item, BaseException):  # the source's error, or a worker process died
            self.close()
            raise item
        batch, result = item
        self.stats.wait_seconds += time.perf_counter() - start
        if result.error is not None:
            self._fold(getattr(result.error, "stats", None))  # a batch beyond the limits
            self.close()
            raise explain(result.error, result.number) from result.error
        self._record(result)
        return self._item(batch, result)

    def _record(self, result: Result) -> None:
        used, stats = result.stats
        self._fold(stats)
        self._taken += 1
        self.stats.batches += 1
        if result.minibatches > 1:
            self.stats.minibatched += 1
        self.stats.max_minibatches = max(self.stats.max_minibatches, result.minibatches)
        self.stats.preprocess_seconds += result.seconds
        for table, (size, entries) in used.items():
            usage = self.stats.tables.setdefault(table, TableUsage())
            usage.batches += 1
            usage.buffer_entries += size
            usage.used_entries += entries
            dropped = int(stats.id_drop_counters.get(table, 0))
            usage.dropped_ids += dropped
            usage.max_ids_per_partition = max(
                usage.max_ids_per_partition, int(np.max(stats.max_ids_per_partition[table]))
            )
            usage.max_unique_ids_per_partition = max(
                usage.max_unique_ids_per_partition,
                int(np.max(stats.max_unique_ids_per_partition[table])),
            )
            if dropped and table not in self._warned:
                self._warned.add(table)
                log.warning(
                    "tfinput: SparseCore table %s: %d id(s) dropped in batch %d (beyond "
                    "max_ids_per_partition / max_unique_ids_per_partition; this batch "
                    "needed %d / %d); every drop is counted in the feed's stats. Raise "
                    "the limits (tfinput schema sparsecore measures them)",
                    table, dropped, result.number,
                    int(np.max(stats.max_ids_per_partition[table])),
                    int(np.max(stats.max_unique_ids_per_partition[table])),
                )  # fmt: skip

    def _fold(self, stats: Any) -> None:
        """Add one batch's jax-tpu-embedding statistics to those the next `publish`
        records (with an FDO client)."""
        if self._fdo is None or stats is None:
            return
        for field in _FDO_FIELDS:
            kept = self._unpublished.setdefault(field, {})
            for stack, value in getattr(stats, field).items():
                value = np.asarray(value, dtype=np.int64)
                if stack not in kept:
                    kept[stack] = value
                elif field == "id_drop_counters":
                    kept[stack] = kept[stack] + value
                else:
                    kept[stack] = np.maximum(kept[stack], value)

    def publish(self) -> None:
        """Publish the statistics of the batches taken since the last publish through
        the feed's FDO client: one ``record`` of their element-wise maxima (not one per
        batch), then the client's ``publish`` (the NPZ client writes this host's file).
        Every host publishes; the client's ``load()`` then gives the maxima over the
        hosts, for `SparseCorePlan.with_limits`. `close` publishes what is left, and
        so does a feed that refuses a batch beyond its limits, with that batch's
        statistics.

        Raises:
          ConfigError: the feed has no FDO client (``sparsecore_feed(..., fdo=...)``).
        """
        if self._fdo is None:
            raise ConfigError("sparsecore_feed.publish(): the feed has no FDO client (fdo=)")
        if self._unpublished:
            stats = embedding_module().SparseDenseMatmulInputStats(**self._unpublished)
            self._unpublished = {}
            self._fdo.record(stats)
        self._fdo.publish()

    @property
    def position(self) -> int:
        """Batches taken by the training loop, counted from the start of the data when
        the feed reads an `InputIterator` (from the feed's start otherwise)."""
        return self._start + self._taken

    @property
    def keep(self) -> int | None:
        """Batches taken from the feed that `get_state` can still hand back as not
        consumed (``unconsumed``): the iterator's ``keep`` less what the feed itself
        may hold. None without an `InputIterator`."""
        if self._iterator is None:
            return None
        return self._iterator.keep - (self._prefetch + 1 if self._workers else 0)

    def _resumable(self, method: str) -> InputIterator:
        if self._iterator is None:
            raise ResumeError(
                f"sparsecore_feed.{method}(): the feed reads a plain iterable; feed it "
                "pipeline.iterator(config) (a tfinput.resume.InputIterator) to save and "
                "restore its position"
            )
        return self._iterator

    def get_state(self, *, unconsumed: int = 0) -> bytes:
        """The input position after the last batch the training loop took (the batches
        the workers ran ahead to are read again after a restore): the feed's
        `InputIterator`'s state at `position`.

        Args:
          unconsumed: The last ``unconsumed`` batches taken from the feed were not
            trained on (a device prefetcher holds them: `tfinput.device_prefetch.to_jax`
            over the feed saves through this); they come again after a restore.

        Raises:
          ResumeError: the feed does not read an `InputIterator`; ``unconsumed`` is not
            between 0 and the batches taken, or more than `keep`.
        """
        iterator = self._resumable("get_state")
        if isinstance(unconsumed, bool) or not isinstance(unconsumed, int) or unconsumed < 0:
            raise ResumeError(f"unconsumed must be an integer >= 0, got {unconsumed!r}")
        return iterator.state_at(self.position - unconsumed)

    def set_state(self, state: bytes) -> None:
        """Continue from ``state`` (`get_state` of a feed or an `InputIterator` of the
        same pipeline): stops the workers, drops what they ran ahead to, restores the
        iterator and starts again from its position; batches keep their numbers.

        Raises:
          ResumeError: the feed does not read an `InputIterator`, or it refuses the state.
        """
        iterator = self._resumable("set_state")
        self.close()
        iterator.set_state(state)
        self._start, self._taken = iterator.position, 0
        self._begin()

    def close(self) -> None:
        """Stop the feeder and the workers (batches not yet taken are discarded); later
        calls of ``next()`` end the iteration. A feed that is collected without being
        closed is closed then."""
        self._closed = True
        self._source = None
        if self._feeder is not None or self._lockstep is not None:
            # Feeder.stop (with a lockstep: gives its numbers back), or the serial feed's
            # Lockstep.give_back; once.
            self._stop_feeder()
        if self._unpublished:
            self.publish()

    def __enter__(self) -> SparseCoreFeed:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def sparsecore_feed(
    batches: Iterable[Any],
    plan: SparseCorePlan,
    *,
    workers: int = 2,
    prefetch: int | None = None,
    processes: bool = False,
    fdo: Any = None,
    all_reduce: AllReduce | None = None,
) -> SparseCoreFeed:
    """Feed ``batches`` with their SparseCore preprocessing done ahead, in order.

    Args:
      batches: ``(features, labels)`` batches: a tfinput pipeline's built dataset, its
        `InputIterator` (``pipeline.iterator(config)``: the feed can then save its
        position, `SparseCoreFeed.get_state`), or any iterable of batches of the same
        structure.
      plan: The `SparseCorePlan` (feature specs, device and SparseCore counts).
      workers: Threads preprocessing batches at once; 0 preprocesses each batch on the
        calling thread in ``next()`` (keras-rs's generator pattern: the baseline).
      prefetch: Batches read past those the training loop took, being preprocessed or
        held ready (default: ``2 * workers``); bounds the memory and how far the feed
        runs ahead of training.
      processes: Workers are processes (started with ``spawn``; each imports
        jax-tpu-embedding, a few seconds, and gets the ids and weights of its batches
        pickled) instead of threads. jax-tpu-embedding serialises concurrent calls in one
        process, so threads beyond one do not add throughput; processes do
        (benchmarks/RESULTS.md, "SparseCore preprocessing"). Worth it on a many-core host
        whose steps need more than one process preprocesses. Each worker imports the
        main module again: a script must start the feed under ``if __name__ ==
        "__main__":`` (one that does not is refused, naming its line).
      fdo: A jax-tpu-embedding FDO client (``NPZFileFDOClient(directory)``): the feed
        keeps the statistics of the batches the training loop takes and publishes
        their maxima through it (`SparseCoreFeed.publish`, and at `close`), for limits
        that learn (`SparseCorePlan.with_limits`; docs/sparsecore.md).
      all_reduce: With ``SparseCorePlan(minibatching=True)`` on several hosts, this
        host's `AllReduce` (the same for every feed of the run): the hosts agree on
        each batch's minibatch split through it. Every host must then take the same
        batches and close its feed after the same one, as a training loop in lockstep
        does; closing preprocesses the batches any host may have run ahead to
        (``prefetch``) and waits for the other hosts to do the same. Threads
        only (not ``processes``).

    Returns:
      A `SparseCoreFeed` of ``((dense, preprocessed), labels)``.

    Raises:
      ConfigError: jax-tpu-embedding is missing; a bad worker or prefetch count;
        ``processes`` started from a script's top-level code outside its main guard; an
        `InputIterator` that keeps fewer than ``prefetch + 1`` batches; ``fdo`` is not
        an FDO client; minibatching on several hosts without ``all_reduce``, an
        ``all_reduce`` without minibatching or with ``processes``.
    """
    return SparseCoreFeed(
        batches,
        plan,
        workers=workers,
        prefetch=prefetch if prefetch else max(1, 2 * workers),
        processes=processes,
        fdo=fdo,
        all_reduce=all_reduce,
    )


def _check_minibatching(plan: SparseCorePlan, all_reduce: Any, processes: bool) -> None:
    """A feed's minibatching settings, checked before any batch is read."""
    if all_reduce is not None and not isinstance(all_reduce, AllReduce):
        raise ConfigError(
            "sparsecore_feed: all_reduce must be a tfinput.sparsecore.AllReduce "
            "(AllReduce.start(peers, port), or AllReduce(interface) around "
            f"jax-tpu-embedding's), got {type(all_reduce).__name__}"
        )
    if all_reduce is not None and not plan.minibatching:
        raise ConfigError(
            "sparsecore_feed: all_reduce is for minibatching; the plan does not minibatch "
            "(SparseCorePlan(minibatching=True))"
        )
    if all_reduce is not None and processes:
        raise ConfigError(
            "sparsecore_feed: all_reduce needs worker threads (each host one all-reduce "
            "participant); processes=True would make every worker process one"
        )
    if (
        plan.minibatching
        and all_reduce is None
        and plan.local_device_count < plan.global_device_count
    ):
        raise ConfigError(
            f"sparsecore_feed: minibatching on several hosts ({plan.local_device_count} of "
            f"{plan.global_device_count} devices here) needs all_reduce: the hosts must "
            "agree on each batch's split (tfinput.sparsecore.AllReduce.start)"
        )
