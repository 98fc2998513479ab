"""`ParquetSource`: Parquet files read column by column (pyarrow or tensorflow-io)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf

from tfinput._src.core._input_files import drop_empty_files
from tfinput._src.core._python_calls import EXITING, python_call
from tfinput._src.core.config import PipelineConfig
from tfinput._src.core.errors import (
    DataError,
    SchemaError,
    SourceError,
    TfinputError,
    did_you_mean,
    first_line,
)
from tfinput._src.core.files import resolve_paths
from tfinput._src.core.formats import parquet
from tfinput._src.core.schema import Categorical, Dense, Schema
from tfinput._src.core.sources._arrow import (
    LIST_LENGTHS,
    LIST_VALUES,
    ParquetBatches,
    expected_arrow,
    footer_rows,
    parquet_columns,
    reads_as,
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
    knob_is_set,
    traced,
)

ENGINES = ("pyarrow", "tensorflow-io")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParquetSource(Source, FileChecks, RooflineStages):
    """Parquet files read column by column with pyarrow record batches.

    List columns (``list<int64>``, ``list<string>``) arrive as values plus lengths and
    become ragged tensors with no per-row Python. Row groups are read by background
    threads ahead of the consumer (pyarrow releases the GIL while it decodes); exact
    batches are cut from the stream of rows, so no rows are lost at file boundaries.

    With the pyarrow engine the source batches by itself (``batches_itself``): the
    interleave knobs set the reader's readahead and threads (``interleave_cycle_length``:
    batches prepared ahead, twice the value, 8 for AUTOTUNE; ``interleave_parallelism``:
    background threads, 4 for AUTOTUNE; pyarrow decodes each row group's columns on its
    own threads too, whatever the value),
    ``shuffle_buffer`` shuffles rows inside the reader, in windows of that many rows
    rounded up to whole batches and at least two batches (so that rows cross batch
    boundaries whatever the buffer; the last window of an epoch also takes the rows
    after the last whole window), and ``interleave_block_length`` has no equivalent (a
    warning says so).

    The read position is native: a ``tf.data`` range over the epoch's batch indices
    (with the epoch's shuffle seed, drawn natively each iteration from ``shuffle_seed``),
    and batch ``k`` is computed from (files, seed, ``k``) alone by a stateless
    ``tf.numpy_function``. So ``tf.train.Checkpoint(iterator=it)`` saves and restores it
    exactly (``resume = "iterator"``), with row and file shuffling, the interleave knobs
    and per-replica sharding; a position restored into a build over other files or with
    another batch size or shuffle window is refused at the next read. Restoring reads
    the batch it resumes at directly (one window of rows), then reads ahead again.
    Known limit: the *next* epoch's seed (under ``repeat``) comes from the seed
    generator of ``Dataset.random``, whose state tf.data saves only while the epoch's
    positions are still being read; a save made within tf.data's read-ahead of the end
    of an epoch restores that epoch exactly, but the following epochs get other orders
    than the uninterrupted run (each still reads every row once). The
    Python callback still keeps the dataset from tf.data service (`tfinput.graph`).
    ``resume`` describes the pyarrow engine; with tensorflow-io the pipeline is as
    checkpointable as tensorflow-io's own dataset.

    Attributes:
      paths: Files, globs or directories.
      engine: ``pyarrow`` (default) or ``tensorflow-io`` (flat columns only, and only
        where its native ops load for the installed TensorFlow). tensorflow-io reads
        through the pipeline's own interleave, cache, shuffle and batch steps.
      empty_files: ``skip`` (default; logged, and listed by ``check``) or ``error``
        for files without data: zero bytes, or zero rows in the footer.
    """

    paths: tuple[str, ...]
    engine: str = "pyarrow"
    empty_files: str = "skip"

    kind: ClassVar[str] = "parquet"
    resume: ClassVar[Resume] = "iterator"

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise SourceError(
                f"Parquet engine {self.engine!r} unknown; expected 'pyarrow' or 'tensorflow-io'"
            )

    @property
    def batches_itself(self) -> bool:  # type: ignore[override]
        """True for pyarrow (the reader cuts exact batches), False for tensorflow-io."""
        return self.engine == "pyarrow"

    @property
    def ignored_knobs(self) -> tuple[str, ...]:  # type: ignore[override]
        """``read_batch`` (TFRecord's), and ``interleave_block_length`` with pyarrow
        (it reads each file in order)."""
        return ("read_batch",) + (("interleave_block_length",) if self.engine == "pyarrow" else ())

    @property
    def position_knobs(self) -> tuple[str, ...]:  # type: ignore[override]
        """None with pyarrow (batch ``k`` is computed from the files, the seed and ``k``:
        the readahead and threads may change across a restore); tensorflow-io reads
        through the interleave, whose knobs a position holds to."""
        return () if self.engine == "pyarrow" else super().position_knobs

    @property
    def position_fields(self) -> dict[str, Any]:  # type: ignore[override]
        """The engine: the two read the files through different stages."""
        return {"engine": self.engine}

    def files(self) -> list[str]:
        return self._files(self.empty_files)[0]

    def check_files(self) -> tuple[list[str], list[str]]:
        """``(files, empty files)``: 0-row files count as empty (skipped, listed)."""
        return self._files("skip")

    def _files(self, empty_files: str) -> tuple[list[str], list[str]]:
        files = resolve_paths(self.paths, what="Parquet")
        return drop_empty_files(files, empty_files, rows=footer_rows)

    def count_records(self, path: str) -> int | None:
        """Rows in one file, from its footer (`Pipeline.check` reports it)."""
        try:
            return parquet.num_rows(path)
        except DataError:  # unreadable: the check reports why
            return None

    def validate(self, files: list[str], schema: Schema) -> None:
        """Check every file's Parquet schema against the tfinput schema (footers only;
        a footer already read is not read again until the file changes). A column
        whose type differs between files is a `SchemaError` naming both files."""
        wanted = [(f.name, f.source, expected_arrow(f)) for f in schema.features]
        wanted += [
            (f.name, f.weights, ("list<float>", "list<int>")) for f in schema.multi_hot if f.weights
        ]
        wanted += [(lab.name, lab.source, expected_arrow(lab)) for lab in schema.labels]
        first: dict[str, tuple[str, str, str]] = {}  # column -> (path, type, type key)
        for path in files:
            columns = parquet_columns(path)
            for name, column, expected in wanted:
                seen = _check_column(path, name, column, expected, columns)
                seen = first.setdefault(column, seen)
                _check_same_type(path, name, column, columns[column], seen)

    def problems_across_files(self, files: list[str], schema: Schema) -> dict[str, str]:
        """Column types that differ between files, on the file that differs."""
        try:
            self.validate(files, schema)
        except TfinputError as e:
            message = str(e)
            for path in files:
                if message.startswith(path + ": "):
                    return {path: message[len(path) + 2 :]}
        return {}

    def unhonoured(self, request: ReadRequest) -> dict[str, str]:
        if self.engine == "pyarrow" and knob_is_set(request.config, "interleave_block_length"):
            return {
                "interleave_block_length": "pyarrow reads each file's record batches in order "
                "(the interleave knobs set its readahead and threads)"
            }
        return {}

    def read(self, request: ReadRequest) -> tf.data.Dataset:
        """pyarrow: exact, shuffled batches at checkpointable positions
        (`_pyarrow_read`); tensorflow-io: rows of the files, interleaved."""
        if self.engine == "tensorflow-io":
            return _tfio_read(request)
        return _pyarrow_read(request)

    def batch(self, records: tf.data.Dataset, request: ReadRequest) -> tuple[Any, Decode]:
        """pyarrow batches as they come (list columns decode to ragged tensors);
        tensorflow-io rows batched."""
        if self.engine == "tensorflow-io":
            config = request.config
            ds = records.batch(request.batch_size, drop_remainder=config.drop_remainder)
            return ds, _tfio_decode
        return records, _list_decoder(request.schema)

    def roofline_stages(self, files: list[str], schema: Schema, batch_size: int) -> ReadStages:
        """``read``: pyarrow's reads of the schema's columns, row group by row group;
        ``parse``: tfinput's reader (`ParquetBatches`: the same reads plus the
        conversion to numpy), one thread each."""
        single = PipelineConfig.naive(
            batch_size=batch_size, private_threadpool_size=1, max_intra_op_parallelism=1
        )
        label = schema.labels[0].source if schema.labels else None

        def count_numpy(batch: Mapping[str, Any]) -> int:
            if label is not None:
                return len(batch[label])
            key = next(k for k in batch if "/" not in k or k.endswith(LIST_LENGTHS))
            return len(batch[key])

        rows = sum(parquet.num_rows(p) for p in files)
        size = sum(os.path.getsize(p) for p in files)
        return ReadStages(
            factories={
                "read": lambda: _scan_forever(files, schema.columns()),
                "parse": lambda: _batches_forever(files, schema, single, batch_size),
            },
            descriptions={
                "read": "pyarrow reads of the schema's columns, row group by row group, one thread",
                "parse": "read + conversion to numpy (tfinput's Parquet reader, one background thread)",
            },
            counters={"read": lambda batch: int(batch.num_rows), "parse": count_numpy},
            files=len(files),
            bytes_per_example=size / rows if rows else None,
        )


def _check_column(
    path: str, name: str, column: str, expected: tuple[str, ...], columns: dict[str, tuple]
) -> tuple[str, str, str]:
    """``(path, arrow type, type key)`` of a column the schema reads.

    Raises:
      SchemaError: the column is missing or of another kind.
    """
    if column not in columns:
        names = list(columns)
        raise SchemaError(
            f"{path}: feature {name!r}: column {column!r} is missing; columns: "
            f"{names[:40]}" + did_you_mean(column, names)
        )
    found, arrow_type, key = columns[column]
    if found not in expected:
        raise SchemaError(
            f"{path}: feature {name!r}: column {column!r} has type {found} "
            f"({arrow_type}); the schema expects {' or '.join(expected)}"
        )
    return path, arrow_type, key


def _check_same_type(
    path: str, name: str, column: str, found: tuple, seen: tuple[str, str, str]
) -> None:
    """pyarrow reads every file with the first file's column types; a later file whose
    values may not fit fails with a bare ArrowInvalid: say so at build instead."""
    _, arrow_type, key = found
    if not reads_as(key, seen[2]):
        raise SchemaError(
            f"{path}: feature {name!r}: column {column!r} has type {arrow_type} "
            f"but {seen[0]} has {seen[1]}, and every file is read with the first "
            "file's types; store the column with one type in every file (or a "
            "narrower one in later files), or read the files as separate pipelines"
        )


def _list_decoder(schema: Schema) -> Decode:
    """Decode a pyarrow batch: each list column's values and lengths -> ragged."""
    lists = [(f.source, f.weights) for f in schema.multi_hot]

    def decode(enc: dict[str, tf.Tensor]) -> dict[str, Any]:
        raw = {k: v for k, v in enc.items() if "/" not in k}
        for source, weights in lists:
            for col in (source, weights):
                if col:
                    raw[col] = tf.RaggedTensor.from_row_lengths(
                        enc[col + LIST_VALUES], enc[col + LIST_LENGTHS], validate=False
                    )
        return raw

    return decode


