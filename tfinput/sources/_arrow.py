"""pyarrow side of the Parquet source: column types, footers, and the generator of
exact batches (`ParquetBatches`).

A batch from `ParquetBatches` is a dict of numpy arrays keyed by column: scalar and
fixed-length columns under their name, each list column ``c`` as two arrays,
``c + LIST_VALUES`` (the flat values) and ``c + LIST_LENGTHS`` (the row lengths), which
`tfinput.sources.parquet.ParquetSource` turns back into ragged tensors.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from tfinput.config import AUTOTUNE, PipelineConfig
from tfinput.errors import DataError
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema
from tfinput.sources._text import first_line

__all__ = [
    "LIST_VALUES",
    "LIST_LENGTHS",
    "ParquetBatches",
    "expected_arrow",
    "parquet_columns",
    "parquet_signature",
    "reads_as",
]

#: Key suffix of a list column's flat values in a `ParquetBatches` batch.
LIST_VALUES = "/values"
#: Key suffix of a list column's row lengths in a `ParquetBatches` batch.
LIST_LENGTHS = "/lengths"


def _arrow_kind(t: Any) -> str:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float"
    if pa.types.is_boolean(t):
        return "bool"
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or (pa.types.is_large_binary(t))
    ):
        return "string"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return "list<" + _arrow_kind(t.value_type) + ">"
    return str(t)


def expected_arrow(f: Dense | Categorical | MultiHot | Label) -> tuple[str, ...]:
    if isinstance(f, Dense):
        return ("int", "float", "bool") if f.length is None else ("list<int>", "list<float>")
    if isinstance(f, Label):
        return ("int", "float", "bool")
    base = "int" if f.dtype == "int64" else "string"
    return (base,) if isinstance(f, Categorical) else (f"list<{base}>",)


@functools.lru_cache(maxsize=4096)
def parquet_columns(path: str, mtime_ns: int | None, size: int | None) -> dict[str, tuple]:
    """``{column: (kind, arrow type)}`` from a Parquet footer, cached per file version
    (the tuner and bench build the same pipeline many times)."""
    import pyarrow.parquet as pq

    del mtime_ns, size  # part of the cache key only
    try:
        arrow_schema = pq.read_schema(path)
    except Exception as e:  # pyarrow raises ArrowInvalid/OSError variants
        raise DataError(f"{path}: not a readable Parquet file ({first_line(e)})") from e
    return {
        field.name: (_arrow_kind(field.type), str(field.type), _arrow_type_key(field.type))
        for field in arrow_schema
    }


_INT_BITS = {f"{u}int{n}": (u == "u", n) for u in ("", "u") for n in (8, 16, 32, 64)}
_FLOAT_BITS = {"halffloat": 16, "float": 32, "double": 64}


def reads_as(later: str, first: str) -> bool:
    """Whether every value of Arrow type ``later`` converts exactly (or, for ints read
    as floats, as pyarrow always has) into type ``first`` (type keys)."""
    if later == first:
        return True
    if later.startswith("list<") and first.startswith("list<"):
        return reads_as(later[5:-1], first[5:-1])
    if first in _FLOAT_BITS:
        if later in _FLOAT_BITS:
            return _FLOAT_BITS[later] <= _FLOAT_BITS[first]
        return later in _INT_BITS or later == "bool"
    if first in _INT_BITS and later in _INT_BITS:
        (l_unsigned, l_bits), (f_unsigned, f_bits) = _INT_BITS[later], _INT_BITS[first]
        if l_unsigned == f_unsigned:
            return l_bits <= f_bits
        return l_unsigned and l_bits < f_bits  # uintN fits in a wider signed int
    return later == "bool" and first in _INT_BITS


def _arrow_type_key(t: Any) -> str:
    """An Arrow type without the names of list item fields and dictionary encoding, so
    files that store the same values compare equal whoever wrote them."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return _arrow_type_key(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return f"list<{_arrow_type_key(t.value_type)}>"
    return str(t)


def parquet_signature(schema: Schema) -> dict[str, tf.TensorSpec]:
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


