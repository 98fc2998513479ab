"""The source contract: what a source provides to `tfinput.Pipeline.build` (`Source`).

`tfinput.Pipeline.build` applies one skeleton to every source::

    shard -> read (interleave) -> [cache] -> [shuffle] -> batch -> decode + transform
          -> [prefetch] -> options

A source supplies the steps that differ (which files, how one is read, how records are
batched and decoded); the pipeline owns the order and the knobs that apply to every
source. A source that batches by itself (pyarrow Parquet, a wrapped dataset of
batches) says so with `Source.batches_itself`; a `PipelineConfig` knob it cannot honour
is named by `Source.unhonoured` and logged by `warn_unhonoured`. The skeleton's steps
that the sources share with the pipeline (shard, file order, interleave, parallelism
arguments, the record shuffle) are here too, after the contract; the shuffle of rows
already in batches is `_row_shuffle`'s.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

from tfinput._src.core.config import AUTOTUNE, PipelineConfig

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

    from tfinput._src.core.schema import Schema

#: Maps one encoded batch to a raw batch (a dict of column tensors; see `tfinput.transforms`).
Decode = Callable[[Any], dict[str, Any]]

#: The `PipelineConfig` knobs of a file read (the interleave's and TFRecord's
#: ``read_batch``): a source's `Source.position_knobs` are among them.
READ_KNOBS = (
    "read_batch",
    "interleave_cycle_length",
    "interleave_block_length",
    "interleave_parallelism",
)

#: How a source's read position can be saved and restored (see `Source.resume`).
Resume = Literal["iterator", "none", "dataset"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadRequest:
    """What one build asks of a source.

    Attributes:
      files: The files this input pipeline reads, already sharded (empty for a source
        without files).
      schema: The schema to read.
      config: The build's knobs.
      batch_size: Rows per batch (per replica under a distribution strategy).
      shuffle_files: Shuffle the file order every epoch (`Pipeline.with_file_shuffling`).
      input_context: The ``tf.distribute.InputContext``, or None.
      data_shard: ``(n, i)`` when there are fewer files than input pipelines: this
        pipeline reads every file and `Pipeline.build` keeps every ``n``-th element of
        `read` from ``i`` (`plan_shards`); None otherwise.
    """

    files: list[str]
    schema: Schema
    config: PipelineConfig
    batch_size: int
    shuffle_files: bool = False
    input_context: Any = None
    data_shard: tuple[int, int] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadStages:
    """A source's own roofline stages, ``read`` and ``parse``, single-threaded
    (`tfinput.bench.roofline` adds ``full``, the whole pipeline, and measures them).

    Attributes:
      factories: ``{"read": f, "parse": f}``: zero-argument functions returning an
        endless iterable of batches (single-threaded).
      descriptions: One line per stage saying what it does.
      counters: Per stage, a function giving the examples in one of its batches, where
        the stage's batches are not tfinput batches.
      files: Files read.
      bytes_per_example: Average stored bytes per example, or None when unknown.
    """

    factories: Mapping[str, Callable[[], Iterable[Any]]]
    descriptions: Mapping[str, str]
    counters: Mapping[str, Callable[[Any], int]] = dataclasses.field(default_factory=dict)
    files: int = 0
    bytes_per_example: float | None = None


@runtime_checkable
class Source(Protocol):
    """What `tfinput.Pipeline.build` needs of a format. It calls, in order: `files`,
    `validate`, `unhonoured`, `read`, `shuffle_records` (when shuffling records and the
    source does not batch by itself; by default it asks `shuffle_buffer`) and `batch`.

    Beyond these, a source has the capabilities it implements, each a protocol of its
    own that callers test with ``isinstance``: `FileChecks` (``Pipeline.check`` reads
    its files one by one, and counts records), `RooflineStages` (``tfinput bench
    --roofline`` measures its stages alone) and `RestartsOrder` (compact resume
    positions). A source that subclasses a protocol inherits its defaults.

    Attributes:
      kind: Short name (``tfrecord``, ``parquet``, ``dataset``, ``columnar``).
      batches_itself: Whether `read` already yields batches (pyarrow Parquet; a wrapped
        dataset of batches): the pipeline then applies neither its record shuffle nor
        its batch step; the source shuffles rows across its batches itself
        (`shuffle_row_windows`, Parquet's windows), and `batch` supplies the decode
        function.
      resume: Whether and how a build's read position can be checkpointed (for
        resuming exactly after preemption, `tfinput.resume`):
        ``"iterator"``: the dataset is native ops, so tf.data's iterator checkpointing
        (``tf.train.Checkpoint(iterator=it)``) saves and restores it (TFRecord,
        columnar, Parquet: its pyarrow reader computes batch k of an epoch from the
        position tf.data saves); ``"none"``: the read position cannot be saved (a
        reader that keeps its position in Python, such as a generator; no tfinput source
        declares it); ``"dataset"``: as checkpointable as the dataset a user wrapped.
    """

    kind: ClassVar[str]
    batches_itself: ClassVar[bool] = False
    resume: ClassVar[Resume] = "iterator"

    def files(self) -> list[str]:
        """The files to read, in order (empty for a source without files)."""
        ...

    def validate(self, files: list[str], schema: Schema) -> None:
        """Cheap checks at build time, before any record is read.

        Raises:
          SourceError, SchemaError, DataError: naming the file and the feature.
        """
        ...

    def read(self, request: ReadRequest) -> tf.data.Dataset:
        """The records of ``request.files`` (interleaved), or batches when
        `batches_itself`."""
        ...

    def batch(self, records: tf.data.Dataset, request: ReadRequest) -> tuple[Any, Decode]:
        """Records (cached and shuffled by the pipeline) -> encoded batches, and the
        function that decodes one encoded batch to raw columns."""
        ...

    def shuffle_buffer(self, records: tf.data.Dataset, request: ReadRequest) -> int:
        """Elements the record shuffle holds for ``config.shuffle_buffer`` (records by
        default; a source may cap it or count in its own units)."""
        del records
        return request.config.shuffle_buffer

    def shuffle_records(self, records: tf.data.Dataset, request: ReadRequest) -> tf.data.Dataset:
        """The record shuffle for ``config.shuffle_buffer``: tf.data's ``shuffle`` of
        `shuffle_buffer` elements seeded by ``config.shuffle_seed`` by default (a source
        whose elements group records may shuffle the records themselves)."""
        return record_shuffle(self, records, self.shuffle_buffer(records, request), request)

    def symbolic_checkpoint(self, request: ReadRequest) -> bool:
        """Whether builds of this request save their iterator with tf.data's symbolic
        checkpointing (``tf.data.Options.experimental_symbolic_checkpoint``: positions
        only, no buffered elements), which every stage of the source's read must support.
        False by default (explicit checkpoints, which hold the buffers)."""
        del request
        return False

    def unhonoured(self, request: ReadRequest) -> dict[str, str]:
        """The knobs set in the request that this source cannot honour, each with why."""
        del request
        return {}

    @property
    def shuffles_itself(self) -> bool:
        """Whether the source shuffles by itself, so that ``PipelineConfig.shuffle_seed``
        changes the batches without a shuffle buffer or file shuffling (a saved input
        state then records the seed). False by default."""
        return False

    @property
    def ignored_knobs(self) -> tuple[str, ...]:
        """`PipelineConfig` knobs that never change what this source does (the tuner
        does not search them). ``read_batch`` by default (TFRecord's)."""
        return ("read_batch",)

    @property
    def position_knobs(self) -> tuple[str, ...]:
        """The read knobs (`READ_KNOBS`) whose values a saved read position of this
        source holds to: a state saved under other values is refused at restore
        (`tfinput.resume.pipeline_identity`). By default those the source does not
        ignore (`ignored_knobs`)."""
        return tuple(k for k in READ_KNOBS if k not in self.ignored_knobs)

    @property
    def position_fields(self) -> dict[str, Any]:
        """This source's own settings that change what a saved read position means (a
        state saved under others is refused at restore), by name; none by default."""
        return {}

    def batch_count(self, request: ReadRequest) -> int | None:
        """Batches one pass of ``request``'s build yields, where the source knows it
        without reading the data (None: unknown). `Pipeline.build` tells tf.data
        (``assert_cardinality``), so Keras's ``fit`` knows its steps per epoch, and a
        pass that yields another count is an error."""
        del request
        return None


@runtime_checkable
class FileChecks(Protocol):
    """A source's capability beyond `Source`: files that `Pipeline.check` reads one by
    one (naming the file and the record of each problem), whose records it can count.
    The file sources (TFRecord, Parquet, columnar) have it; a wrapped dataset has not
    (`Pipeline.check` reads it whole). The defaults suit a dataclass source with a
    ``paths`` field; a source overrides what it knows better.
    """

    kind: ClassVar[str]
    #: The files, directories or glob patterns the source was given.
    paths: Any

    def explain_error(self, path: str, message: str) -> str:
        """A reading error's message, made more precise where the source can."""
        del path
        return message

    def check_files(self) -> tuple[list[str], list[str]]:
        """``(files, empty files)`` `Pipeline.check` reads one by one (empty files are
        skipped, never an error)."""
        from tfinput._src.core._input_files import drop_empty_files
        from tfinput._src.core.files import resolve_paths

        return drop_empty_files(resolve_paths(self.paths, what=self.kind), "skip")

    def only_files(self, paths: Sequence[str]) -> Source:
        """This source reading ``paths`` only, in that order (empty files skipped)."""
        return dataclasses.replace(self, paths=tuple(paths), empty_files="skip")  # type: ignore[type-var]

    def file_counts(self, files: list[str], schema: Schema) -> list[int | None]:
        """Records in each of ``files``, for `Pipeline.check` to read them together:
        None for a file it reads alone instead, one that cannot be counted or that
        fails the checks a build over it alone makes (its problems are then named as
        a build over it names them). By default each file's ``validate`` and
        `count_records`."""
        counts: list[int | None] = []
        for path in files:
            try:
                self.validate([path], schema)  # type: ignore[attr-defined]
                counts.append(self.count_records(path))
            except Exception:  # read alone, which names the problem
                counts.append(None)
        return counts

    def problems_across_files(self, files: list[str], schema: Schema) -> dict[str, str]:
        """Problems no file has alone, by file (message without the path)."""
        del files, schema
        return {}

    def count_records(self, path: str) -> int | None:
        """Records in one file, or None when the source cannot count them."""
        del path
        return None

    def count_readable(self, path: str) -> int | None:
        """Records of a file that `count_records` cannot count to its end (damaged or
        cut) that read whole before the damage; None when the source cannot tell."""
        del path
        return None

    def count_records_up_to(self, files: list[str], limit: int) -> int | None:
        """Records in ``files``, counted up to ``limit`` (a larger count may stop at any
        value >= ``limit``); None when the source cannot count them. By default the
        files' `count_records`, until ``limit`` is reached."""
        total = 0
        for path in files:
            rows = self.count_records(path)
            if rows is None:
                return None
            total += rows
            if total >= limit:
                break
        return total


@runtime_checkable
class RooflineStages(Protocol):
    """A source's capability beyond `Source`: stages `tfinput.bench.roofline` measures
    alone (``read``, ``parse``), and for the serial stage (`tfinput.Pipeline.serial_probe`)
    the consumer side fed from memory. The file sources have it.
    """

    def read_in_memory(self, request: ReadRequest) -> tf.data.Dataset | None:
        """`read`'s plan for ``request`` over a few records held in memory, endlessly:
        the same interleave and elements (records or mini-batches), without the files.
        `tfinput.bench.roofline` times the consumer side of the pipeline with it (the
        serial stage: `tfinput.Pipeline.serial_probe`). None (the default) where the
        elements reaching the consumer side are already batches."""
        del request
        return None

    def consumer_elements(self, request: ReadRequest) -> float:
        """Elements crossing the consumer side (interleave output, shuffle, batch) per
        output batch: 1 for a source whose `read` yields batches (the default)."""
        del request
        return 1.0

    def roofline_stages(self, files: list[str], schema: Schema, batch_size: int) -> ReadStages:
        """The ``read`` and ``parse`` stages `tfinput.bench.roofline` measures."""
        ...


@runtime_checkable
class RestartsOrder(Protocol):
    """A capability a source may have beyond `Source`: restarting a build's order at a
    batch, so that a saved input position is three integers (seed, epoch, batch) instead
    of tf.data's iterator state (`tfinput.Pipeline.iterator` saves such compact states).
    The columnar source has it (its global shuffle)."""

    def recomputes_order(self, request: ReadRequest) -> bool:
        """Whether this build's order is a function of (seed, epoch, batch)."""
        ...

    def resume_at(self, *, iteration: int, batch: int) -> Source:
        """This source, its builds starting at batch ``batch`` of iteration
        ``iteration``."""
        ...


# ------------------------------------------- skeleton steps shared with the pipeline
log = logging.getLogger("tfinput")


def parallel_calls(value: int) -> int | None:
    """``num_parallel_calls`` for a parallelism knob: AUTOTUNE stays, 1 means the
    sequential op (None), which is cheaper than a parallel op with one thread."""
    return None if value == 1 else value


def deterministic_arg(config: PipelineConfig) -> bool | None:
    """The ``deterministic`` argument of a parallel op (None: the options decide)."""
    return None if config.deterministic is AUTOTUNE else bool(config.deterministic)


def file_order(files: tf.data.Dataset, count: int, request: ReadRequest) -> tf.data.Dataset:
    """A dataset of per-file elements, reshuffled every epoch when the request shuffles
    files (seeded by ``shuffle_seed``) and there are several."""
    if request.shuffle_files and count > 1:
        config = request.config
        return files.shuffle(count, seed=config.shuffle_seed, reshuffle_each_iteration=True)
    return files


def traced(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` for a tf.data function, traced as written instead of converted by
    autograph. tfinput's dataset functions hold no Python control flow on tensor values
    (a tensor used as a bool fails the build loudly), so the graph is the same either
    way; the conversion only costs CPU at every build, seconds on the first one in a
    process (a CLI command, a tf.data service worker)."""
    import tensorflow as tf

    return tf.autograph.experimental.do_not_convert(fn)


def read_parallelism(config: PipelineConfig) -> int:
    """The interleave's parallelism: ``interleave_parallelism`` capped at the cycle
    length (AUTOTUNE stays); 1 means the files are read by the sequential op."""
    cycle = config.interleave_cycle_length
    parallel = config.interleave_parallelism
    if cycle != AUTOTUNE and parallel != AUTOTUNE:
        parallel = min(parallel, cycle)
    return parallel


def interleave_files(
    files: tf.data.Dataset, read: Callable[[Any], tf.data.Dataset], config: PipelineConfig
) -> tf.data.Dataset:
    """``files.interleave(read)`` with the config's interleave knobs (`read_parallelism`;
    1 means the sequential op). Named ``read`` in traces."""
    cycle = config.interleave_cycle_length
    parallel = read_parallelism(config)
    block = None if config.interleave_block_length == AUTOTUNE else config.interleave_block_length
    return files.interleave(
        traced(read),
        cycle_length=cycle,
        block_length=block,
        num_parallel_calls=parallel_calls(parallel),
        deterministic=deterministic_arg(config) if parallel_calls(parallel) else None,
        name="read",
    )


def unchanged_at_end(
    records: tf.data.Dataset, files: Sequence[str], sizes: Sequence[int], *, what: str
) -> tf.data.Dataset:
    """``records`` (a read of ``files``), then, once they have all ended, each file's size
    compared with the ``sizes`` it had when the pipeline was built (below 1: not
    checked, a remote file): a file that differs fails the read with ``tfinput
    DataError: PATH: the file changed while it was read: ...`` (`clean_error` and
    `Pipeline.iterate` make it a `DataError` naming the file).

    A native reader takes a file cut at a record boundary (TFRecord: or inside a record
    header) for a clean end: a file cut, or appended to, while an epoch reads it would
    end its records early without a word. The sizes are probed natively (tf.data service
    runs the check) once per pass over the files, after the last record, nothing per
    record or per file's branch: a ``FixedLengthRecordDataset`` of 1-byte records, the
    last ``size - 1`` bytes taken for a footer, holds one record exactly when the file
    has ``size`` bytes (none when fewer, two or more when more): one open and a read of
    at most 2 bytes per file. The probes run in one parallel interleave and their
    records are counted per file at once (a map per file, each running a dataset of its
    own, cost 7 ms a file: 70 s at 10,000 files). A file rewritten in place to its
    former size is not seen; a file changed after its records were read, while others
    still are, fails the pass too.
    """
    import tensorflow as tf

    checked = [(f, int(n)) for f, n in zip(files, sizes) if n > 0]
    if not checked:
        return records
    n = len(checked)
    paths = tf.constant([f for f, _ in checked])
    expected = tf.constant([size for _, size in checked], tf.int64)

    def probe(i: tf.Tensor) -> tf.data.Dataset:  # file i's index, once per 1-byte record found
        path, size = tf.gather(paths, i), tf.gather(expected, i)
        found = tf.data.FixedLengthRecordDataset(path, 1, footer_bytes=size - 1, buffer_size=2)
        return found.take(2).map(lambda _: i)

    def check(_: tf.Tensor) -> tf.Tensor:
        hits = tf.data.Dataset.range(n).interleave(
            probe,
            cycle_length=min(n, 16),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=False,
            name="file_unchanged",
        )
        found = hits.batch(4096).reduce(
            tf.zeros([n], tf.int64),
            lambda count, i: count + tf.math.bincount(i, minlength=n, maxlength=n, dtype=tf.int64),
        )
        wrong = tf.cast(tf.argmax(tf.cast(tf.not_equal(found, 1), tf.int32)), tf.int32)
        path, size = tf.gather(paths, wrong), tf.gather(expected, wrong)
        message = tf.strings.join(
            ["tfinput DataError: ", path, ": the file changed while it was read: ",
             tf.strings.as_string(size), " bytes when the pipeline was built, ",
             tf.where(tf.gather(found, wrong) < 1, "fewer", "more"), f" when its {what} "
             "ended (cut, rewritten or appended to during the epoch: its rows are not the "
             "file's); write files under another name and rename them into place, "
             "then build the pipeline again"]
        )  # fmt: skip
        # The raw op: tf.debugging.Assert guards string data with a cond.
        ok = tf.raw_ops.Assert(
            condition=tf.reduce_all(tf.equal(found, 1)), data=[message], summarize=1
        )
        with tf.control_dependencies([ok]):
            return tf.identity(path)

    def nothing(_: tf.Tensor) -> Any:  # never called: an element of the records' kind
        return tf.nest.map_structure(
            lambda spec: tf.zeros([d or 0 for d in spec.shape], spec.dtype),
            records.element_spec,
        )

    checks = tf.data.Dataset.from_tensors(0).map(traced(check), name="files_unchanged")
    return records.concatenate(checks.filter(lambda _: False).map(traced(nothing)))


def shard_files(files: list[str], input_context: Any, what: str) -> list[str]:
    """This input pipeline's files: every ``n``-th from its id (whole files).

    Raises:
      SourceError: fewer files than input pipelines (`plan_shards` falls back instead).
    """
    from tfinput._src.core.errors import SourceError

    if not files or input_context is None or input_context.num_input_pipelines == 1:
        return files
    n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
    if len(files) < n:
        raise SourceError(
            f"{n} input pipelines but only {len(files)} {what} file(s): each pipeline "
            "reads whole files, so write at least as many files as input pipelines"
        )
    return files[i::n]


def plan_shards(
    files: list[str], input_context: Any, what: str
) -> tuple[list[str], tuple[int, int] | None]:
    """How this input pipeline gets its share: ``(files, None)`` when there are at
    least as many files as input pipelines (file sharding, `shard_files`: disjoint
    whole files that cover every file), else ``(every file, (n, i))``: data sharding,
    where every pipeline reads every file in the same order and keeps every ``n``-th
    element from its id ``i`` (`Dataset.shard`). Data sharding is exact but reads
    all the data on every host, so it is logged as a warning once per process."""
    if not files or input_context is None or input_context.num_input_pipelines == 1:
        return files, None
    n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
    if len(files) >= n:
        return files[i::n], None
    key = ("data-sharding", what, str(len(files)), str(n))
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning(
            "tfinput: %d input pipelines but only %d %s file(s): falling back to data "
            "sharding (every pipeline reads all %d file(s) in one fixed order and keeps "
            "every %d-th element; reads %dx the data; a file shuffle without shuffle_seed "
            "uses seed 0 on every host). Write at least %d files to shard whole files "
            "instead",
            n, len(files), what, len(files), n, n, n,
        )  # fmt: skip
    return files, (n, i)


def single_core_options() -> tf.data.Options:
    """Options of a roofline stage: one private thread, no intra-op parallelism, no
    autotuning."""
    import tensorflow as tf

    opts = tf.data.Options()
    opts.threading.private_threadpool_size = 1
    opts.threading.max_intra_op_parallelism = 1
    opts.autotune.enabled = False
    return opts


#: Knobs whose AUTOTUNE or 1 means "one stream, in order", which every source does.
_SEQUENTIAL_DEFAULTS = (AUTOTUNE, 1)
_WARNED: set[tuple[str, ...]] = set()


def knob_is_set(config: PipelineConfig, name: str) -> bool:
    """Whether ``config`` asks for something with knob ``name``: an interleave knob
    other than AUTOTUNE or 1, a non-zero ``shuffle_buffer``, ``cache`` on."""
    value = getattr(config, name)
    if name.startswith("interleave_"):
        return value not in _SEQUENTIAL_DEFAULTS
    return bool(value)


def warn_unhonoured(source: Source, request: ReadRequest) -> None:
    """Log each knob the source cannot honour, naming it, its value and why (once per
    source kind, knob and value: the tuner builds the same pipeline many times)."""
    for knob, why in source.unhonoured(request).items():
        value = getattr(request.config, knob, None)
        shown = f"{knob}={value!r}" if value is not None else knob
        key = (source.kind, knob, repr(value), why)
        if key in _WARNED:
            continue
        _WARNED.add(key)
        log.warning("tfinput: %s has no effect on the %s source: %s", shown, source.kind, why)


def warn_once(key: tuple[str, ...], message: str, *args: Any) -> None:
    """Log ``message % args`` as a warning once per process and ``key`` (the tuner
    builds the same pipeline many times)."""
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning(message, *args)


# ------------------------------------------------------------- shuffles of rows
def record_shuffle(
    source: Source, records: tf.data.Dataset, buffer: int, request: ReadRequest
) -> tf.data.Dataset:
    """tf.data's ``shuffle`` of ``buffer`` records seeded by ``shuffle_seed``. A
    ``shuffle_buffer`` of 1 holds one record, which tf.data's shuffle hands on as it
    comes: said once per source kind, with the setting that mixes."""
    if request.config.shuffle_buffer == 1 and buffer == 1:
        warn_once(
            (source.kind, "shuffle_buffer", "1", "one record"),
            "tfinput: shuffle_buffer=1 has no effect on the %s source: tf.data's shuffle of "
            "a one-record buffer hands each record on as it comes; set shuffle_buffer to 2 "
            "or more (rows then cross batch boundaries, and move farther the larger the "
            "buffer)",
            source.kind,
        )
    return records.shuffle(buffer, seed=request.config.shuffle_seed)