def _scan_forever(files: list[str], columns: list[str]) -> Iterator[Any]:
    """The reads tfinput's reader does (row groups, the schema's columns), without
    conversion, in file order, one thread, endlessly."""
    while True:
        for path in files:
            yield from parquet.row_groups(path, columns=columns)


def _batches_forever(
    files: list[str], schema: Schema, config: PipelineConfig, batch_size: int
) -> Iterable[Any]:
    """tfinput's Parquet reader in file order, endlessly."""
    while True:
        batches = ParquetBatches(
            files=files, schema=schema, config=config, batch_size=batch_size, shuffle_files=False
        )
        yield from batches(0)


def _positions(draws: tf.data.Dataset, fingerprint: int, batches: int) -> tf.data.Dataset:
    """``(seed, fingerprint, k)`` for each batch ``k`` of an epoch of ``batches``."""
    # Batch index k zipped with a native draw; the scan keeps the epoch's first draw,
    # this build's fingerprint and batch count as its state. The draw stays alive for
    # the whole epoch (so tf.data saves the generator of the next epochs' draws at any
    # point, even after reading ahead to the epoch's end) and the scan state is saved
    # with the position: a position restored into a build over other files, another
    # batch size or shuffle window keeps the saved fingerprint and count, and is
    # refused at the next read instead of ending the epoch early or yielding other rows.
    initial = (
        tf.constant(False),
        tf.constant(0, tf.int64),
        tf.constant(fingerprint, tf.int64),
        tf.constant(batches, tf.int64),
    )

    def first_draw(state: Any, element: Any) -> Any:
        have, seed, saved, count = state
        k, draw = element
        seed = tf.where(have, seed, draw)
        return (tf.constant(True), seed, saved, count), (seed, saved, count, k)

    return (
        tf.data.Dataset.zip((tf.data.Dataset.range(2**62), draws))
        .scan(initial, traced(first_draw))
        .take_while(traced(lambda seed, saved, count, k: k < count))
        .map(traced(lambda seed, saved, count, k: (seed, saved, k)))
    )


