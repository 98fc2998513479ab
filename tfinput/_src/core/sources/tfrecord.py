"""`TFRecordSource`: TFRecord files of serialized ``tf.train.Example``, and the record
shuffle of TFRecord input read in mini-batches (``read_batch``).

tf.data's ``shuffle`` takes and gives one element at a time. With ``read_batch`` the
elements are mini-batches of consecutive records of one file, and shuffling them leaves
each run of consecutive records whole in the batches; shuffling single records pays
tf.data's per-element cost for every record. `grouped_shuffle` shuffles the records
in small groups instead: each window of records is permuted (one vectorized gather, in
parallel), cut into groups of a few records, and tf.data's shuffle mixes the groups
through a buffer holding as many records as the shuffle buffer and one window. A group
holds records drawn at random from a window of many files, so no run of consecutive
records stays whole, and a batch draws on many groups. tf.data saves the shuffle's
buffer with the iterator, and the permutations are stateless, keyed by a
``Dataset.random`` stream, so a restored iterator continues exactly.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf

from tfinput._src.core._input_files import check_empty_files_policy, drop_empty_files
from tfinput._src.core.config import PipelineConfig
from tfinput._src.core.errors import SourceError, TfinputError
from tfinput._src.core.files import resolve_paths
from tfinput._src.core.formats import tfrecord
from tfinput._src.core.schema import Schema
from tfinput._src.core.sources._tfrecord_checks import (
    SAMPLE_RECORDS,
    capped_shuffle_buffer,
    check_examples,
    check_first_examples_once,
    check_tail_once,
)
from tfinput._src.core.sources.protocol import (
    Decode,
    FileChecks,
    ReadRequest,
    ReadStages,
    Resume,
    RooflineStages,
    Source,
    file_order,
    interleave_files,
    record_shuffle,
    single_core_options,
    unchanged_at_end,
)
from tfinput._src.core.transforms import parse_spec


def read_batch(config: PipelineConfig) -> int:
    """The mini-batch size the file branches batch to (0: single records): ``read_batch``,
    smaller for a small shuffle buffer (`mini_batch`)."""
    return mini_batch(config)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TFRecordSource(Source, FileChecks, RooflineStages):
    """TFRecord files of serialized ``tf.train.Example``.

    Records are read natively (``TFRecordDataset``, interleaved over files), batched,
    then parsed by one vectorized ``tf.io.parse_example`` per batch. Every
    `PipelineConfig` knob applies; a build's read position can be checkpointed with
    tf.data's iterator checkpointing (``resume = "iterator"``).

    Attributes:
      paths: Files, globs or directories.
      compression: ``None``/``"none"``, ``"GZIP"``, ``"ZLIB"``, or ``"auto"`` (by file
        extension: ``.gz`` is GZIP, ``.zz``/``.zlib`` is ZLIB, anything else none).
      empty_files: ``skip`` (default; logged) or ``error``. Sharded writers such as
        Spark often leave empty part files.
      buffer_size: Read buffer per open file, bytes (None: TensorFlow's default).
      allow_absent: tf.Example keys that may be absent from every one of the first
        `SAMPLE_RECORDS` records (very sparse features) without a `SchemaError` at
        build; they take their defaults.
    """

    paths: tuple[str, ...]
    compression: str | None = "auto"
    empty_files: str = "skip"
    buffer_size: int | None = None
    allow_absent: tuple[str, ...] = ()

    kind: ClassVar[str] = "tfrecord"
    resume: ClassVar[Resume] = "iterator"

    def __post_init__(self) -> None:
        tfrecord.check_compression(self.compression)
        check_empty_files_policy(self.empty_files)

    def compression_of(self, path: str) -> str:
        """The TensorFlow compression type of ``path`` (``""`` for none)."""
        return tfrecord.compression_of(self.compression, path)

    def files(self) -> list[str]:
        files = resolve_paths(self.paths, what="TFRecord")
        return drop_empty_files(files, self.empty_files)[0]

    def validate(self, files: list[str], schema: Schema) -> None:
        """Cheap checks at build time, before any record is parsed.

        - Every uncompressed local file must end with a whole record. TensorFlow treats a
          file cut inside a record's 12-byte header as a clean end of file and silently
          drops the rest; tfinput reads each file's last bytes (16 KiB, up to 1 MiB when
          the last record is larger), finds the last record header by its length CRC
          and raises `DataError` naming the file and the offset where the cut header
          starts. A cut inside a record's data is TensorFlow's own ``DataLossError``
          while reading, which `Pipeline.iterate` / `check` turn into a `DataError`.
        - The first records of the first file (up to `SAMPLE_RECORDS`) are compared with
          the schema: a key of the wrong kind, a required key missing from the first
          record, or a key absent from every sampled record (usually a typo) is a
          `SchemaError`. List ``allow_absent`` keys that may legitimately be absent
          from that many records.
        """
        for path in files:
            if "://" not in path and not self.compression_of(path):
                check_tail_once(path)
        check_first_examples_once(
            files[0], self.compression_of(files[0]), schema, allow_absent=self.allow_absent
        )

    def count_records(self, path: str) -> int | None:
        """Records in one file, counted natively (`Pipeline.check` reports it); None
        when the file cannot be read to its end."""
        try:
            return tfrecord.count_records(path, self.compression_of(path))
        except tf.errors.OpError:
            return None

    def file_counts(self, files: list[str], schema: Schema) -> list[int | None]:
        """Records in each of ``files``, counted natively in one pass over them all
        (per compression), which also reads each file's first `SAMPLE_RECORDS`
        records for the checks a build over the file alone makes (`validate`: its
        tail, its first records against the schema); None for a file that fails them
        or cannot be read to its end, and for remote files (read alone)."""
        counts: list[int | None] = [None] * len(files)
        by_compression: dict[str, list[int]] = {}
        for i, path in enumerate(files):
            if "://" in path:
                continue
            compression = self.compression_of(path)
            try:
                if not compression:
                    check_tail_once(path)
            except (OSError, TfinputError):
                continue
            by_compression.setdefault(compression, []).append(i)
        for compression, indices in by_compression.items():
            paths = [files[i] for i in indices]
            each = tfrecord.count_each(paths, compression, sample=SAMPLE_RECORDS)
            for i, path, counted in zip(indices, paths, each):
                if counted is None:
                    continue
                rows, first = counted
                try:
                    check_examples(path, first, schema, allow_absent=self.allow_absent)
                except TfinputError:
                    continue
                counts[i] = rows
        return counts

    def count_readable(self, path: str) -> int | None:
        """Records of a damaged or cut file before the damage (`Pipeline.check`
        reports them); None for a file that cannot be opened."""
        try:
            return tfrecord.count_readable(path, self.compression_of(path))
        except (OSError, tf.errors.OpError):
            return None

    @property
    def ignored_knobs(self) -> tuple[str, ...]:  # type: ignore[override]
        """None: every knob applies."""
        return ()

    def count_records_up_to(self, files: list[str], limit: int) -> int | None:
        """Records in ``files`` up to ``limit``, reading at most ``limit`` records
        (None: the files cannot be read that far)."""
        try:
            return tfrecord.count_records(files, self._compression(files), limit=limit)
        except (tf.errors.OpError, SourceError):
            return None

    def _compression(self, files: list[str]) -> str:
        compressions = {self.compression_of(f) for f in files}
        if len(compressions) > 1:
            raise SourceError(
                f"TFRecord files mix compressions {sorted(compressions)}; give them as "
                "separate pipelines or set compression explicitly"
            )
        return compressions.pop()

    def read(self, request: ReadRequest) -> tf.data.Dataset:
        """Serialized records of the files, interleaved (mini-batches of them with
        ``read_batch``); once they have ended, each local file's size is compared with
        its size at build (`unchanged_at_end`): a file cut or appended to while it is
        read fails the read, naming it, instead of ending its records early.

        Raises:
          SourceError: the files mix compressions.
        """
        files = request.files
        compression = self._compression(files)
        buffer_size = self.buffer_size
        records = self._branches(
            request,
            lambda path: tfrecord.records(path, compression, buffer_size=buffer_size),
        )
        sizes = [_local_size(f) for f in files]
        return unchanged_at_end(records, files, sizes, what="records")

    def _branches(
        self,
        request: ReadRequest,
        records_of: Callable[[tf.Tensor], tf.data.Dataset],
        *,
        batched: bool = False,
    ) -> tf.data.Dataset:
        """The parallel interleave over the files' branches, ``records_of(path)`` each
        (already in mini-batches when ``batched``)."""
        mini = read_batch(request.config)

        def read(path: tf.Tensor) -> tf.data.Dataset:
            records = records_of(path)
            # With read_batch, each branch hands over mini-batches (partial at the end
            # of its file), so no single record crosses to the consumer side.
            return records.batch(mini) if mini and not batched else records

        files = request.files
        paths = file_order(tf.data.Dataset.from_tensor_slices(files), len(files), request)
        return interleave_files(paths, read, request.config)

    def read_in_memory(self, request: ReadRequest) -> tf.data.Dataset:
        """`read`'s interleave with every file's branch repeating the first file's first
        records (up to 1,024, held in memory): the consumer side sees the same elements
        as from the files, records or mini-batches of ``read_batch`` of them, and the
        branches cost almost nothing (a mini-batch is built once, not per element)."""
        files = request.files
        sample = tfrecord.records(files[0], self._compression(files)).take(1024)
        records = list(sample.as_numpy_iterator())
        mini = read_batch(request.config)
        if not mini:
            held = tf.constant(records, tf.string)
            return self._branches(
                request, lambda path: tf.data.Dataset.from_tensor_slices(held).repeat()
            )
        block = tf.constant((records * (mini // len(records) + 1))[:mini], tf.string)
        return self._branches(
            request, lambda path: tf.data.Dataset.from_tensors(block).repeat(), batched=True
        )

    def consumer_elements(self, request: ReadRequest) -> float:
        """``batch_size`` records per batch, or ``batch_size / read_batch`` mini-batches."""
        mini = read_batch(request.config)
        return request.batch_size / mini if mini else float(request.batch_size)

    def shuffle_buffer(self, records: tf.data.Dataset, request: ReadRequest) -> int:
        """``shuffle_buffer`` capped at the most records the files can hold (logged)."""
        del records
        compressed = bool(self.compression_of(request.files[0]))
        return capped_shuffle_buffer(request.config.shuffle_buffer, request.files, compressed)

    def shuffle_records(self, records: tf.data.Dataset, request: ReadRequest) -> tf.data.Dataset:
        """Single records: tf.data's shuffle of `shuffle_buffer` records. Mini-batches
        (``read_batch``): their records shuffled in groups by `grouped_shuffle`:
        windows of ``max(shuffle_buffer // 2, 256)`` records (rounded up to whole
        groups) permuted and cut into groups of `group_size` records, and tf.data's
        shuffle of the groups through a buffer of `shuffle_buffer` records and one
        window, so that a batch mixes as with single records (and up to one window
        more is held)."""
        config = request.config
        hold = self.shuffle_buffer(records, request)
        if not read_batch(config):
            return record_shuffle(self, records, hold, request)
        group = group_size(request.batch_size, hold)
        window = -(-window_size(hold) // group) * group  # whole groups
        log_difference_once(
            shuffle_buffer=hold,
            read_batch=config.read_batch,
            mini=read_batch(config),
            window=window,
            group=group,
        )
        return grouped_shuffle(
            records, hold=hold, window=window, group=group, seed=config.shuffle_seed
        )

    def batch(self, records: tf.data.Dataset, request: ReadRequest) -> tuple[Any, Decode]:
        """``batch(B)`` of serialized records; decoding is one ``parse_example``."""
        config = request.config
        if read_batch(config):  # mini-batches re-cut to exact batches
            ds = records.rebatch(request.batch_size, drop_remainder=config.drop_remainder)
        else:
            ds = records.batch(request.batch_size, drop_remainder=config.drop_remainder)
        spec = parse_spec(request.schema)

        def decode(serialized: tf.Tensor) -> dict[str, Any]:
            return tf.io.parse_example(serialized, spec)

        return ds, decode

    def roofline_stages(self, files: list[str], schema: Schema, batch_size: int) -> ReadStages:
        """``read``: ``TFRecordDataset`` over the files in order, batched; ``parse``:
        the same plus ``tf.io.parse_example`` (no tfinput transforms)."""
        compression = self.compression_of(files[0])
        spec = parse_spec(schema)
        opts = single_core_options()

        def read() -> Iterable[Any]:
            ds = tfrecord.records(files, compression)
            return ds.batch(batch_size, drop_remainder=True).repeat().with_options(opts)

        def parse() -> Iterable[Any]:
            ds = tfrecord.records(files, compression).batch(batch_size, drop_remainder=True)
            ds = ds.map(lambda x: tf.io.parse_example(x, spec))
            return ds.repeat().with_options(opts)

        first = next(iter(tfrecord.records(files[0], compression).batch(256)), None)
        per_example = None
        if first is not None:
            per_example = float(np.mean([len(x) for x in first.numpy()]))
        return ReadStages(
            factories={"read": read, "parse": parse},
            descriptions={
                "read": "TFRecordDataset over the files in order, batch(B)",
                "parse": "read + tf.io.parse_example (no tfinput transforms)",
            },
            files=len(files),
            bytes_per_example=per_example,
        )


def _local_size(path: str) -> int:
    """A local file's size now (at build), or -1 for a remote one (not checked)."""
    return -1 if "://" in path else os.path.getsize(path)


