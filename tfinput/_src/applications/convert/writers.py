"""Writing the output: shards of at most ``rows_per_file`` rows as Parquet, tf.Example
TFRecord or columnar records, staged beside the output directory and committed whole."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tfinput._src.applications.convert.columns import Column
from tfinput._src.core.errors import SourceError
from tfinput._src.core.files import StagedDir, remove_stale, unfinished_output
from tfinput._src.core.formats import parquet, tfrecord
from tfinput._src.core.schema import Schema

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import tensorflow as tf

FORMATS = ("parquet", "tfrecord", "columnar")


def prepare_out_dir(out_dir: Path, overwrite: bool) -> StagedDir:
    """Check ``out_dir`` and stage the conversion beside it: the files are written into
    the returned `StagedDir` and put in place whole by its ``commit`` (which, with
    ``overwrite``, also deletes the previous conversion's files).

    Raises:
      SourceError: ``out_dir`` is a file, or is not empty and ``overwrite`` is False.
      ConfigError: ``out_dir`` cannot be written.

    The `StagedDir` raises `OutputError` when the disk fills up inside its block.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise SourceError(f"convert: output {str(out_dir)!r} exists and is not a directory")
    remove_stale(Path(os.path.abspath(out_dir)))
    entries = sorted(out_dir.iterdir()) if out_dir.is_dir() else []
    if entries and not overwrite:
        unfinished = unfinished_output(out_dir)
        raise SourceError(
            (unfinished + "; " if unfinished else "")
            + f"convert: output directory {str(out_dir)!r} is not empty; choose a new "
            "directory or pass overwrite=True (--overwrite) to replace its part-* files "
            "(and schema.json, manifest.json)"
        )
    return StagedDir(out_dir, replaces=is_conversion_file, what="convert: output")


def is_conversion_file(name: str) -> bool:
    """Whether an output directory's entry ``name`` is a conversion's own (replaced by
    ``overwrite``): ``part-*``, ``schema.json``, ``manifest.json``."""
    return name.startswith("part-") or name in ("schema.json", "manifest.json")


def open_shards(
    out_dir: Path,
    *,
    to: str,
    schema: Schema,
    plan: Mapping[str, Column],
    rows_per_file: int,
    chunk_rows: int,
) -> Shards | ColumnarShards:
    """The writer of the ``to`` format (one of `FORMATS`) into ``out_dir``."""
    if to == "columnar":
        return ColumnarShards(out_dir, schema, rows_per_file=rows_per_file, chunk_rows=chunk_rows)
    return Shards(out_dir, to, rows_per_file=rows_per_file, plan=plan)


class Shards:
    """Output files of at most ``rows_per_file`` rows, renamed ``-of-N`` at the end.

    Args:
      out_dir: The output directory.
      fmt: ``parquet`` or ``tfrecord`` (tf.Example records).
      rows_per_file: Rows per output file.
      plan: The planned columns (the output's columns and types).
    """

    def __init__(self, out_dir: Path, fmt: str, *, rows_per_file: int, plan: Mapping[str, Column]):
        self.out_dir, self.fmt, self.rows_per_file, self.plan = out_dir, fmt, rows_per_file, plan
        self.paths: list[str] = []
        self.writer: pq.ParquetWriter | tf.io.TFRecordWriter | None = None
        self.in_file = 0
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        # Rows buffered before writing: one Parquet row group, or one encoding batch.
        self.row_group = min(rows_per_file, 64 * 1024 if fmt == "parquet" else 16 * 1024)

    def write(self, table: pa.Table) -> None:
        """Append the rows of an Arrow table of converted columns."""
        while table.num_rows:
            if self.writer is None or self.in_file >= self.rows_per_file:
                self._roll()
            take = min(table.num_rows, self.rows_per_file - self.in_file)
            self.pending.append(table.slice(0, take))
            self.pending_rows += take
            self.in_file += take
            table = table.slice(take)
            if self.pending_rows >= self.row_group or self.in_file >= self.rows_per_file:
                self._flush()

    def _roll(self) -> None:
        self._flush()
        if self.writer is not None:
            self.writer.close()
        ext = ".parquet" if self.fmt == "parquet" else ".tfrecord"
        path = str(self.out_dir / f"part-{len(self.paths):05d}{ext}")
        self.paths.append(path)
        if self.fmt == "parquet":
            import pyarrow as pa

            arrow_schema = pa.schema([(c.name, c.arrow_type) for c in self.plan.values()])
            self.writer = parquet.writer(path, arrow_schema)
        else:
            self.writer = tfrecord.writer(path)
        self.in_file = 0

    def _flush(self) -> None:
        if not self.pending:
            return
        import pyarrow as pa

        table = pa.concat_tables(self.pending)
        self.pending, self.pending_rows = [], 0
        if self.fmt == "parquet":
            self.writer.write_table(table, row_group_size=table.num_rows)
        else:
            for record in _examples(table, self.plan):
                self.writer.write(record)

    def abort(self) -> None:
        """Close and delete every file written so far (after an error)."""
        self.pending = []
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        for path in self.paths:
            if os.path.exists(path):
                os.unlink(path)
        self.paths = []

    def close(self) -> list[str]:
        """Write what is buffered, close, and name the files ``-of-N``; their paths."""
        self._flush()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        n = len(self.paths)
        final = []
        for path in self.paths:
            stem, ext = path.rsplit(".", 1)
            new = f"{stem}-of-{n:05d}.{ext}"
            os.replace(path, new)
            final.append(new)
        return final


class ColumnarShards:
    """`Shards` for the columnar format: a `tfinput.columnar_records.ColumnarWriter`.

    Args:
      out_dir: The output directory.
      schema: The output schema.
      rows_per_file: Rows per output file (rounded up to whole chunks).
      chunk_rows: Rows per record.
    """

    def __init__(self, out_dir: Path, schema: Schema, *, rows_per_file: int, chunk_rows: int):
        from tfinput._src.core.columnar.writer import ColumnarWriter

        self.writer = ColumnarWriter(
            out_dir, schema, chunk_rows=chunk_rows, rows_per_file=rows_per_file
        )

    def write(self, table: pa.Table) -> None:
        """Append the rows of an Arrow table of converted columns."""
        self.writer.write(table)

    def close(self) -> list[str]:
        """Finish the files and the manifest; the data files' paths."""
        return self.writer.close().paths

    def abort(self) -> None:
        """Delete every file written so far (after an error)."""
        self.writer.abort()


def _string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Flat UTF-8 bytes and per-value byte lengths of a string array (nulls: empty)."""
    import pyarrow as pa

    arr = pa.concat_arrays([arr]) if arr.offset else arr
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1)
    data = arr.buffers()[2]
    flat = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return flat[offsets[0] : offsets[-1]], np.diff(offsets).astype(np.int64)


def _examples(table: pa.Table, plan: Mapping[str, Column]) -> list[bytes]:
    """A table of converted columns as tf.Example records (missing values: absent)."""
    import pyarrow.compute as pc

    from tfinput._src.core.formats.tfrecord import WireColumn, encode_examples

    columns = []
    for name, col in plan.items():
        arr = table.column(name).combine_chunks()
        kind = {"float32": "float", "int64": "int64", "string": "bytes"}[col.kind]
        row_lengths = None
        present = None
        if col.is_list:
            row_lengths = pc.list_value_length(arr).fill_null(0).to_numpy().astype(np.int64)
            values = pc.list_flatten(arr)
        else:
            values = arr
            if arr.null_count:
                present = arr.is_valid().to_numpy(zero_copy_only=False)
        value_lengths = None
        if kind == "bytes":
            values, value_lengths = _string_buffers(values)
        else:
            dtype = np.float32 if kind == "float" else np.int64
            values = values.fill_null(0).to_numpy(zero_copy_only=False).astype(dtype)
        columns.append(
            WireColumn(
                key=name,
                kind=kind,
                values=values,
                value_lengths=value_lengths,
                row_lengths=row_lengths,
                present=present,
            )
        )
    return encode_examples(columns, table.num_rows)
