"""Synthetic Criteo-like data in a few lines, for tests, examples and benchmarks.

    from tfinput import testing
    schema = testing.criteo_like_schema()
    files = testing.write_tfrecord(tmp_path, schema, rows=10_000, files=4)
    pipeline = tfinput.tfrecord(files, schema)

The data follow the schema: dense features are non-negative counts (log-normal),
categorical ids are Zipf-distributed (a few ids are very common, as in real click
logs), multi-hot lists have 0 to ``max_len - 1`` ids (so empty lists occur), string
features are 8-hex-digit tokens like Criteo's, labels are clicks (about 25% positive).
Everything is generated column by column with numpy from one seed: the same arguments
always write the same bytes.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from tfinput._src.core.schema import Categorical, Dense, Label, MultiHot, Schema, Table


def criteo_like_schema(
    *,
    n_dense: int = 13,
    n_categorical: int = 26,
    n_multi_hot: int = 4,
    n_string: int = 0,
    vocabulary_size: int = 100_000,
    dim: int = 16,
    max_len: int = 20,
    weights: bool = False,
    row_id: bool = False,
) -> Schema:
    """The Criteo-like benchmark schema: 13 dense, 26 single ids, 4 multi-hot lists.

    Args:
      n_dense, n_categorical, n_multi_hot, n_string: Feature counts. String features
        are single-valued and hashed.
      vocabulary_size: Rows of every table.
      dim: Embedding dimension.
      max_len: Multi-hot ``max_len`` (lists hold 0 to ``max_len - 1`` ids).
      weights: Give multi-hot features a weights column.
      row_id: Add a dense feature ``row_id`` holding the row number (for tests that
        check every example is delivered exactly once).
    """
    features: list[Any] = []
    tables: list[Table] = []
    if row_id:
        features.append(Dense(name="row_id", dtype="int64"))
    for i in range(n_dense):
        features.append(Dense(name=f"I{i + 1}", clip=(0.0, None), log1p=True))
    for i in range(n_categorical):
        name = f"C{i + 1}"
        tables.append(Table(name=name, vocabulary_size=vocabulary_size, dim=dim))
        features.append(Categorical(name=name, table=name))
    for i in range(n_string):
        name = f"S{i + 1}"
        tables.append(Table(name=name, vocabulary_size=vocabulary_size, dim=dim))
        features.append(Categorical(name=name, table=name, dtype="string", default=""))
    for i in range(n_multi_hot):
        name = f"M{i + 1}"
        tables.append(Table(name=name, vocabulary_size=vocabulary_size, dim=dim, combiner="sum"))
        features.append(
            MultiHot(
                name=name, table=name, max_len=max_len, weights=f"{name}_w" if weights else None
            )
        )
    return Schema(features=tuple(features), tables=tuple(tables), labels=(Label(name="label"),))


def small_schema(*, row_id: bool = True) -> Schema:
    """A compact schema with every feature kind: a dense scalar and vector, int and
    string categoricals, int and string multi-hot lists (one weighted), two features
    sharing a table, and a label."""
    tables = (
        Table(name="items", vocabulary_size=1000, dim=8, combiner="mean"),
        Table(name="user", vocabulary_size=500, dim=8),
        Table(name="tokens", vocabulary_size=2048, dim=4, combiner="sqrtn"),
    )
    features: list[Any] = [Dense(name="row_id", dtype="int64")] if row_id else []
    features += [
        Dense(name="price", clip=(0.0, None), log1p=True),
        Dense(name="embedding", length=3, default=0.5),
        Categorical(name="user_id", table="user"),
        Categorical(name="country", table="tokens", dtype="string", default=""),
        Categorical(name="last_item", table="items"),
        MultiHot(name="history", table="items", max_len=5, weights="history_w"),
        MultiHot(name="tags", table="tokens", max_len=4, dtype="string"),
    ]
    return Schema(features=tuple(features), tables=tables, labels=(Label(name="label"),))


@dataclasses.dataclass(frozen=True)
class Columns:
    """Generated data, column by column: ``values[col]`` is a numpy array (object
    array of bytes for strings); list columns also have ``lengths[col]`` (row lengths),
    their ``values[col]`` holding the flat values."""

    rows: int
    values: dict[str, np.ndarray]
    lengths: dict[str, np.ndarray]

    def row_slice(self, start: int, stop: int) -> Columns:
        vals: dict[str, np.ndarray] = {}
        lens: dict[str, np.ndarray] = {}
        for col, v in self.values.items():
            if col in self.lengths:
                offsets = self.offsets(col)
                vals[col] = v[offsets[start] : offsets[stop]]
                lens[col] = self.lengths[col][start:stop]
            else:
                vals[col] = v[start:stop]
        return Columns(rows=stop - start, values=vals, lengths=lens)

    def offsets(self, col: str) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths[col])]).astype(np.int64)


def _zipf_ids(rng: np.random.Generator, n: int, vocab: int, a: float = 1.2) -> np.ndarray:
    return (rng.zipf(a, n).astype(np.int64) - 1) % vocab


def _hex_tokens(ids: np.ndarray) -> np.ndarray:
    # Criteo's categorical values are 8 hex digits; spread the ids over that space.
    mixed = (ids.astype(np.uint64) * np.uint64(2654435761)) % np.uint64(2**32)
    return np.array([f"{int(x):08x}".encode() for x in mixed], dtype=object)


def generate(
    schema: Schema, rows: int, *, seed: int = 0, max_list_len: int | None = None
) -> Columns:
    """Generate ``rows`` rows for any schema, deterministically from ``seed``.

    Args:
      schema: What to generate.
      rows: Number of rows.
      seed: Random seed.
      max_list_len: Lists get 0 to ``max_list_len - 1`` values; by default each
        multi-hot feature's ``max_len`` (so nothing is truncated). Set it higher to
        produce lists that the pipeline must truncate.
    """
    rng = np.random.default_rng(seed)
    tables = {t.name: t for t in schema.tables}
    values: dict[str, np.ndarray] = {}
    lengths: dict[str, np.ndarray] = {}
    for f in schema.features:
        if isinstance(f, Dense):
            if f.name == "row_id":
                values[f.source] = np.arange(rows, dtype=np.int64)
                continue
            shape = (rows,) if f.length is None else (rows, f.length)
            x = np.floor(rng.lognormal(1.0, 1.5, shape))
            values[f.source] = x.astype(np.int64 if f.dtype == "int64" else np.float32)
        elif isinstance(f, Categorical):
            ids = _zipf_ids(rng, rows, tables[f.table].vocabulary_size)
            values[f.source] = _hex_tokens(ids) if f.dtype == "string" else ids
        elif isinstance(f, MultiHot):
            lens = rng.integers(0, max_list_len or f.max_len, rows).astype(np.int64)
            ids = _zipf_ids(rng, int(lens.sum()), tables[f.table].vocabulary_size)
            values[f.source] = _hex_tokens(ids) if f.dtype == "string" else ids
            lengths[f.source] = lens
            if f.weights:
                values[f.weights] = rng.uniform(0.1, 1.0, ids.shape[0]).astype(np.float32)
                lengths[f.weights] = lens
    for lab in schema.labels:
        clicks = (rng.random(rows) < 0.25).astype(np.int64)
        values[lab.source] = clicks if lab.dtype == "int64" else clicks.astype(np.float32)
    return Columns(rows=rows, values=values, lengths=lengths)


def _split(rows: int, files: int) -> list[tuple[int, int]]:
    bounds = np.linspace(0, rows, files + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def _paths(directory: str | os.PathLike[str], prefix: str, files: int, ext: str) -> list[str]:
    Path(directory).mkdir(parents=True, exist_ok=True)
    return [os.path.join(directory, f"{prefix}-{i:05d}-of-{files:05d}{ext}") for i in range(files)]


def wire_columns(cols: Columns) -> list[Any]:
    """The columns as `tfinput._src.core.formats.tfrecord.WireColumn`s, in column order: integer
    arrays become Int64Lists, object arrays of bytes BytesLists, anything else
    FloatLists; 2-D arrays are fixed-length lists and list columns keep their lengths."""
    from tfinput._src.core.formats.tfrecord import WireColumn, bytes_column

    out = []
    for col, v in cols.values.items():
        lengths = cols.lengths.get(col)
        if v.dtype.kind == "O":
            out.append(bytes_column(col, v, row_lengths=lengths))
        else:
            kind = "int64" if v.dtype.kind in "iu" else "float"
            out.append(WireColumn(key=col, kind=kind, values=v, row_lengths=lengths))
    return out


def to_examples(cols: Columns, schema: Schema | None = None) -> list[bytes]:
    """Serialize rows as ``tf.train.Example`` records, vectorized with numpy.

    Writes the protobuf wire format column by column (see `tfinput._src.core.formats.tfrecord.encode_examples`),
    much faster than building one protobuf message per row; `tf.io.parse_example`
    parses the result exactly as it parses protobuf's own serialization.

    Args:
      cols: The rows (see `generate`).
      schema: Unused; kept for compatibility (the columns carry their own types).

    Returns:
      One serialized ``tf.train.Example`` per row.
    """
    from tfinput._src.core.formats.tfrecord import encode_examples

    return encode_examples(wire_columns(cols), cols.rows)


def _to_examples_protobuf(cols: Columns, schema: Schema | None = None) -> list[bytes]:
    """Reference encoder: one ``tf.train.Example`` built per row with the protobuf API
    (tens of microseconds per row). `to_examples` must parse identically."""
    from tensorflow.core.example import example_pb2

    list_cols = set(cols.lengths)
    # Each column's tf.Example list, floats first, then ints, then bytes.
    fields = {"f": "float_list", "i": "int64_list", "u": "int64_list", "O": "bytes_list"}
    order = {"float_list": 0, "int64_list": 1, "bytes_list": 2}
    columns = sorted(
        ((col, fields.get(v.dtype.kind, "float_list")) for col, v in cols.values.items()),
        key=lambda c: order[c[1]],
    )
    offsets = {c: cols.offsets(c) for c in list_cols}
    values = {c: cols.values[c].tolist() for c in cols.values}
    out = []
    for r in range(cols.rows):
        ex = example_pb2.Example()
        fmap = ex.features.feature
        for col, field in columns:
            v = values[col]
            if col in list_cols:
                row = v[offsets[col][r] : offsets[col][r + 1]]
            else:  # a scalar, or a fixed-length dense feature's list
                row = v[r] if isinstance(v[r], list) else [v[r]]
            getattr(fmap[col], field).value.extend(row)
        out.append(ex.SerializeToString())
    return out


def write_tfrecord(
    directory: str | os.PathLike[str],
    schema: Schema,
    *,
    rows: int,
    files: int = 1,
    seed: int = 0,
    compression: str | None = None,
    columns: Columns | None = None,
    prefix: str = "part",
) -> list[str]:
    """Write ``rows`` generated rows as TFRecord files of ``tf.train.Example``.

    Args:
      directory: Output directory (created).
      schema: What to generate.
      rows: Total rows, split evenly over ``files``.
      files: Number of files.
      seed: Random seed.
      compression: None, ``"GZIP"`` or ``"ZLIB"`` (file names get ``.gz`` / ``.zz``).
      columns: Write these columns instead of generating (see `generate`).
      prefix: File name prefix.

    Returns:
      The file paths, in order.
    """
    from tfinput._src.core.formats import tfrecord

    cols = columns or generate(schema, rows, seed=seed)
    ext = {None: ".tfrecord", "GZIP": ".tfrecord.gz", "ZLIB": ".tfrecord.zz"}[compression]
    paths = _paths(directory, prefix, files, ext)
    for path, (a, b) in zip(paths, _split(cols.rows, files)):
        tfrecord.write_records(path, to_examples(cols.row_slice(a, b), schema), compression)
    return paths


def to_arrow(cols: Columns) -> Any:
    """The columns as a `pyarrow.Table` (lists as ``list<...>`` columns)."""
    import pyarrow as pa

    arrays = {}
    for col, v in cols.values.items():
        if col in cols.lengths:
            values = pa.array(v, type=pa.string() if v.dtype.kind == "O" else None)
            arrays[col] = pa.ListArray.from_arrays(
                pa.array(cols.offsets(col).astype(np.int32)), values
            )
        elif v.dtype.kind == "O":
            arrays[col] = pa.array(v, type=pa.string())
        elif v.ndim == 2:
            arrays[col] = pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), v.shape[1])
        else:
            arrays[col] = pa.array(v)
    return pa.table(arrays)


def write_parquet(
    directory: str | os.PathLike[str],
    schema: Schema,
    *,
    rows: int,
    files: int = 1,
    seed: int = 0,
    row_group_size: int = 64 * 1024,
    columns: Columns | None = None,
    prefix: str = "part",
) -> list[str]:
    """Write ``rows`` generated rows as Parquet files (same rows as `write_tfrecord`
    with the same seed). Arguments as in `write_tfrecord`."""
    from tfinput._src.core.formats import parquet

    cols = columns or generate(schema, rows, seed=seed)
    paths = _paths(directory, prefix, files, ".parquet")
    for path, (a, b) in zip(paths, _split(cols.rows, files)):
        parquet.write_table(to_arrow(cols.row_slice(a, b)), path, row_group_size=row_group_size)
    return paths


def write_columnar(
    directory: str | os.PathLike[str],
    schema: Schema,
    *,
    rows: int,
    files: int = 1,
    seed: int = 0,
    chunk_rows: int = 1024,
    columns: Columns | None = None,
    prefix: str = "part",
) -> list[str]:
    """Write ``rows`` generated rows as columnar pre-batched records plus their
    ``manifest.json`` (same rows, same order as `write_tfrecord` with the same seed).

    Files hold whole chunks (``ceil(rows / files)`` rounded up to ``chunk_rows``), so
    fewer than ``files`` files are written when chunks are large. Other arguments as
    in `write_tfrecord`.

    Returns:
      The data file paths, in order.
    """
    from tfinput._src.core.columnar.writer import ColumnarWriter

    cols = columns or generate(schema, rows, seed=seed)
    per_file = max(1, -(-cols.rows // files))
    with ColumnarWriter(
        directory, schema, chunk_rows=chunk_rows, rows_per_file=per_file, prefix=prefix
    ) as writer:
        writer.write(to_arrow(cols))
    assert writer.manifest is not None
    return writer.manifest.paths
