"""What the inputs are and reading them in blocks.

The inputs: files, format and compression; a CSV file's layout (delimiter, header,
column names) is `tfinput._src.core.formats.csv`'s (`Layout`, `sniff_layout`, re-exported). The
blocks: CSV/TSV text (streamed by pyarrow, each row tagged with its line number), Parquet
row batches and tf.Example TFRecord records, each block converted by
`tfinput._src.applications.convert.columns`."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from tfinput._src.applications.convert.columns import (
    Column,
    convert_batch,
    convert_typed,
    is_list_type,
)
from tfinput._src.core.errors import ConfigError, DataError, SchemaError, SourceError
from tfinput._src.core.formats import csv as _csv
from tfinput._src.core.formats import parquet, tfrecord
from tfinput._src.core.formats.csv import Layout, sniff_layout
from tfinput._src.core.schema import Schema

if TYPE_CHECKING:
    import pyarrow as pa
    import tensorflow as tf

#: Rows read at a time from Parquet and TFRecord inputs.
TYPED_BLOCK_ROWS = 65_536

#: ``(path, converted table or None, bad rows as (line or row, reason), blank lines)``
#: per block read.
Blocks = Generator[tuple[str, "pa.Table | None", list[tuple[int, str]], int], None, None]


# --------------------------------------------------------------------- CSV
class CsvReader(_csv.CsvReader):
    """`tfinput._src.core.formats.csv.CsvReader` whose text batches convert to the planned
    columns (`converted`)."""

    def converted(
        self, plan: Mapping[str, Column]
    ) -> Iterator[tuple[pa.Table | None, list[tuple[int, str]], int]]:
        """``(converted table, bad rows as (line, reason), blank lines)`` per block, then
        ``(None, remaining structural bad rows, 0)``."""
        for batch, lines in self.batches():
            last = int(lines[-1]) if len(lines) else self.next_line - 1
            events = []
            while self.invalid and self.invalid[0][0] <= last:
                events.append(self.invalid.pop(0))
            table, bad, n_blank = convert_batch(batch, plan)
            events += [(int(lines[row]), reason) for row, reason in bad.items()]
            yield table, events, n_blank
        yield None, list(self.invalid), 0


def csv_batches(
    paths: list[str],
    *,
    first: Layout,
    layout_args: Mapping[str, object],
    plan: Mapping[str, Column],
    block_size: int,
    on_read: Callable[[int], None],
) -> Blocks:
    """Read and convert CSV/TSV files block by block.

    Args:
      paths: The input files.
      first: The layout of ``paths[0]``; every other file must have its columns.
      layout_args: `sniff_layout` arguments for the other files.
      plan: The planned columns.
      block_size: Bytes of CSV parsed at a time.
      on_read: Called with the number of (compressed) bytes read.

    Returns:
      ``(path, converted table, bad rows as (line, reason), blank lines)`` per block,
      then ``(path, None, remaining structural bad rows, 0)`` per file.

    Raises:
      SchemaError: a file's columns differ from the first file's.
      DataError: a file cannot be read.
    """
    for i, path in enumerate(paths):
        layout = first if i == 0 else sniff_layout(path, **layout_args)
        if layout.names != first.names:
            raise SchemaError(
                f"{path}: columns {layout.names} differ from those of {paths[0]}: {first.names}"
            )
        reader = CsvReader(path, layout, on_read, block_size=block_size)
        try:
            for table, events, n_blank in reader.converted(plan):
                yield path, table, events, n_blank
        finally:
            reader.close()


# ---------------------------------------------------- Parquet and TFRecord
def typed_names(path: str, *, kind: str, schema: Schema) -> tuple[list[str], str]:
    """Column names of a Parquet file, or keys of a TFRecord file's first record (whose
    types are checked against the schema); and where they come from.

    Raises:
      DataError: an unreadable Parquet file.
      SourceError: a TFRecord file without records.
      SchemaError: the first record's kinds do not fit the schema.
    """
    if kind == "parquet":
        return list(parquet.read_schema(path).names), "in the Parquet schema"
    from tfinput._src.core.sources._tfrecord_checks import check_first_example

    compression = tfrecord.compression_from_name(path)
    check_first_example(path, compression, schema)
    first = next(iter(tfrecord.records(path, compression).take(1)), None)
    if first is None:
        raise SourceError(f"convert: input {path!r} holds no records")
    keys = list(tfrecord.parse_example(first.numpy(), path=path, index=0).features.feature)
    # A key absent from the first record may only be missing there: accept schema keys.
    extra = [c for c in schema.columns() if c not in keys]
    return keys + extra, "keys of the first tf.Example"


def typed_batches(
    paths: list[str],
    *,
    kind: str,
    plan: Mapping[str, Column],
    on_read: Callable[[int], None],
) -> Blocks:
    """Read and convert Parquet or TFRecord files block by block.

    Args:
      paths: The input files.
      kind: ``parquet`` or ``tfrecord``.
      plan: The planned columns.
      on_read: Called with the (estimated) number of bytes read.

    Returns:
      ``(path, converted table, bad rows as (row, reason), 0)`` per block of rows.

    Raises:
      SchemaError: a Parquet file lacks a planned column or has another shape.
      DataError: a file cannot be read.
    """
    read = _parquet_blocks if kind == "parquet" else _tfrecord_blocks
    for path in paths:
        row = 1
        for raw in read(path, plan, on_read):
            table, bad = convert_typed(raw, plan, path)
            yield path, table, [(row + r, reason) for r, reason in bad.items()], 0
            row += raw.num_rows


def _parquet_blocks(
    path: str, plan: Mapping[str, Column], on_read: Callable[[int], None]
) -> Iterator[pa.RecordBatch]:
    """Record batches of a Parquet file's planned columns, shapes checked first."""
    pf = parquet.open_file(path)
    arrow_schema = pf.schema_arrow
    for name, col in plan.items():
        if name not in arrow_schema.names:
            raise SchemaError(
                f"{path}: the schema needs column {name!r}, which this file does not have; "
                f"columns: {arrow_schema.names[:40]}"
            )
        t = arrow_schema.field(name).type
        if is_list_type(t) != col.is_list:
            want = "a list column" if col.is_list else "a scalar column"
            raise SchemaError(
                f"{path}: column {name!r} (feature {col.feature!r}) has type {t}; the schema "
                f"expects {want}"
            )
    size, rows = os.path.getsize(path), max(1, pf.metadata.num_rows)
    for batch in pf.iter_batches(batch_size=TYPED_BLOCK_ROWS, columns=list(plan)):
        on_read(int(size * batch.num_rows / rows))
        yield batch


