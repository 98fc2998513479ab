"""Columnar pre-batched records: a storage layout read at near memory speed, natively.

    tfinput convert data/*.parquet --to columnar --out data/criteo-col   # or from CSV/TFRecord
    pipeline = tfinput.columnar("data/criteo-col")                       # schema from manifest
    ds = pipeline.build(tfinput.PipelineConfig(batch_size=4096))

Why: parsing ``tf.train.Example`` costs about one core per 100-150k Criteo-like
examples/s (every value of every row is a protobuf field), and a Python Parquet reader
cannot run on tf.data service workers. This layout keeps TFRecord files (sharding,
interleave, tf.data service and every file system TensorFlow reads) but stores a
*chunk* of rows per record, column by column:

- **Record** = one serialized ``tf.train.Example`` holding ``chunk_rows`` rows
  (default 1024; the last chunk of a data set may be shorter). Every fixed-width
  column is ONE bytes value: the raw little-endian array (``float32``/``int64``,
  ``[rows]`` or ``[rows, length]`` row-major). A list column is two bytes values: the
  flat values and the ``int32`` row lengths (key ``<column>@lengths``). String columns
  keep one ``bytes_list`` entry per value (the rare case; they stay native too). Meta
  keys: ``@rows`` (row count), ``@format`` (format version) and ``@check`` (an 8-byte
  FarmHash64 fingerprint, `tf.fingerprint`, of every payload value, in column order).
- **Files** ``part-00000-of-0000N.tfcol``: TFRecord framing (each record also has
  TFRecord's own CRC32C), ``rows_per_file`` rounded up to whole chunks, so only the
  very last chunk of a conversion can be partial.
- **Manifest** ``manifest.json`` beside the files: format version, schema, column
  layouts, chunk size, and per file its rows, bytes, record offsets and one digest per
  chunk (the fingerprint of the chunk's ``@check`` value).

Reading (`ColumnarSource`) uses native ops only: ``TFRecordDataset`` ->
``tf.io.parse_example`` of a handful of scalar string features -> ``tf.io.decode_raw``
-> ``tf.RaggedTensor.from_row_lengths``; `tfinput.graph.find_python_ops` proves it and
`tfinput.service.distribute` runs it on tf.data service workers.

Batch assembly. When ``batch_size`` is a multiple of ``chunk_rows`` (``k`` chunks per
batch), the reader batches ``k`` serialized chunks and decodes them in one vectorized
step: no per-row work at all. Any other batch size works too, at a cost: chunks are
decoded in groups and cut into batches with ``Dataset.rebatch``, which moves list
columns row by row (typically 2-4x slower end to end). Choose ``chunk_rows`` to divide
your batch sizes (1024 divides every usual power-of-two batch >= 1024). With
``drop_remainder=True`` on the multiple path, the last (partial) chunk of a conversion
is skipped, as the tail of any data set is: at most ``chunk_rows - 1`` rows per input
pipeline.

Integrity (`ColumnarSource.verify`, on by default). At build time the manifest's format
version is checked, every file must be listed in its manifest and have the manifest's
size (a truncated file names the first incomplete chunk). While reading, each chunk's
payload is fingerprinted and compared with the ``@check`` value (a mismatch names the
file, the chunk and the column), and ``@check`` itself with the manifest's digest (a
file replaced after the manifest was written). Verification hashes every byte read
(FarmHash64, a few GB/s): ``benchmarks/columnar.py`` measures its cost; switch it off
with ``verify=False`` for speed (TFRecord's CRC32C still catches bytes corrupted on
disk). `verify_files` checks a whole data set offline.

Shuffling, from cheapest to most random:

- **file order** (`Pipeline.with_file_shuffling`): reshuffled every epoch; free.
- **chunk order** (``PipelineConfig.shuffle_buffer``, in *rows*: a buffer of
  ``ceil(shuffle_buffer / chunk_rows)`` chunks): chunks from the interleaved files are
  mixed; costs memory only. Rows of one chunk stay together and in order.
- **rows within a batch** (``shuffle_rows=True``): one gather per column per batch
  (a few % of throughput); a batch then holds its rows in random order, but a batch
  is still made of ``k`` whole chunks.

So the randomness unit is the chunk: rows that were written next to each other (within
``chunk_rows``) are always trained in the same batch. That is fine for data that was
shuffled once when written (convert from a shuffled source, or shuffle before
converting) and is the trade-off that buys the speed; for unshuffled, time-ordered
data use a small ``chunk_rows`` (256) and a large chunk buffer, or shuffle when
converting.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, DataError, SchemaError, SourceError
from tfinput.schema import Categorical, Dense, MultiHot, Schema

__all__ = [
    "FORMAT",
    "MANIFEST",
    "EXTENSION",
    "DEFAULT_CHUNK_ROWS",
    "Column",
    "FileEntry",
    "Manifest",
    "ColumnarWriter",
    "ColumnarSource",
    "columnar",
    "storage_columns",
    "read_manifest",
    "is_columnar",
    "verify_files",
    "ChunkProblem",
]

#: Format name and version, written into every manifest and (as ``@format``) record.
FORMAT = "tfinput.columnar/1"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
EXTENSION = ".tfcol"
#: Rows per record: divides every power-of-two batch size >= 1024.
DEFAULT_CHUNK_ROWS = 1024

_LENGTHS = "@lengths"
_ROWS, _CHECK, _VERSION = "@rows", "@check", "@format"
_NUMERIC = ("float32", "int64")
_NP = {"float32": "<f4", "int64": "<i8"}
_FRAME = 16  # TFRecord framing per record: length (8) + length CRC (4) + data CRC (4)


# ------------------------------------------------------------------ layout
@dataclasses.dataclass(frozen=True, kw_only=True)
class Column:
    """How one source column is stored.

    Attributes:
      name: Source column (the tf.Example key / Parquet column of the other formats).
      layout: ``fixed`` (one value, or ``width`` values, per row) or ``list``
        (variable-length: values plus int32 row lengths).
      dtype: ``float32``, ``int64`` or ``string``.
      width: Values per row of a fixed vector column; None for a scalar.
    """

    name: str
    layout: str
    dtype: str
    width: int | None = None

    def __post_init__(self) -> None:
        if self.layout not in ("fixed", "list"):
            raise SchemaError(
                f"column {self.name!r}: layout must be 'fixed' or 'list', got {self.layout!r}"
            )
        if self.dtype not in ("float32", "int64", "string"):
            raise SchemaError(
                f"column {self.name!r}: dtype must be float32, int64 or string, got {self.dtype!r}"
            )

    @property
    def keys(self) -> tuple[str, ...]:
        """The record keys holding this column (values, then row lengths for lists)."""
        return (self.name, self.name + _LENGTHS) if self.layout == "list" else (self.name,)

    def describe(self) -> str:
        shape = f"[{self.width}]" if self.width else ""
        return f"{self.layout} {self.dtype}{shape}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "layout": self.layout, "dtype": self.dtype}
        if self.width is not None:
            out["width"] = self.width
        return out


def storage_columns(schema: Schema) -> tuple[Column, ...]:
    """The stored columns a schema reads, in `Schema.columns` order.

    Raises:
      SchemaError: two features read one column with different layouts, or a column
        name collides with a reserved record key (``@...`` or ``...@lengths``).
    """
    out: dict[str, tuple[Column, str]] = {}

    def add(col: Column, feature: str) -> None:
        if col.name.startswith("@") or col.name.endswith(_LENGTHS):
            raise SchemaError(
                f"feature {feature!r}: column name {col.name!r} is reserved by the columnar "
                "format (names starting with '@' or ending with '@lengths'); rename it"
            )
        old = out.get(col.name)
        if old is not None and old[0] != col:
            raise SchemaError(
                f"column {col.name!r} is read by feature {old[1]!r} as {old[0].describe()} "
                f"and by feature {feature!r} as {col.describe()}; the columnar format "
                "stores one layout per column"
            )
        out.setdefault(col.name, (col, feature))

    for f in schema.features:
        if isinstance(f, Dense):
            add(Column(name=f.source, layout="fixed", dtype=f.dtype, width=f.length), f.name)
        elif isinstance(f, Categorical):
            add(Column(name=f.source, layout="fixed", dtype=f.dtype), f.name)
        else:
            add(Column(name=f.source, layout="list", dtype=f.dtype), f.name)
            if f.weights:
                add(Column(name=f.weights, layout="list", dtype="float32"), f.name)
    for lab in schema.labels:
        add(Column(name=lab.source, layout="fixed", dtype=lab.dtype), lab.name)
    return tuple(c for c, _ in out.values())


def _payload_keys(columns: Sequence[Column]) -> list[str]:
    return [k for c in columns for k in c.keys]


# ----------------------------------------------------------------- manifest
@dataclasses.dataclass(frozen=True, kw_only=True)
class FileEntry:
    """One data file as the manifest records it.

    Attributes:
      name: File name, relative to the manifest's directory.
      rows: Rows in the file.
      bytes: File size in bytes.
      offsets: Byte offset of each chunk's record.
      digests: Per chunk, the hex FarmHash64 fingerprint of its ``@check`` value.
    """

    name: str
    rows: int
    bytes: int
    offsets: tuple[int, ...]
    digests: tuple[str, ...]

    @property
    def chunks(self) -> int:
        return len(self.offsets)

    def chunk_at(self, offset: int) -> int:
        """Index of the chunk whose record spans byte ``offset``."""
        return max(0, bisect.bisect_right(self.offsets, offset) - 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rows": self.rows,
            "bytes": self.bytes,
            "offsets": list(self.offsets),
            "digests": list(self.digests),
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Manifest:
    """The ``manifest.json`` of a columnar data set.

    Attributes:
      path: Where it was read from (or will be written).
      chunk_rows: Rows per record (the last chunk of the data set may hold fewer).
      schema: The schema the data were written with.
      columns: Stored columns, in record (and checksum) order.
      files: The data files, in order.
      version: Format version (1).
    """

    path: str
    chunk_rows: int
    schema: Schema
    columns: tuple[Column, ...]
    files: tuple[FileEntry, ...]
    version: int = FORMAT_VERSION

    @property
    def directory(self) -> str:
        return os.path.dirname(self.path)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def paths(self) -> list[str]:
        return [os.path.join(self.directory, f.name) for f in self.files]

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def entry(self, path: str) -> FileEntry | None:
        name = os.path.basename(path)
        return next((f for f in self.files if f.name == name), None)

    def chunk_rows_range(self, entry: FileEntry, chunk: int) -> tuple[int, int]:
        """First and last row (within the file) of a chunk."""
        first = chunk * self.chunk_rows
        return first, min(entry.rows, first + self.chunk_rows) - 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": f"tfinput.columnar/{self.version}",
            "chunk_rows": self.chunk_rows,
            "rows": self.rows,
            "checksum": "farmhash64 (tf.fingerprint) of each payload value; digest: of @check",
            "columns": [c.to_dict() for c in self.columns],
            "schema": self.schema.to_dict(),
            "files": [f.to_dict() for f in self.files],
        }

    def write(self) -> str:
        Path(self.path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return self.path

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, path: str) -> Manifest:
        """Parse a manifest.

        Raises:
          SourceError: another format or version, or a malformed manifest.
        """
        fmt = data.get("format") if isinstance(data, Mapping) else None
        if fmt != FORMAT:
            found = fmt if isinstance(fmt, str) else "no format field"
            raise SourceError(
                f"{path}: format {found!r} is not supported; this tfinput reads {FORMAT!r}. "
                "Convert the data again with this version (`tfinput convert --to columnar`)"
            )
        try:
            files = tuple(
                FileEntry(
                    name=str(f["name"]),
                    rows=int(f["rows"]),
                    bytes=int(f["bytes"]),
                    offsets=tuple(int(x) for x in f["offsets"]),
                    digests=tuple(str(x) for x in f["digests"]),
                )
                for f in data["files"]
            )
            columns = tuple(
                Column(name=c["name"], layout=c["layout"], dtype=c["dtype"], width=c.get("width"))
                for c in data["columns"]
            )
            chunk_rows = int(data["chunk_rows"])
            schema = Schema.from_dict(data["schema"], source=f"{path}: schema")
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, SchemaError):
                raise
            raise SourceError(f"{path}: malformed manifest ({type(e).__name__}: {e})") from e
        for f in files:
            if len(f.offsets) != len(f.digests) or len(f.offsets) != math.ceil(f.rows / chunk_rows):
                raise SourceError(
                    f"{path}: malformed manifest: file {f.name!r} has {f.rows} rows, "
                    f"{len(f.offsets)} offsets and {len(f.digests)} digests for chunks of "
                    f"{chunk_rows} rows"
                )
        return cls(path=path, chunk_rows=chunk_rows, schema=schema, columns=columns, files=files)


@functools.lru_cache(maxsize=64)
def _load_manifest(path: str, _mtime_ns: int, _size: int) -> Manifest:
    import tensorflow as tf

    try:
        text = tf.io.gfile.GFile(path, "r").read() if "://" in path else Path(path).read_text()
    except OSError as e:
        raise SourceError(f"cannot read columnar manifest {path}: {e}") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SourceError(f"{path}: not valid JSON ({e})") from e
    return Manifest.from_dict(data, path=path)


def _stat(path: str) -> tuple[int, int] | None:
    """(mtime_ns, size) or None if missing."""
    if "://" in path:
        import tensorflow as tf

        if not tf.io.gfile.exists(path):
            return None
        st = tf.io.gfile.stat(path)
        return int(st.mtime_nsec), int(st.length)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size


def _isdir(path: str) -> bool:
    if "://" in path:
        import tensorflow as tf

        return not any(ch in path for ch in "*?[") and tf.io.gfile.isdir(path)
    return os.path.isdir(path)


def _manifest_path(p: str) -> str:
    if _isdir(p):
        return os.path.join(p, MANIFEST)
    if p.endswith(".json"):
        return p
    return os.path.join(os.path.dirname(p) or ".", MANIFEST)


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read the manifest of a columnar data set.

    Args:
      path: The data set's directory, its ``manifest.json``, or one of its data files.

    Raises:
      SourceError: no manifest there, or one of another format version.
    """
    p = os.fspath(path)
    candidate = _manifest_path(p)
    stat = _stat(candidate)
    if stat is None:
        raise SourceError(
            f"no columnar manifest {candidate!r} for {p!r}: a columnar data set is a "
            f"directory of *{EXTENSION} files with a {MANIFEST} beside them (write one with "
            "`tfinput convert --to columnar`)"
        )
    return _load_manifest(candidate, *stat)