# ---------------------------------------------------- the mini-batch record shuffle
log = logging.getLogger("tfinput")
_LOGGED: set[tuple[int, int, int, int]] = set()

#: Fewest records a window brings into the pool (a smaller shuffle buffer would pay the
#: per-window cost every few records).
MIN_WINDOW = 256
#: Fewest mini-batches the pool holds: mini-batches shrink for small shuffle buffers,
#: so that a batch still draws from many runs and files.
POOL_MINI_BATCHES = 32
#: Fewest groups a batch draws on and the buffer holds (a batch of 512 records or
#: fewer, a buffer of 341 or fewer: groups of 2).
BATCH_GROUPS = 256
#: Most records in a group: tf.data's per-element cost is then paid once per 16 records.
MAX_GROUP = 16


def window_size(shuffle_buffer: int) -> int:
    """Records per window for a buffer of ``shuffle_buffer`` records."""
    return max(shuffle_buffer // 2, MIN_WINDOW)


def group_size(batch_size: int, shuffle_buffer: int) -> int:
    """Records per shuffled group for batches of ``batch_size`` and a buffer of
    ``shuffle_buffer`` records: a batch draws on at least `BATCH_GROUPS` groups, and the
    buffer (with its window) holds at least as many; 2 to `MAX_GROUP` records each."""
    pool = shuffle_buffer + window_size(shuffle_buffer)
    return max(2, min(batch_size // BATCH_GROUPS, pool // BATCH_GROUPS, MAX_GROUP))


def mini_batch(config: PipelineConfig) -> int:
    """Records per mini-batch the file branches hand over (0: single records):
    ``read_batch``, and with a shuffle buffer at most ``(shuffle_buffer +
    window_size(shuffle_buffer)) // POOL_MINI_BATCHES``. A function of config knobs
    alone (a saved position must mean the same in a rebuilt pipeline)."""
    if config.read_batch <= 1:
        return 0
    if not config.shuffle_buffer:
        return config.read_batch
    pool = config.shuffle_buffer + window_size(config.shuffle_buffer)
    return min(config.read_batch, max(1, pool // POOL_MINI_BATCHES))


def log_difference_once(
    *, shuffle_buffer: int, read_batch: int, mini: int, window: int, group: int
) -> None:
    """Log, once per process and sizes, how the shuffle differs from ``read_batch=0``'s:
    up to one window more records held, records moved in groups drawn from windows,
    mini-batches of ``mini`` records, and the setting that restores tf.data's own
    record shuffle (docs/bench.md)."""
    key = (shuffle_buffer, read_batch, window, group)
    if key in _LOGGED:
        return
    _LOGGED.add(key)
    log.info(
        "tfinput: shuffle_buffer=%d with read_batch=%d shuffles groups of %d records, each "
        "drawn at random from a window of %d (file branches hand over mini-batches of %d): "
        "it holds up to %d records, not %d; read_batch=0 gives tf.data's record shuffle "
        "of exactly shuffle_buffer records, at the per-record cost (docs/bench.md, "
        "'read_batch')",
        shuffle_buffer, read_batch, group, window, mini, shuffle_buffer + window,
        shuffle_buffer,
    )  # fmt: skip


def grouped_shuffle(
    records: tf.data.Dataset, *, hold: int, window: int, group: int, seed: int | None
) -> tf.data.Dataset:
    """Shuffle the records of ``records`` (batches of records of any size): each window
    of ``window`` records (a whole number of groups) is permuted, in parallel, keyed by
    a ``Dataset.random`` stream, and cut into groups of ``group`` records, and tf.data's
    shuffle mixes the groups through a buffer of ``hold + window`` records. Elements are
    the groups: ``group`` records, or single records for the input's last window when
    it is not a whole number of groups. A new order every iteration (``seed`` fixes the
    sequence of orders).

    The records of a group leave the buffer together, drawn at random from a window of
    many files; the groups leave as tf.data's shuffle lets single elements leave. A
    record is copied once here, by the permutation: the groups are the rows of its
    output, which ``unbatch`` hands on without copying them, and tf.data's shuffle moves
    groups without copying them.
    """
    keys = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
    windows = tf.data.Dataset.zip((records.rebatch(window), keys))

    def permute(batch: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
        size = tf.size(batch)
        order = tf.random.experimental.stateless_shuffle(
            tf.range(size), seed=tf.stack([key, tf.constant(0, tf.int64)])
        )
        width = tf.where(size % group == 0, group, 1)
        return tf.reshape(tf.gather(batch, order), [-1, width])

    groups = windows.map(permute, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    buffer = math.ceil((hold + window) / group)
    return groups.unbatch().shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
