"""Reading inputs in blocks: CSV/TSV text (streamed by pyarrow, each row tagged with its
line number), Parquet row batches and tf.Example TFRecord records, each block converted
by `tfinput.convert.values`."""

from __future__ import annotations

import dataclasses
import io
import os
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from tfinput.convert._guards import QuoteGuard
from tfinput.convert.plan import Column
from tfinput.convert.sniff import Layout, sniff_layout, tfrecord_compression
from tfinput.convert.values import convert_batch, convert_typed, is_list_type
from tfinput.errors import DataError, SchemaError, SourceError
from tfinput.schema import Schema

__all__ = [
    "BLOCK_SIZE",
    "TYPED_BLOCK_ROWS",
    "Blocks",
    "CsvReader",
    "csv_batches",
    "typed_batches",
    "typed_names",
]

#: Bytes of CSV parsed at a time (a record must fit in one block).
BLOCK_SIZE = 4 << 20
#: Rows read at a time from Parquet and TFRecord inputs.
TYPED_BLOCK_ROWS = 65_536

#: ``(path, converted table or None, bad rows as (line or row, reason), blank lines)``
#: per block read.
Blocks = Generator[tuple[str, Any, list[tuple[int, str]], int], None, None]


# --------------------------------------------------------------------- CSV
class CsvReader:
    """Streams one CSV file as text batches, each row tagged with its line number.

    Args:
      path: The file (``.gz``/``.bz2`` decompressed on the fly).
      layout: Its `Layout`.
      on_read: Called with the number of (compressed) bytes read, or None.
      block_size: Bytes of CSV parsed at a time (a record must fit in one block).
      byte_range: Read only bytes ``[start, end)`` of an uncompressed file, both at line
        breaks (the Ray engine's pieces): line 1 is the range's first line (the caller
        adds the lines before it), the header is skipped in the first range only, and
        ``raw.newlines`` counts the line breaks read.

    Attributes:
      invalid: Structural bad rows not yet reported, ``(line, reason)`` in line order.
      next_line: The line number of the next row read.
      reader: The pyarrow streaming CSV reader.

    Raises:
      DataError: the file cannot be read or parsed.
    """

    def __init__(
        self,
        path: str,
        layout: Layout,
        on_read: Callable[[int], None] | None,
        *,
        block_size: int = BLOCK_SIZE,
        byte_range: tuple[int, int] | None = None,
    ):
        import pyarrow as pa
        import pyarrow.csv as pacsv

        if byte_range is not None and byte_range[0] > 0:
            layout = dataclasses.replace(layout, header=False)
        self.path = path
        self.layout = layout
        self.invalid: list[tuple[int, str]] = []  # (line, reason), in line order
        self.next_line = 2 if layout.header else 1
        n = len(layout.names)

        def on_invalid(row: Any) -> str:
            text = (row.text or "")[:80]
            number = int(row.number) if row.number is not None else -1
            reason = self.guard.bad.get(number) or (
                f"expected {n} fields ({layout.names_from}), found {row.actual_columns}: {text!r}"
            )
            self.invalid.append((number, reason))
            return "skip"

        self.raw = _stream(path, on_read) if byte_range is None else _Range(path, *byte_range)
        self.guard = QuoteGuard(self.raw, delimiter=layout.delimiter, fields=n)
        self.stream = pa.PythonFile(self.guard, mode="r")
        try:  # the reader reads the first block now
            self.reader = self._open_csv(pa, pacsv, block_size, on_invalid)
        except (OSError, pa.ArrowException) as e:
            self.close()
            raise self._read_error(e) from e
        except BaseException:
            self.close()
            raise

    def _read_error(self, e: Exception) -> DataError:
        """A read failure (a truncated .gz, corrupt bytes) as a `DataError` naming the file."""
        if isinstance(e, OSError) or "compress" in str(e).lower():
            return DataError(f"{self.path}: cannot read ({e}); is the file truncated or corrupt?")
        return DataError(f"{self.path}: cannot parse as CSV: {e}")

    def _open_csv(self, pa: Any, pacsv: Any, block_size: int, on_invalid: Any) -> Any:
        layout = self.layout
        return pacsv.open_csv(
            self.stream,
            read_options=pacsv.ReadOptions(
                use_threads=False,
                block_size=block_size,
                column_names=layout.names,
                skip_rows=1 if layout.header else 0,
            ),
            parse_options=pacsv.ParseOptions(
                delimiter=layout.delimiter,
                newlines_in_values=False,
                ignore_empty_lines=False,
                invalid_row_handler=on_invalid,
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in layout.names},
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
                null_values=[""],
            ),
        )

    def batches(self) -> Iterable[tuple[Any, np.ndarray]]:
        """``(batch, line numbers)``; structural bad rows go to ``self.invalid``."""
        import pyarrow as pa

        while True:
            try:
                batch = self.reader.read_next_batch()
            except StopIteration:
                break
            except (OSError, pa.ArrowException) as e:
                raise self._read_error(e) from e
            n = batch.num_rows
            skip = {line for line, _ in self.invalid if line >= self.next_line}
            lines = np.empty(n, dtype=np.int64)
            line, i = self.next_line, 0
            if not skip:
                lines[:] = np.arange(line, line + n)
                line += n
            else:
                while i < n:
                    if line not in skip:
                        lines[i] = line
                        i += 1
                    line += 1
            self.next_line = line
            yield batch, lines

    def converted(self, plan: Mapping[str, Column]) -> Iterator[tuple[Any, list, int]]:
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

    def close(self) -> None:
        """Close the file."""
        self.stream.close()
        self.raw.close()