@dataclasses.dataclass
class ParquetBatches:
    """Generator factory: exact batches of ``batch_size`` rows across file boundaries."""

    files: list[str]
    schema: Schema
    config: PipelineConfig
    batch_size: int
    shuffle_files: bool
    epoch: int = 0

    def __call__(self) -> Iterator[dict[str, np.ndarray]]:
        import pyarrow as pa
        import pyarrow.dataset as pads

        cfg = self.config
        seed = cfg.shuffle_seed
        rng = np.random.default_rng(None if seed is None else seed + self.epoch)
        self.epoch += 1
        files = list(self.files)
        if self.shuffle_files:
            rng.shuffle(files)
        readahead = 4 if cfg.interleave_cycle_length == AUTOTUNE else cfg.interleave_cycle_length
        columns = self.schema.columns()
        dataset = pads.dataset(files, format="parquet")
        scanner = dataset.scanner(
            columns=columns,
            batch_size=max(self.batch_size, 1 << 14),
            use_threads=cfg.interleave_parallelism != 1,
            fragment_readahead=readahead,
            batch_readahead=max(readahead * 4, 4),
        )
        window = max(self.batch_size, cfg.shuffle_buffer)
        pending: list[pa.RecordBatch] = []
        rows = 0
        for tagged in scanner.scan_batches():
            rb = tagged.record_batch
            if rb.num_rows == 0:
                continue
            rb = _fill_nulls(rb, self.schema, tagged.fragment.path)
            pending.append(rb)
            rows += rb.num_rows
            if rows < window:
                continue
            table = pa.Table.from_batches(pending)
            if cfg.shuffle_buffer:
                table = table.take(rng.permutation(table.num_rows))
            full = (table.num_rows // self.batch_size) * self.batch_size
            for start in range(0, full, self.batch_size):
                yield _columns(table.slice(start, self.batch_size), self.schema)
            rest = table.slice(full)
            pending, rows = rest.to_batches(), rest.num_rows
        if rows:
            table = pa.Table.from_batches(pending)
            if cfg.shuffle_buffer:
                table = table.take(rng.permutation(table.num_rows))
            for start in range(0, table.num_rows, self.batch_size):
                chunk = table.slice(start, self.batch_size)
                if chunk.num_rows == self.batch_size or not cfg.drop_remainder:
                    yield _columns(chunk, self.schema)


def _fill_nulls(rb: Any, schema: Schema, path: str) -> Any:
    """Replace nulls by defaults; a null in a required column is a DataError."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lists = [f.source for f in schema.dense if f.length is not None]
    for f in schema.multi_hot:
        lists += [f.source, f.weights] if f.weights else [f.source]
    for name in lists:  # a null *inside* a list has no default: say so, naming the file
        inner = pc.list_flatten(rb.column(name)).null_count
        if inner:
            raise DataError(
                f"{path}: column {name!r}: {inner} null value(s) inside lists; nulls inside "
                "a list have no default (a null list is an empty list); fix the data"
            )
    if not any(col.null_count for col in rb.columns):
        return rb
    arrays = dict(zip(rb.schema.names, rb.columns))
    defaults: dict[str, Any] = {}
    for f in schema.features:
        if isinstance(f, MultiHot):
            defaults[f.source] = "empty"
            if f.weights:
                defaults[f.weights] = "empty"
        elif isinstance(f, Dense):
            defaults[f.source] = [f.default] * f.length if f.length else f.default
        else:
            defaults[f.source] = f.default
    for lab in schema.labels:
        defaults[lab.source] = lab.default
    for name, arr in arrays.items():
        if not arr.null_count:
            continue
        default = defaults.get(name)
        if default is None:
            raise DataError(
                f"{path}: column {name!r}: {arr.null_count} null value(s) but the schema gives "
                "no default for it; add a default or fix the data"
            )
        if default == "empty":
            # A null list is an empty list: keep the offsets, drop the validity bitmap.
            arrays[name] = pc.if_else(pc.is_null(arr), pa.scalar([], arr.type), arr)
        elif isinstance(default, list):  # a null vector is the default vector
            fill = pa.scalar(default, pa.list_(pa.float64())).cast(arr.type, safe=False)
            arrays[name] = pc.if_else(pc.is_null(arr), fill, arr)
        else:
            arrays[name] = pc.fill_null(arr, pa.scalar(default).cast(arr.type))
    return pa.RecordBatch.from_arrays(list(arrays.values()), names=list(arrays))


def _columns(table: Any, schema: Schema) -> dict[str, np.ndarray]:
    import pyarrow as pa
    import pyarrow.compute as pc

    out: dict[str, np.ndarray] = {}

    def numeric(col: Any, dtype: Any) -> np.ndarray:
        return col.cast(dtype).to_numpy() if col.type != dtype else col.to_numpy()

    def listed(col: Any, key: str, dtype: Any) -> None:
        values = pc.list_flatten(col)
        if dtype == pa.string():
            out[key + LIST_VALUES] = values.cast(pa.binary()).to_numpy(zero_copy_only=False)
        else:
            out[key + LIST_VALUES] = numeric(values, dtype)
        out[key + LIST_LENGTHS] = pc.list_value_length(col).to_numpy().astype(np.int64)

    for f in schema.features:
        col = table.column(f.source)
        if isinstance(f, Dense):
            if f.length is None:
                out[f.source] = numeric(col, pa.float32())
            else:
                lengths = pc.list_value_length(col).to_numpy()
                if (lengths != f.length).any():
                    bad = int(np.flatnonzero(lengths != f.length)[0])
                    raise DataError(
                        f"feature {f.name!r}: expected vectors of length {f.length}, found a "
                        f"row of length {int(lengths[bad])}"
                    )
                values = numeric(pc.list_flatten(col), pa.float32())
                out[f.source] = values.reshape(-1, f.length)
        elif isinstance(f, Categorical):
            if f.dtype == "int64":
                out[f.source] = numeric(col, pa.int64())
            else:
                out[f.source] = col.cast(pa.binary()).to_numpy(zero_copy_only=False)
        else:
            listed(col, f.source, pa.int64() if f.dtype == "int64" else pa.string())
            if f.weights:
                listed(table.column(f.weights), f.weights, pa.float32())
    for lab in schema.labels:
        out[lab.source] = numeric(table.column(lab.source), pa.float32())
    return out
