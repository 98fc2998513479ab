"""Writing columnar records: Arrow tables -> chunks -> sharded ``.tfcol`` files + manifest;
and their offline verification (`verify_files`): every chunk read back against the
manifest the writer wrote."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tfinput._src.core.columnar._checks import check_size
from tfinput._src.core.columnar.format import (
    CHECK_KEY,
    DEFAULT_CHUNK_ROWS,
    EXTENSION,
    FORMAT_VERSION,
    LENGTHS_SUFFIX,
    MANIFEST,
    NUMPY_DTYPES,
    RECORD_FRAMING,
    ROWS_KEY,
    VERSION_KEY,
    Column,
    FileEntry,
    Manifest,
    chunk_digest,
    file_stat,
    payload_check,
    payload_keys,
    storage_columns,
)
from tfinput._src.core.columnar.source import ColumnarSource
from tfinput._src.core.errors import ConfigError, DataError, SchemaError
from tfinput._src.core.formats import tfrecord
from tfinput._src.core.schema import Categorical, Dense, Schema


def _fill_value(schema: Schema) -> dict[str, Any]:
    """Value written for a missing (null) cell, per column; None: the column is required."""
    out: dict[str, Any] = {}
    for f in schema.features:
        if isinstance(f, Dense):
            out[f.source] = f.default if f.length is None else [f.default] * f.length
        elif isinstance(f, Categorical):
            out[f.source] = f.default
        else:
            out[f.source] = []
            if f.weights:
                out[f.weights] = []
    for lab in schema.labels:
        out[lab.source] = lab.default
    return out


class ColumnarWriter:
    """Streams tables into sharded columnar files plus ``manifest.json``.

        with ColumnarWriter("out", schema, chunk_rows=1024) as w:
            for table in tables:          # pyarrow Tables (or RecordBatches)
                w.write(table)
        manifest = w.manifest

    Tables hold one column per stored column (`storage_columns`): numbers for fixed
    columns (lists or fixed-size lists for vectors), strings or binary for strings, lists
    for list columns. Nulls become the schema's default (an empty list for lists); a null
    in a required column (no default) is a `DataError`. Rows are buffered until a chunk
    is full, so memory is bounded by one chunk plus the caller's table.

    Args:
      out_dir: Output directory (created). Existing ``part-*`` files are not removed.
      schema: The schema; stored in the manifest.
      chunk_rows: Rows per record. Batch sizes that are a multiple of it read fastest;
        smaller chunks shuffle at a finer grain but cost more per row.
      rows_per_file: Rows per file, rounded up to whole chunks.
      prefix: File name prefix.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        schema: Schema,
        *,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        rows_per_file: int = 1_000_000,
        prefix: str = "part",
    ) -> None:
        for name, value in (("chunk_rows", chunk_rows), ("rows_per_file", rows_per_file)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"columnar writer: {name} must be an int >= 1, got {value!r}")
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.schema = schema
        self.columns = storage_columns(schema)
        self.chunk_rows = chunk_rows
        self.chunks_per_file = max(1, math.ceil(rows_per_file / chunk_rows))
        self.prefix = prefix
        self.fill = _fill_value(schema)
        self.manifest: Manifest | None = None
        self._pending: list[Any] = []
        self._pending_rows = 0
        self._files: list[dict[str, Any]] = []  # name, rows, offsets, digests
        self._writer: Any = None
        self._offset = 0
        self._closed = False

    def __enter__(self) -> ColumnarWriter:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    @property
    def rows(self) -> int:
        """Rows written so far, buffered ones included."""
        return sum(f["rows"] for f in self._files) + self._pending_rows

    def write(self, table: Any) -> None:
        """Append rows (a `pyarrow.Table` or `RecordBatch` of the stored columns)."""
        import pyarrow as pa

        if self._closed:
            raise ConfigError("columnar writer: write() after close()")
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        missing = [c.name for c in self.columns if c.name not in table.column_names]
        if missing:
            raise SchemaError(
                f"columnar writer: the schema needs column(s) {missing}; the table has "
                f"{table.column_names}"
            )
        if not table.num_rows:
            return
        self._pending.append(table.select([c.name for c in self.columns]))
        self._pending_rows += table.num_rows
        if self._pending_rows < self.chunk_rows:
            return
        merged = pa.concat_tables(self._pending, promote_options="permissive")
        full = (merged.num_rows // self.chunk_rows) * self.chunk_rows
        try:
            for start in range(0, full, self.chunk_rows):
                self._write_chunk(merged.slice(start, self.chunk_rows))
        except BaseException:
            self.abort()
            raise
        rest = merged.slice(full)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows

    def close(self) -> Manifest:
        """Write the last (partial) chunk, name the files ``-of-N`` and write the manifest
        (not when no row was written)."""
        import pyarrow as pa

        if self._closed:
            if self.manifest is None:
                raise ConfigError("columnar writer: closed after an error")
            return self.manifest
        try:
            if self._pending_rows:
                self._write_chunk(pa.concat_tables(self._pending, promote_options="permissive"))
        except BaseException:
            self.abort()
            raise
        self._pending, self._pending_rows = [], 0
        self._finish_file()
        self._closed = True
        entries = self._name_files()
        self.manifest = Manifest(
            path=str(self.out_dir / MANIFEST),
            chunk_rows=self.chunk_rows,
            schema=self.schema,
            columns=self.columns,
            files=tuple(entries),
        )
        if entries:  # nothing written: leave no manifest describing an empty data set
            self.manifest.write()
        return self.manifest

    def abort(self) -> None:
        """Close and delete every file written so far."""
        self._closed = True
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        for f in self._files:
            path = self.out_dir / f["name"]
            if path.exists():
                path.unlink()
        self._files = []

    # ---------------------------------------------------------------- chunks
    def _name_files(self) -> list[FileEntry]:
        """Rename the finished files ``<prefix>-NNNNN-of-MMMMM``; their manifest entries."""
        n = len(self._files)
        entries = []
        for f in self._files:
            final = f"{f['name'][: -len(EXTENSION)]}-of-{n:05d}{EXTENSION}"
            os.replace(self.out_dir / f["name"], self.out_dir / final)
            entries.append(
                FileEntry(
                    name=final,
                    rows=f["rows"],
                    bytes=f["bytes"],
                    offsets=tuple(f["offsets"]),
                    digests=tuple(f["digests"]),
                )
            )
        return entries

    def _finish_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._files[-1]["bytes"] = self._offset

    def _write_chunk(self, table: Any) -> None:
        if self._writer is None or len(self._files[-1]["offsets"]) >= self.chunks_per_file:
            self._finish_file()
            name = f"{self.prefix}-{len(self._files):05d}{EXTENSION}"
            self._files.append({"name": name, "rows": 0, "offsets": [], "digests": []})
            self._writer = tfrecord.writer(self.out_dir / name)
            self._offset = 0
        record, digest = _encode_chunk(table, self.columns, self.fill)
        f = self._files[-1]
        f["offsets"].append(self._offset)
        f["digests"].append(digest)
        f["rows"] += table.num_rows
        self._writer.write(record)
        self._offset += len(record) + RECORD_FRAMING


def _filled(arr: Any, col: Column, fill: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not arr.null_count:
        return arr
    if fill is None:
        first = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError(
            f"column {col.name!r}: missing value in row {first} of a chunk, and the schema "
            "gives it no default; add a default or fix the data"
        )
    if isinstance(fill, list):
        return pc.if_else(pc.is_null(arr), pa.scalar(fill, arr.type), arr)
    return pc.fill_null(arr, pa.scalar(fill).cast(arr.type))


def _numbers(arr: Any, dtype: str, where: str) -> np.ndarray:
    import pyarrow as pa

    target = pa.float32() if dtype == "float32" else pa.int64()
    try:
        arr = arr.cast(target) if arr.type != target else arr
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise DataError(f"{where}: values of type {arr.type} do not fit {dtype} ({e})") from e
    return np.ascontiguousarray(arr.to_numpy(zero_copy_only=False), dtype=NUMPY_DTYPES[dtype])


def _binary_values(arr: Any, where: str) -> list[bytes]:
    import pyarrow as pa

    if not (
        pa.types.is_string(arr.type)
        or pa.types.is_large_string(arr.type)
        or pa.types.is_binary(arr.type)
        or pa.types.is_large_binary(arr.type)
    ):
        raise DataError(f"{where}: expected strings, found {arr.type}")
    return arr.cast(pa.binary()).to_pylist()


def _split_lists(arr: Any, col: Column, where: str) -> tuple[np.ndarray | None, Any]:
    """A column's row lengths (None for scalars) and flat values.

    Raises:
      DataError: a row of a vector column has another length than ``col.width``.
    """
    import pyarrow.compute as pc

    if col.layout != "list" and col.width is None:
        return None, arr
    lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    if col.width is not None and (lengths != col.width).any():
        bad = int(np.flatnonzero(lengths != col.width)[0])
        raise DataError(
            f"{where}: expected vectors of length {col.width}, found a row of length "
            f"{int(lengths[bad])}"
        )
    return lengths, pc.list_flatten(arr)


def _encode_chunk(
    table: Any, columns: Sequence[Column], fill: Mapping[str, Any]
) -> tuple[bytes, str]:
    """One chunk of rows as a serialized record, plus its manifest digest (hex).

    Raises:
      DataError: a null in a required column, a vector of the wrong length, values
        that do not fit the column's dtype.
    """
    from tensorflow.core.example import example_pb2

    ex = example_pb2.Example()
    fmap = ex.features.feature
    payload: list[bytes] = []
    for col in columns:
        where = f"column {col.name!r}"
        arr = _filled(table.column(col.name), col, fill.get(col.name))
        lengths, values = _split_lists(arr, col, where)
        if col.dtype == "string":
            items = _binary_values(values, where)
            fmap[col.name].bytes_list.value.extend(items)
            payload.append(b"".join(items))
        else:
            data = _numbers(values, col.dtype, where).tobytes()
            fmap[col.name].bytes_list.value.append(data)
            payload.append(data)
        if col.layout == "list":
            data = np.ascontiguousarray(lengths, dtype="<i4").tobytes()
            fmap[col.name + LENGTHS_SUFFIX].bytes_list.value.append(data)
            payload.append(data)
    check = payload_check(payload)
    fmap[CHECK_KEY].bytes_list.value.append(check)
    fmap[ROWS_KEY].int64_list.value.append(table.num_rows)
    fmap[VERSION_KEY].int64_list.value.append(FORMAT_VERSION)
    return ex.SerializeToString(), chunk_digest(check)


# ------------------------------------------------------------ offline verification
@dataclasses.dataclass(frozen=True, kw_only=True)
class ChunkProblem:
    """A chunk that failed `verify_files`."""

    path: str
    chunk: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: chunk {self.chunk}: {self.reason}"


def verify_files(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> list[ChunkProblem]:
    """Read every chunk of every file and check it against its manifest (offline).

    Checks, per file: the size, the record count, each record's offset, its format
    version, row count, every payload value's fingerprint and the manifest digest.

    Args:
      paths: As for `tfinput.columnar_records.columnar`.

    Returns:
      The problems found, empty if the data set is intact.
    """
    from tfinput._src.core.files import as_paths

    source = ColumnarSource(paths=as_paths(paths))
    problems: list[ChunkProblem] = []
    for path, m, entry in source.resolve():
        problems.extend(_verify_file(source, path, m, entry))
    return problems


def _verify_file(
    source: ColumnarSource, path: str, m: Manifest, entry: FileEntry
) -> list[ChunkProblem]:
    """The problems of one data file: its size, then each record, then the count."""
    import tensorflow as tf

    try:
        check_size(path, m, entry)
    except DataError as e:
        stat = file_stat(path)
        chunk = entry.chunk_at(stat[1]) if stat else 0
        return [ChunkProblem(path=path, chunk=chunk, reason=str(e))]
    keys = payload_keys(m.columns)
    strings = {c.name for c in m.columns if c.dtype == "string"}
    problems: list[ChunkProblem] = []
    index = 0
    offset = 0
    try:
        for record in tfrecord.records(path):
            reason = _verify_record(record.numpy(), m, entry, index, offset, keys, strings)
            if reason:
                problems.append(ChunkProblem(path=path, chunk=index, reason=reason))
            offset += len(record.numpy()) + RECORD_FRAMING
            index += 1
    except tf.errors.OpError as e:
        chunk = entry.chunk_at(offset) if index < entry.chunks else index
        reason = source.explain_error(path, getattr(e, "message", str(e)))
        problems.append(ChunkProblem(path=path, chunk=chunk, reason=reason))
        return problems
    if index != entry.chunks:
        reason = f"{index} chunk(s) in the file, {entry.chunks} in the manifest"
        problems.append(ChunkProblem(path=path, chunk=index, reason=reason))
    return problems


def _verify_record(
    data: bytes,
    m: Manifest,
    entry: FileEntry,
    index: int,
    offset: int,
    keys: list[str],
    strings: set[str],
) -> str | None:
    """What is wrong with record ``index`` of a file (at byte ``offset``), or None."""
    from tensorflow.core.example import example_pb2

    if index >= entry.chunks:
        return f"extra record beyond the manifest's {entry.chunks} chunk(s)"
    if entry.offsets[index] != offset:
        return f"record at byte {offset}, the manifest says {entry.offsets[index]}"
    try:
        fmap = example_pb2.Example.FromString(data).features.feature
    except Exception as e:  # protobuf's DecodeError has no stable import path
        return f"not a columnar record ({e})"
    version = list(fmap[VERSION_KEY].int64_list.value) if VERSION_KEY in fmap else []
    if version != [FORMAT_VERSION]:
        return f"format version {version}, this tfinput reads {FORMAT_VERSION}"
    rows = list(fmap[ROWS_KEY].int64_list.value)
    want_rows = m.chunk_rows_range(entry, index)
    if rows != [want_rows[1] - want_rows[0] + 1]:
        return f"{rows} rows, the manifest implies {want_rows[1] - want_rows[0] + 1}"
    check = fmap[CHECK_KEY].bytes_list.value[0] if CHECK_KEY in fmap else b""
    if len(check) != 8 * len(keys):
        return f"checksum block of {len(check)} bytes, expected {8 * len(keys)}"
    missing = [k for k in keys if k not in fmap]
    if missing:
        return f"missing column(s) {missing}"
    payload = [
        b"".join(fmap[k].bytes_list.value) if k in strings else fmap[k].bytes_list.value[0]
        for k in keys
    ]
    computed = payload_check(payload)
    for i, k in enumerate(keys):
        if computed[8 * i : 8 * i + 8] != check[8 * i : 8 * i + 8]:
            return f"column {k!r} does not match its checksum: the chunk is corrupt"
    if chunk_digest(check) != entry.digests[index]:
        return "its checksums do not match the manifest digest (file replaced or rewritten)"
    return None