def _signature(schema: Schema) -> dict[str, tf.TensorSpec]:
    sig: dict[str, tf.TensorSpec] = {}
    for f in schema.features:
        if isinstance(f, Dense):
            shape = [None] if f.length is None else [None, f.length]
            sig[f.source] = tf.TensorSpec(shape, tf.float32)
        elif isinstance(f, Categorical):
            sig[f.source] = tf.TensorSpec([None], tf.int64 if f.dtype == "int64" else tf.string)
        else:
            dtype = tf.int64 if f.dtype == "int64" else tf.string
            sig[f.source + LIST_VALUES] = tf.TensorSpec([None], dtype)
            sig[f.source + LIST_LENGTHS] = tf.TensorSpec([None], tf.int64)
            if f.weights:
                sig[f.weights + LIST_VALUES] = tf.TensorSpec([None], tf.float32)
                sig[f.weights + LIST_LENGTHS] = tf.TensorSpec([None], tf.int64)
    for lab in schema.labels:
        sig[lab.source] = tf.TensorSpec([None], tf.float32)
    return sig


def _pyarrow_read(request: ReadRequest) -> tf.data.Dataset:
    """Batches of `ParquetBatches` at native positions: ``(seed, fingerprint, k)`` for
    ``k`` in ``range(batches per epoch)``, mapped through ``tf.numpy_function`` (a
    stateless Python op, which tf.data's iterator checkpointing accepts).

    The epoch's seed is drawn natively per iteration (``Dataset.random`` with
    ``rerandomize_each_iteration``, seeded by ``shuffle_seed``), so every ``iter()``
    (and every pass of a ``repeat``) gets a new order while a restored iterator goes on
    with the one it saved. The seed, the build's fingerprint and the epoch's batch count
    are a ``scan``'s state, which tf.data saves with the position: a position restored
    into a build over other files, another batch size or shuffle window is refused at
    the next read (`SourceError`) instead of yielding other rows.
    """
    reader = ParquetBatches(
        files=request.files,
        schema=request.schema,
        config=request.config,
        batch_size=request.batch_size,
        shuffle_files=request.shuffle_files,
    )
    signature = _signature(request.schema)
    keys, dtypes = list(signature), [spec.dtype for spec in signature.values()]
    fingerprint = reader.fingerprint()
    batches = reader.num_batches
    positions = _positions(
        _seeds(reader.shuffles, request.config.shuffle_seed), fingerprint, batches
    )

    def numpy_batch(seed: Any, saved: Any, k: Any) -> list[Any]:
        if int(saved) != fingerprint:
            raise SourceError(
                f"Parquet: the restored iterator position was saved by a build over other "
                f"files, another batch size or shuffle window ({len(request.files)} files, "
                f"batch size {request.batch_size} here): restore it into a pipeline built "
                "from the same files with the same config"
            )
        batch = reader.batch(int(seed) & (2**63 - 1), int(k))
        return [batch[key] for key in keys]

    # An error of the reader (a null without default, a file changed since the build)
    # is handed over as a message and raised by an assert: an exception raised inside
    # the callback is logged by TensorFlow with its traceback, once per parallel call.
    empty = [_empty_array(signature[key]) for key in keys]

    def numpy_batch_or_error(seed: Any, saved: Any, k: Any) -> list[Any]:
        try:
            return [*numpy_batch(seed, saved, k), np.bytes_(b"")]
        except TfinputError as e:
            return [*empty, np.bytes_(f"{type(e).__name__}: {e}".encode())]

    # At the interpreter's exit every call returns at once, reading nothing: an
    # iterator still alive then must not keep the exit waiting for its reads.
    def refused(seed: Any, saved: Any, k: Any) -> list[Any]:
        return [*empty, np.bytes_(f"DataError: {EXITING}".encode())]

    call = python_call(numpy_batch_or_error, refused=refused)

    def read(seed: tf.Tensor, saved: tf.Tensor, k: tf.Tensor) -> dict[str, tf.Tensor]:
        *arrays, error = tf.numpy_function(
            call,
            [seed, saved, k],
            [*dtypes, tf.string],
            stateful=False,
            name="parquet_batch",
        )
        error = tf.reshape(error, [])
        with tf.control_dependencies([tf.debugging.Assert(tf.equal(error, ""), [error])]):
            arrays = [tf.identity(a) for a in arrays]
        out = {}
        for key, array in zip(keys, arrays):
            array.set_shape(signature[key].shape)
            out[key] = array
        return out

    # Named for profiler traces: the reader's time shows up as this map. The epoch's
    # batch count is known from the footers: said to tf.data, Keras's fit knows its
    # steps (no "ran out of data" warning) and a different count is an error.
    batches_read = positions.map(traced(read), name="parquet_read")
    return batches_read.apply(tf.data.experimental.assert_cardinality(batches))