def _tfrecord_blocks(
    path: str, plan: Mapping[str, Column], on_read: Callable[[int], None]
) -> Iterator[pa.Table]:
    """Blocks of tf.Example records as Arrow tables: every key parsed as a ragged
    feature, so a missing key is a null (scalar) or an empty list, never a default."""
    import pyarrow as pa
    import tensorflow as tf

    dtypes = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}
    spec = {
        name: tf.io.RaggedFeature(dtypes[col.kind], row_splits_dtype=tf.int64)
        for name, col in plan.items()
    }

    def parse(serialized: tf.Tensor) -> tuple[dict[str, tf.RaggedTensor], tf.Tensor]:
        size = tf.reduce_sum(tf.strings.length(serialized)) + 16 * tf.size(serialized, tf.int32)
        return tf.io.parse_example(serialized, spec), size

    ds = tfrecord.records(path, tfrecord.compression_from_name(path))
    ds = ds.batch(TYPED_BLOCK_ROWS).map(parse).prefetch(1)
    row = 1
    it = iter(ds)
    while True:
        try:
            parsed, size = next(it)
        except StopIteration:
            return
        except tf.errors.OpError as e:
            from tfinput._src.core.errors import clean_error

            raise DataError(
                f"{path}: rows {row}-{row + TYPED_BLOCK_ROWS - 1}: {clean_error(e)}"
            ) from e
        on_read(int(size))
        table = pa.table({name: _arrow_column(parsed[name], col) for name, col in plan.items()})
        row += table.num_rows
        yield table