class _Range:
    """Bytes ``[start, end)`` of a file, as a readable binary stream; counts the line
    breaks read (``newlines``)."""

    def __init__(self, path: str, start: int, end: int):
        self.f = open(path, "rb")  # noqa: SIM115 - closed by close()
        self.f.seek(start)
        self.left = end - start
        self.newlines = 0
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.f.read(n)
        self.left -= len(data)
        self.newlines += data.count(b"\n")
        return data

    def close(self) -> None:
        self.closed = True
        self.f.close()


def csv_batches(
    paths: list[str],
    *,
    first: Layout,
    layout_args: dict[str, Any],
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


class _Counting(io.RawIOBase):
    """A binary file that counts the bytes read (for progress)."""

    def __init__(self, path: str, on_read: Callable[[int], None] | None):
        self._f = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._on_read = on_read

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self._f.readinto(b)
        if n and self._on_read is not None:
            self._on_read(n)
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


def _stream(path: str, on_read: Callable[[int], None] | None) -> Any:
    """A file as a pyarrow stream, ``.gz``/``.bz2`` decompressed, counting bytes read."""
    import pyarrow as pa

    raw = _Counting(path, on_read)
    lower = path.lower()
    if lower.endswith((".gz", ".gzip")):
        return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "gzip")
    if lower.endswith(".bz2"):
        return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "bz2")
    return pa.PythonFile(raw, mode="r")


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
        import pyarrow.parquet as pq

        try:
            names = list(pq.read_schema(path).names)
        except Exception as e:  # pyarrow raises ArrowInvalid/OSError variants
            raise DataError(f"{path}: not a readable Parquet file ({e})") from e
        return names, "in the Parquet schema"
    import tensorflow as tf

    from tfinput.sources import check_first_example

    compression = tfrecord_compression(path)
    check_first_example(path, compression, schema)
    first = next(iter(tf.data.TFRecordDataset(path, compression).take(1)), None)
    if first is None:
        raise SourceError(f"convert: input {path!r} holds no records")
    keys = list(tf.train.Example.FromString(first.numpy()).features.feature)
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
) -> Iterator[Any]:
    """Record batches of a Parquet file's planned columns, shapes checked first."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid/OSError variants
        raise DataError(f"{path}: not a readable Parquet file ({e})") from e
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
) -> Iterator[Any]:
    """Blocks of tf.Example records as Arrow tables: every key parsed as a ragged
    feature, so a missing key is a null (scalar) or an empty list, never a default."""
    import pyarrow as pa
    import tensorflow as tf

    dtypes = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}
    spec = {
        name: tf.io.RaggedFeature(dtypes[col.kind], row_splits_dtype=tf.int64)
        for name, col in plan.items()
    }

    def parse(serialized: tf.Tensor) -> Any:
        size = tf.reduce_sum(tf.strings.length(serialized)) + 16 * tf.size(serialized, tf.int32)
        return tf.io.parse_example(serialized, spec), size

    ds = tf.data.TFRecordDataset(path, tfrecord_compression(path))
    ds = ds.batch(TYPED_BLOCK_ROWS).map(parse).prefetch(1)
    row = 1
    it = iter(ds)
    while True:
        try:
            parsed, size = next(it)
        except StopIteration:
            return
        except tf.errors.OpError as e:
            from tfinput.errors import clean_error

            raise DataError(
                f"{path}: rows {row}-{row + TYPED_BLOCK_ROWS - 1}: {clean_error(e)}"
            ) from e
        on_read(int(size))
        table = pa.table({name: _arrow_column(parsed[name], col) for name, col in plan.items()})
        row += table.num_rows
        yield table


def _arrow_column(ragged: Any, col: Column) -> Any:
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


def _scalars(values: Any, splits: np.ndarray, lengths: np.ndarray) -> Any:
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