def _seeds(shuffles: bool, shuffle_seed: int | None) -> tf.data.Dataset:
    """Each pass's seed: drawn natively per iteration when the reader shuffles
    (seeded by ``shuffle_seed``), else 0."""
    if shuffles:
        return tf.data.Dataset.random(seed=shuffle_seed, rerandomize_each_iteration=True)
    return tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).repeat()


def _empty_array(spec: tf.TensorSpec) -> np.ndarray:
    """A 0-row array of ``spec``'s dtype and inner shape (the batch of a failed read)."""
    shape = [0, *spec.shape[1:]]
    return np.zeros(shape, object if spec.dtype == tf.string else spec.dtype.as_numpy_dtype)


def _tfio_read(request: ReadRequest) -> tf.data.Dataset:
    """tensorflow-io's Parquet reader: flat columns only (tensorflow/io#1562).

    Raises:
      SourceError: tensorflow-io does not load for the installed TensorFlow.
      SchemaError: the schema reads list or vector columns.
    """
    try:
        import tensorflow_io as tfio

        tfio.IODataset.from_parquet  # noqa: B018 - attribute access loads the native ops
    except Exception as e:  # ImportError, or NotFoundError for undefined symbols
        raise SourceError(
            f"the tensorflow-io Parquet engine cannot be used with the installed TensorFlow "
            f"{tf.__version__} ({first_line(e)}); tensorflow-io 0.37.1 loads only on "
            "TensorFlow 2.16/2.17. Use engine='pyarrow' (the default), which reads every "
            "column type including lists"
        ) from e
    schema = request.schema
    if schema.multi_hot or any(f.length for f in schema.dense):
        raise SchemaError(
            "the tensorflow-io Parquet engine reads only one element of list columns "
            "(tensorflow/io#1562); use engine='pyarrow' for list or vector features"
        )
    columns = schema.columns()

    def read(path: tf.Tensor) -> tf.data.Dataset:
        return tfio.IODataset.from_parquet(path, columns=columns)

    files = request.files
    paths = file_order(tf.data.Dataset.from_tensor_slices(files), len(files), request)
    return interleave_files(paths, read, request.config)


def _tfio_decode(enc: Any) -> dict[str, Any]:
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in dict(enc).items()}