def _arrow_column(ragged: tf.RaggedTensor, col: Column) -> pa.Array:
    """One parsed ragged key as an Arrow column."""
    import pyarrow as pa

    splits = ragged.row_splits.numpy()
    values = ragged.values.numpy()
    arrow_values = pa.array(values, type=pa.binary() if col.kind == "string" else None)
    lengths = np.diff(splits)
    if col.is_list:
        # A vector with no values is a missing value: null, filled by its default.
        mask = pa.array(lengths == 0) if col.fixed_len is not None else None
        return pa.ListArray.from_arrays(pa.array(splits.astype(np.int32)), arrow_values, mask=mask)
    # Scalars: no value is null (missing); several values stay a list so that
    # `convert_typed` reports the row.
    if (lengths > 1).any():
        return pa.ListArray.from_arrays(pa.array(splits.astype(np.int32)), arrow_values)
    return _scalars(arrow_values, splits, lengths)


def _scalars(values: pa.Array, splits: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Scalar values of a ragged key; a row with no value is null."""
    import pyarrow as pa

    present = lengths == 1
    if present.all():
        return values
    take = np.where(present, splits[:-1], 0)
    if len(values) == 0:
        return pa.nulls(len(lengths), type=values.type)
    return pa.array(
        values.take(pa.array(take)).to_numpy(zero_copy_only=False),
        type=values.type,
        mask=~present,
    )


INPUT_FORMATS = ("auto", "csv", "parquet", "tfrecord")


# ------------------------------------------------------------------ inputs
def resolve_inputs(inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The input files: each path as given, each glob pattern expanded (sorted), each
    directory's files (sorted; hidden files, ``_``-prefixed ones and ``.json`` sidecars
    such as ``schema.json`` left out).

    Raises:
      SourceError: no input, a pattern or directory that matches nothing, a missing
        file, a FIFO, socket or device (`check_regular_file`), or a part of an
        unfinished output (`refuse_unfinished`).
    """
    from tfinput._src.core.files import check_regular_file, data_files, refuse_unfinished

    items = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    if not items:
        raise SourceError("convert: no input files given")
    out: list[str] = []
    for item in items:
        p = os.fspath(item)
        if any(ch in p for ch in "*?["):
            matches = sorted(glob.glob(p))
            if not matches:
                raise SourceError(f"convert: input pattern {p!r} matches no files")
            out += matches
        elif os.path.isfile(p):
            out.append(p)
        elif os.path.isdir(p):
            matches = data_files(p)
            if not matches:
                raise SourceError(f"convert: input directory {p!r} holds no data files")
            out += matches
        elif os.path.exists(p):  # a FIFO, a socket or a device: refused below
            out.append(p)
        else:
            raise SourceError(f"convert: input file {p!r} does not exist")
    for path in out:
        check_regular_file(path, what="convert: input")
    refuse_unfinished(out)
    return out


def detect_input_format(paths: list[str], requested: str) -> str:
    """The input format: ``requested``, or for ``auto`` the one the file names say.

    Args:
      paths: The input files.
      requested: One of `INPUT_FORMATS`.

    Returns:
      ``csv``, ``parquet`` or ``tfrecord``.

    Raises:
      ConfigError: an unknown format, or inputs whose names say different formats.
    """
    if requested not in INPUT_FORMATS:
        raise ConfigError(
            f"convert: input_format must be one of {list(INPUT_FORMATS)}, got {requested!r}"
        )
    if requested != "auto":
        return requested

    def kind(p: str) -> str:
        if parquet.is_parquet_name(p):
            return "parquet"
        return "tfrecord" if tfrecord.is_tfrecord_name(p) else "csv"

    kinds = {p: kind(p) for p in paths}
    found = sorted(set(kinds.values()))
    if len(found) > 1:
        example = {k: next(p for p, v in kinds.items() if v == k) for k in found}
        raise ConfigError(
            f"convert: inputs mix formats {found} (for example {example}); convert each "
            "format separately, or pass input_format / --input-format"
        )
    return found[0]


# -------------------------------------------------------------- CSV layout