def is_columnar(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a columnar directory, manifest or data file: a
    ``manifest.json`` of any ``tfinput.columnar/*`` version is there (so that reading
    it then reports a version mismatch instead of trying another format)."""
    try:
        read_manifest(path)
        return True
    except SourceError:
        pass
    try:
        data = json.loads(Path(_manifest_path(os.fspath(path))).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and str(data.get("format", "")).startswith("tfinput.columnar/")


# ------------------------------------------------------------------- writer
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
    def _finish_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._files[-1]["bytes"] = self._offset

    def _write_chunk(self, table: Any) -> None:
        import tensorflow as tf

        if self._writer is None or len(self._files[-1]["offsets"]) >= self.chunks_per_file:
            self._finish_file()
            name = f"{self.prefix}-{len(self._files):05d}{EXTENSION}"
            self._files.append({"name": name, "rows": 0, "offsets": [], "digests": []})
            self._writer = tf.io.TFRecordWriter(str(self.out_dir / name))
            self._offset = 0
        record, digest = _encode_chunk(table, self.columns, self.fill)
        f = self._files[-1]
        f["offsets"].append(self._offset)
        f["digests"].append(digest)
        f["rows"] += table.num_rows
        self._writer.write(record)
        self._offset += len(record) + _FRAME


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
    return np.ascontiguousarray(arr.to_numpy(zero_copy_only=False), dtype=_NP[dtype])


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


def _encode_chunk(
    table: Any, columns: Sequence[Column], fill: Mapping[str, Any]
) -> tuple[bytes, str]:
    """One chunk of rows as a serialized record, plus its manifest digest (hex).

    Raises:
      DataError: a null in a required column, a vector of the wrong length, values
        that do not fit the column's dtype.
    """
    import pyarrow.compute as pc
    import tensorflow as tf
    from tensorflow.core.example import example_pb2

    n = table.num_rows
    ex = example_pb2.Example()
    fmap = ex.features.feature
    payload: list[bytes] = []
    for col in columns:
        where = f"column {col.name!r}"
        arr = _filled(table.column(col.name), col, fill.get(col.name))
        if col.layout == "list" or col.width is not None:
            lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
            values = pc.list_flatten(arr)
            if col.width is not None and (lengths != col.width).any():
                bad = int(np.flatnonzero(lengths != col.width)[0])
                raise DataError(
                    f"{where}: expected vectors of length {col.width}, found a row of length "
                    f"{int(lengths[bad])}"
                )
        else:
            lengths, values = None, arr
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
            fmap[col.name + _LENGTHS].bytes_list.value.append(data)
            payload.append(data)
    check = tf.fingerprint(tf.constant(payload, dtype=tf.string)).numpy().tobytes()
    fmap[_CHECK].bytes_list.value.append(check)
    fmap[_ROWS].int64_list.value.append(n)
    fmap[_VERSION].int64_list.value.append(FORMAT_VERSION)
    digest = tf.fingerprint(tf.constant([check])).numpy()[0].tobytes().hex()
    return ex.SerializeToString(), digest


# ------------------------------------------------------------------- source
def _compatible(stored: Column, wanted: Column, numeric_ok: bool) -> bool:
    if stored == wanted:
        return True
    same_shape = (stored.layout, stored.width) == (wanted.layout, wanted.width)
    both_numeric = stored.dtype in _NUMERIC and wanted.dtype in _NUMERIC
    return same_shape and both_numeric and numeric_ok


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColumnarSource:
    """Columnar pre-batched records (see the module docstring).

    Attributes:
      paths: Data set directories, their manifests, or data files (globs allowed);
        every file must be listed in the ``manifest.json`` of its directory.
      verify: Check every chunk's fingerprint against its ``@check`` value and the
        manifest while reading, naming the file, chunk and column on a mismatch. Costs
        one FarmHash64 pass over the bytes read (see ``benchmarks/columnar.py``); off,
        TFRecord's own CRC32C still catches bytes corrupted on disk.
      shuffle_rows: Shuffle rows within each batch (seeded by
        ``PipelineConfig.shuffle_seed``); costs one gather per column.
      buffer_size: Read buffer per open file, bytes (None: TensorFlow's default).
      empty_files: Accepted for interface compatibility with the other sources; a
        columnar file is never empty, and a zero-byte one is reported as truncated.
    """

    paths: tuple[str, ...]
    verify: bool = True
    shuffle_rows: bool = False
    buffer_size: int | None = None
    empty_files: str = "skip"

    kind = "columnar"

    def __post_init__(self) -> None:
        if isinstance(self.paths, (str, os.PathLike)):
            object.__setattr__(self, "paths", (os.fspath(self.paths),))
        for name in ("verify", "shuffle_rows"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"columnar source: {name} must be true or false, got {getattr(self, name)!r}"
                )

    # -------------------------------------------------------------- files
    def resolve(self) -> list[tuple[str, Manifest, FileEntry]]:
        """Every data file with its manifest and entry, in order."""
        from tfinput.sources import resolve_paths

        out: list[tuple[str, Manifest, FileEntry]] = []
        seen: set[str] = set()

        def add(path: str, manifest: Manifest, entry: FileEntry) -> None:
            key = os.path.normpath(path)
            if key not in seen:
                seen.add(key)
                out.append((path, manifest, entry))

        for p in self.paths:
            p = os.fspath(p)
            if _isdir(p) or p.endswith(".json"):
                m = read_manifest(p)
                for entry, path in zip(m.files, m.paths):
                    add(path, m, entry)
                continue
            for path in resolve_paths([p], what="columnar"):
                m = read_manifest(path)
                entry = m.entry(path)
                if entry is None:
                    raise SourceError(
                        f"{path}: not listed in the manifest {m.path} (it lists "
                        f"{len(m.files)} file(s), first {m.files[0].name if m.files else None!r}); "
                        "the manifest does not match the files"
                    )
                add(path, m, entry)
        if not out:
            raise SourceError(f"no columnar files in {list(self.paths)}")
        return out

    def files(self) -> list[str]:
        return [p for p, _, _ in self.resolve()]

    def manifest(self) -> Manifest:
        """The manifest of the first data file."""
        return self.resolve()[0][1]

    def validate(self, files: list[str], schema: Schema) -> None:
        """Cheap checks before reading: manifest version (when loading), schema against
        the stored columns, one chunk size, and every file's size against its manifest
        (a truncated file names its first incomplete chunk).

        Raises:
          SourceError: a file is missing or not in its manifest; manifests differ in
            chunk size or stored columns.
          SchemaError: the schema needs a column that is not stored, or stored otherwise.
          DataError: a file's size differs from its manifest's record.
        """
        chosen = self._chosen(files)
        chunk_sizes = {m.chunk_rows for _, m, _ in chosen}
        if len(chunk_sizes) > 1:
            raise SourceError(
                f"columnar data sets with different chunk sizes {sorted(chunk_sizes)} cannot "
                "be read by one pipeline; convert them with the same --chunk-rows"
            )
        manifests = list({id(m): m for _, m, _ in chosen}.values())
        for m in manifests:
            _check_schema(m, schema)
            if m.columns != manifests[0].columns:
                raise SourceError(
                    f"{m.path} and {manifests[0].path} store different columns (or in another "
                    "order); read them with separate pipelines or convert them with one schema"
                )
        for path, m, entry in chosen:
            _check_size(path, m, entry)

    def _chosen(self, files: list[str]) -> list[tuple[str, Manifest, FileEntry]]:
        by_path = {os.path.normpath(p): (p, m, e) for p, m, e in self.resolve()}
        out = []
        for f in files:
            item = by_path.get(os.path.normpath(f))
            if item is None:
                raise SourceError(f"{f}: not a file of this columnar source")
            out.append(item)
        return out

    def count_records(self, path: str) -> int | None:
        """Rows in one file, from the manifest (`Pipeline.check` reports it)."""
        try:
            entry = read_manifest(path).entry(path)
        except SourceError:
            return None
        return None if entry is None else entry.rows

    def explain_error(self, path: str, message: str) -> str:
        """Name the chunk in a TFRecord corruption message (``corrupted record at N``)."""
        m = re.search(r"(corrupted|truncated) record at (\d+)", message)
        if not m:
            return message
        try:
            manifest = read_manifest(path)
        except SourceError:
            return message
        entry = manifest.entry(path)
        if entry is None:
            return message
        chunk = entry.chunk_at(int(m.group(2)))
        first, last = manifest.chunk_rows_range(entry, chunk)
        return (
            f"chunk {chunk} (rows {first}-{last} of the file, byte {int(m.group(2))}): "
            f"{m.group(1)} record; the file is damaged on disk (TFRecord CRC32C mismatch). "
            "Restore or convert it again"
        )

    # ---------------------------------------------------------------- read
    def encoded_batches(
        self,
        files: list[str],
        schema: Schema,
        config: PipelineConfig,
        batch_size: int,
        *,
        shuffle_files: bool,
    ) -> tuple[Any, Any]:
        import tensorflow as tf

        from tfinput.sources import _deterministic, _opt, interleave_files

        chosen = self._chosen(files)
        chunk = chosen[0][1].chunk_rows
        wanted = storage_columns(schema)
        stored = chosen[0][1].columns
        multiple = batch_size % chunk == 0
        skip_partial = multiple and config.drop_remainder
        paths, takes, digests = [], [], []
        for path, _, entry in chosen:
            n = entry.chunks
            if skip_partial and entry.rows % chunk:
                n -= 1  # the last, partial chunk cannot fill a static batch of whole chunks
            if n <= 0:
                continue
            paths.append(path)
            takes.append(n)
            digests.append(
                np.frombuffer(bytes.fromhex("".join(entry.digests[:n])), dtype="=i8").copy()
            )
        if not paths:
            raise SourceError(
                f"columnar files {files[:3]}: no whole chunk of {chunk} rows to read; with "
                "drop_remainder=True and a batch size that is a multiple of the chunk size "
                "the partial last chunk is skipped"
            )
        verify = self.verify
        file_ds = tf.data.Dataset.from_tensor_slices(
            {
                "path": tf.constant(paths),
                "take": tf.constant(takes, tf.int64),
                "digests": tf.RaggedTensor.from_row_lengths(
                    np.concatenate(digests), np.asarray(takes, np.int64)
                ),
            }
        )
        if shuffle_files and len(paths) > 1:
            file_ds = file_ds.shuffle(
                len(paths), seed=config.shuffle_seed, reshuffle_each_iteration=True
            )
        buffer_size = self.buffer_size

        def read(f: dict[str, tf.Tensor]) -> tf.data.Dataset:
            records = tf.data.TFRecordDataset(f["path"], buffer_size=buffer_size).take(f["take"])
            if not verify:
                return records
            meta = tf.data.Dataset.from_tensor_slices(
                {"chunk": tf.range(f["take"]), "digest": f["digests"][: f["take"]]}
            )
            return tf.data.Dataset.zip((records, meta)).map(
                lambda r, m: {
                    "record": r,
                    "path": f["path"],
                    "chunk": m["chunk"],
                    "digest": m["digest"],
                }
            )

        ds = interleave_files(file_ds, read, config)
        if config.cache:
            ds = ds.cache()
        if config.shuffle_buffer:
            chunks = max(1, math.ceil(config.shuffle_buffer / chunk))
            ds = ds.shuffle(chunks, seed=config.shuffle_seed)
        assemble = _assembler(wanted, stored, verify=verify, uniform=skip_partial)
        if multiple:
            ds = ds.batch(batch_size // chunk, drop_remainder=config.drop_remainder)
            finish = assemble
        else:
            # Decode groups of about one batch of chunks, then cut exact batches.
            parallel_map = _opt(config.map_parallelism)
            ds = ds.batch(max(1, batch_size // chunk)).map(
                assemble,
                num_parallel_calls=parallel_map,
                deterministic=_deterministic(config) if parallel_map else None,
            )
            ds = ds.rebatch(batch_size, drop_remainder=config.drop_remainder)

            def finish(raw: Any) -> dict[str, Any]:
                return raw

        if not self.shuffle_rows:
            return ds, finish
        seeds = tf.data.Dataset.random(seed=config.shuffle_seed, rerandomize_each_iteration=True)
        ds = tf.data.Dataset.zip({"batch": ds, "seed": seeds})

        def finish_shuffled(element: dict[str, Any]) -> dict[str, Any]:
            return _shuffle_rows(finish(element["batch"]), element["seed"])

        return ds, finish_shuffled


def _check_schema(m: Manifest, schema: Schema) -> None:
    numeric_ok = {f.source for f in schema.dense} | {lab.source for lab in schema.labels}
    users: dict[str, str] = {}
    for f in schema.features:
        users.setdefault(f.source, f.name)
        if isinstance(f, MultiHot) and f.weights:
            users.setdefault(f.weights, f.name)
    for lab in schema.labels:
        users.setdefault(lab.source, lab.name)
    for wanted in storage_columns(schema):
        found = m.column(wanted.name)
        feature = users.get(wanted.name, wanted.name)
        if found is None:
            import difflib

            names = [c.name for c in m.columns]
            close = difflib.get_close_matches(wanted.name, names, n=3)
            raise SchemaError(
                f"{m.path}: feature {feature!r}: column {wanted.name!r} is not stored; "
                f"columns: {names[:40]}" + (f"; did you mean {close}?" if close else "")
            )
        if not _compatible(found, wanted, wanted.name in numeric_ok):
            raise SchemaError(
                f"{m.path}: feature {feature!r}: column {wanted.name!r} is stored as "
                f"{found.describe()} but the schema reads it as {wanted.describe()}"
            )


def _check_size(path: str, m: Manifest, entry: FileEntry) -> None:
    stat = _stat(path)
    if stat is None:
        raise SourceError(f"{path}: listed in the manifest {m.path} but missing")
    size = stat[1]
    if size == entry.bytes:
        return
    if size < entry.bytes:
        chunk = entry.chunk_at(size)
        first, last = m.chunk_rows_range(entry, chunk)
        raise DataError(
            f"{path}: truncated: {size:,} bytes on disk, the manifest records {entry.bytes:,}; "
            f"chunk {chunk} (rows {first}-{last}, from byte {entry.offsets[chunk]:,}) and "
            f"{entry.chunks - chunk - 1} later chunk(s) are missing or incomplete"
        )
    raise DataError(
        f"{path}: {size:,} bytes on disk but the manifest {m.path} records {entry.bytes:,}; "
        f"the file was rewritten or appended to after its manifest (chunks after "
        f"{entry.chunks - 1} are unknown); convert again"
    )


def _assembler(
    wanted: Sequence[Column], stored: Sequence[Column], *, verify: bool, uniform: bool
) -> Any:
    """The decode function: a batch of ``k`` serialized chunks -> one raw batch.

    ``uniform``: every chunk holds exactly ``chunk_rows`` rows, so fixed-width columns
    decode straight from the ``[k]`` strings without joining them first.
    """
    import tensorflow as tf

    from tfinput.transforms import _guard

    dtypes = {"float32": tf.float32, "int64": tf.int64}
    stored_by_name = {c.name: c for c in stored}
    columns = [stored_by_name[w.name] for w in wanted]  # decode as stored
    spec: dict[str, Any] = {_ROWS: tf.io.FixedLenFeature([], tf.int64)}
    for c in columns:
        if c.dtype == "string":
            spec[c.name] = tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64)
        else:
            spec[c.name] = tf.io.FixedLenFeature([], tf.string)
        if c.layout == "list":
            spec[c.name + _LENGTHS] = tf.io.FixedLenFeature([], tf.string)
    if verify:
        spec[_CHECK] = tf.io.FixedLenFeature([], tf.string)
        spec[_VERSION] = tf.io.FixedLenFeature([], tf.int64)
        all_keys = _payload_keys(stored)
        keys = [k for c in columns for k in c.keys]
        slots = [all_keys.index(k) for k in keys]
        string_keys = {c.name for c in columns if c.dtype == "string"}

    def flat(x: tf.Tensor, dtype: Any, *, same_length: bool) -> tf.Tensor:
        if same_length:  # one decode of the [k] strings, no copy into one string first
            return tf.reshape(tf.io.decode_raw(x, dtype), [-1])
        return tf.io.decode_raw(tf.strings.reduce_join(x), dtype)

    # Scalar fixed-width numeric columns of one dtype decode together: one decode_raw
    # of the stacked [n, k] strings instead of n ops (per-op overhead, not bytes,
    # dominates at ~1M examples/s).
    groups: dict[str, list[Column]] = {}
    if uniform:
        for c in columns:
            if c.dtype != "string" and c.layout == "fixed" and c.width is None:
                groups.setdefault(c.dtype, []).append(c)
    grouped = {c.name for cs in groups.values() for c in cs if len(cs) > 1}

    def assemble(encoded: Any) -> dict[str, Any]:
        records = encoded["record"] if isinstance(encoded, dict) else encoded
        parsed = tf.io.parse_example(records, spec)
        raw: dict[str, Any] = {}
        for dtype, cs in groups.items():
            if len(cs) > 1:
                stacked = tf.stack([parsed[c.name] for c in cs])  # [n, k]
                decoded = tf.reshape(tf.io.decode_raw(stacked, dtypes[dtype]), [len(cs), -1])
                raw.update(zip((c.name for c in cs), tf.unstack(decoded)))
        for c in columns:
            if c.name in grouped:
                continue
            value = parsed[c.name]
            if c.dtype == "string":
                values = value.flat_values
            else:
                values = flat(value, dtypes[c.dtype], same_length=uniform and c.layout == "fixed")
            if c.layout == "list":
                lengths = flat(parsed[c.name + _LENGTHS], tf.int32, same_length=uniform)
                raw[c.name] = tf.RaggedTensor.from_row_lengths(
                    values, tf.cast(lengths, tf.int64), validate=False
                )
            elif c.width is not None:
                raw[c.name] = tf.reshape(values, [-1, c.width])
            else:
                raw[c.name] = values
        if verify:
            _verify(encoded, parsed)
        return raw

    def _verify(encoded: dict[str, tf.Tensor], parsed: dict[str, Any]) -> None:
        k = tf.shape(parsed[_CHECK])[0]
        stored_check = tf.reshape(tf.io.decode_raw(parsed[_CHECK], tf.uint8), [k, -1, 8])
        expected = tf.gather(stored_check, slots, axis=1)  # [k, keys, 8]
        # One fingerprint op over every payload string ([keys, k] -> [keys * k, 8]).
        payloads = []
        for key in keys:
            value = parsed[key]
            if key in string_keys:
                value = tf.strings.reduce_join(value, axis=1)
            payloads.append(value)
        prints = tf.fingerprint(tf.reshape(tf.stack(payloads), [-1]))
        computed = tf.transpose(tf.reshape(prints, [len(keys), k, 8]), [1, 0, 2])
        same = tf.reduce_all(tf.equal(computed, expected), axis=2)  # [k, keys]
        digest = tf.bitcast(tf.fingerprint(parsed[_CHECK]), tf.int64)
        version_ok = tf.equal(parsed[_VERSION], FORMAT_VERSION)
        digest_ok = tf.equal(digest, encoded["digest"])
        chunk_ok = tf.reduce_all(same, axis=1) & version_ok & digest_ok
        names = tf.constant([k.replace(_LENGTHS, " (row lengths)") for k in keys])

        def explain() -> tf.Tensor:
            i = tf.argmin(tf.cast(chunk_ok, tf.int32))
            column = names[tf.argmin(tf.cast(same[i], tf.int32))]
            reason = tf.where(
                tf.logical_not(version_ok[i]),
                tf.strings.join(
                    [
                        "format version ",
                        tf.strings.as_string(parsed[_VERSION][i]),
                        f", this tfinput reads {FORMAT_VERSION}",
                    ]
                ),
                tf.where(
                    tf.reduce_all(same[i]),
                    tf.constant(
                        "its checksums do not match the manifest digest: the file was "
                        "replaced or rewritten after manifest.json was written"
                    ),
                    tf.strings.join(
                        [
                            "column '",
                            column,
                            "' does not match its checksum: the chunk is corrupt",
                        ]
                    ),
                ),
            )
            return tf.strings.join(
                [
                    encoded["path"][i],
                    ": chunk ",
                    tf.strings.as_string(encoded["chunk"][i]),
                    ": ",
                    reason,
                ]
            )

        _guard(tf.reduce_all(chunk_ok), explain)

    return assemble


def _shuffle_rows(raw: dict[str, Any], seed: Any) -> dict[str, Any]:
    import tensorflow as tf

    first = next(iter(raw.values()))
    n = first.nrows() if isinstance(first, tf.RaggedTensor) else tf.shape(first)[0]
    perm = tf.random.experimental.stateless_shuffle(
        tf.range(tf.cast(n, tf.int64)), seed=tf.stack([seed, tf.constant(0, tf.int64)])
    )
    return {k: tf.gather(v, perm) for k, v in raw.items()}


# ---------------------------------------------------------------- factory
def columnar(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    schema: Schema | None = None,
    *,
    verify: bool = True,
    shuffle_rows: bool = False,
    buffer_size: int | None = None,
) -> Any:
    """A pipeline over columnar pre-batched records (see `tfinput.columnar_records`).

    Args:
      paths: A data set directory (or its ``manifest.json``), data files, globs, or a
        list of them.
      schema: The schema to read with; default: the manifest's. Any schema whose
        columns are stored with the same layout works (tables, ``max_len``, clipping
        and the like may differ; numeric dense/label columns may change dtype).
      verify: Verify chunk checksums while reading (see `ColumnarSource`).
      shuffle_rows: Shuffle rows within each batch.
      buffer_size: Read buffer per open file, bytes.

    Returns:
      A `tfinput.Pipeline`.

    Raises:
      SourceError: no manifest, or a manifest of another format version.
    """
    from tfinput.pipeline import Pipeline, _paths

    source = ColumnarSource(
        paths=_paths(paths), verify=verify, shuffle_rows=shuffle_rows, buffer_size=buffer_size
    )
    if schema is None:
        schema = source.manifest().schema
    return Pipeline(source=source, schema=schema)


# ------------------------------------------------------------------ verify
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
      paths: As for `columnar`.

    Returns:
      The problems found, empty if the data set is intact.
    """
    import tensorflow as tf

    from tfinput.pipeline import _paths

    source = ColumnarSource(paths=_paths(paths))
    problems: list[ChunkProblem] = []
    for path, m, entry in source.resolve():
        try:
            _check_size(path, m, entry)
        except DataError as e:
            chunk = entry.chunk_at(_stat(path)[1]) if _stat(path) else 0
            problems.append(ChunkProblem(path=path, chunk=chunk, reason=str(e)))
            continue
        keys = _payload_keys(m.columns)
        strings = {c.name for c in m.columns if c.dtype == "string"}
        index = 0
        offset = 0
        try:
            for record in tf.data.TFRecordDataset(path):
                reason = _verify_record(record.numpy(), m, entry, index, offset, keys, strings)
                if reason:
                    problems.append(ChunkProblem(path=path, chunk=index, reason=reason))
                offset += len(record.numpy()) + _FRAME
                index += 1
        except tf.errors.OpError as e:
            problems.append(
                ChunkProblem(
                    path=path,
                    chunk=entry.chunk_at(offset) if index < entry.chunks else index,
                    reason=source.explain_error(path, getattr(e, "message", str(e))),
                )
            )
            continue
        if index != entry.chunks:
            problems.append(
                ChunkProblem(
                    path=path,
                    chunk=index,
                    reason=f"{index} chunk(s) in the file, {entry.chunks} in the manifest",
                )
            )
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
    import tensorflow as tf
    from tensorflow.core.example import example_pb2

    if index >= entry.chunks:
        return f"extra record beyond the manifest's {entry.chunks} chunk(s)"
    if entry.offsets[index] != offset:
        return f"record at byte {offset}, the manifest says {entry.offsets[index]}"
    try:
        fmap = example_pb2.Example.FromString(data).features.feature
    except Exception as e:  # protobuf's DecodeError has no stable import path
        return f"not a columnar record ({e})"
    version = list(fmap[_VERSION].int64_list.value) if _VERSION in fmap else []
    if version != [FORMAT_VERSION]:
        return f"format version {version}, this tfinput reads {FORMAT_VERSION}"
    rows = list(fmap[_ROWS].int64_list.value)
    want_rows = m.chunk_rows_range(entry, index)
    if rows != [want_rows[1] - want_rows[0] + 1]:
        return f"{rows} rows, the manifest implies {want_rows[1] - want_rows[0] + 1}"
    check = fmap[_CHECK].bytes_list.value[0] if _CHECK in fmap else b""
    if len(check) != 8 * len(keys):
        return f"checksum block of {len(check)} bytes, expected {8 * len(keys)}"
    missing = [k for k in keys if k not in fmap]
    if missing:
        return f"missing column(s) {missing}"
    payload = [
        b"".join(fmap[k].bytes_list.value) if k in strings else fmap[k].bytes_list.value[0]
        for k in keys
    ]
    computed = tf.fingerprint(tf.constant(payload, dtype=tf.string)).numpy().tobytes()
    for i, k in enumerate(keys):
        if computed[8 * i : 8 * i + 8] != check[8 * i : 8 * i + 8]:
            return f"column {k!r} does not match its checksum: the chunk is corrupt"
    digest = tf.fingerprint(tf.constant([check])).numpy()[0].tobytes().hex()
    if digest != entry.digests[index]:
        return "its checksums do not match the manifest digest (file replaced or rewritten)"
    return None
