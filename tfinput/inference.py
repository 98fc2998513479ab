"""Schema inference from Parquet/Arrow schemas and from sampled tf.train.Example records.

    result = tfinput.infer_schema("data/*.parquet")
    print(result.table())            # what was observed, column by column
    result.schema.to_json("schema.json")

Rules (the JSON is meant to be reviewed and edited):

- float scalars → `Dense`; fixed-length float lists → `Dense` vectors;
- integer scalars → `Categorical` when the name looks like an id (``id``, ``*_id``,
  ``*Id``, ``C<n>``), else `Dense` stored as int64 (counts); a column named like a
  target (``label``, ``click``, ``target``, ``y``…) → `Label`;
- strings → hashed string `Categorical`;
- variable-length int or string lists → `MultiHot` with ``max_len`` = observed p99
  length; a float list whose row lengths always equal another list's → its weights;
- integer-id tables get ``vocabulary_size`` = observed max id + 1 (a sample: check it);
  hashed tables get ``4 × distinct values seen``, rounded up to a power of two;
- embedding dim = ``6 · rows^¼`` rounded to a multiple of 4, within [4, 128].
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfinput.errors import DataError, SchemaError, SourceError
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema, Table

__all__ = ["infer_schema", "Inference", "ColumnStats"]

_LABEL_NAMES = re.compile(
    r"^(label|labels|click|clicked|target|y|rating|is_click|conversion)$", re.I
)
_ID_NAMES = re.compile(r"(^id$|_id$|Id$|ID$|^c\d+$|^cat)", re.I)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColumnStats:
    """What sampling saw in one column."""

    name: str
    dtype: str  # "int64" | "float32" | "string"
    is_list: bool
    rows: int
    missing: int
    length_p50: float | None = None
    length_p90: float | None = None
    length_p99: float | None = None
    length_max: int | None = None
    min_value: float | None = None
    max_value: float | None = None
    distinct: int | None = None
    kind: str = ""  # the kind chosen
    note: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Inference:
    """The inferred schema plus the statistics it was inferred from."""

    schema: Schema
    columns: tuple[ColumnStats, ...]
    files: tuple[str, ...]
    sampled_rows: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": list(self.files),
            "sampled_rows": self.sampled_rows,
            "columns": [dataclasses.asdict(c) for c in self.columns],
            "schema": self.schema.to_dict(),
        }


def _dim(rows: int) -> int:
    return int(min(128, max(4, 4 * round(6 * rows**0.25 / 4))))


def _pow2(n: int) -> int:
    return 1 << max(10, math.ceil(math.log2(max(n, 1))))


@dataclasses.dataclass
class _Col:
    """Sampled values of one column: flat values plus per-row lengths (-1 = missing)."""

    name: str
    dtype: str
    is_list: bool
    values: list[np.ndarray] = dataclasses.field(default_factory=list)
    lengths: list[np.ndarray] = dataclasses.field(default_factory=list)

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        values = np.concatenate(self.values) if self.values else np.array([])
        lengths = np.concatenate(self.lengths) if self.lengths else np.array([], np.int64)
        return values, lengths


def infer_schema(
    paths: Any,
    *,
    sample_rows: int = 10_000,
    labels: Sequence[str] | None = None,
    format: str | None = None,
) -> Inference:
    """Infer a schema from Parquet or TFRecord files.

    Args:
      paths: Files, globs or directories.
      sample_rows: Rows sampled from the first files.
      labels: Column names to treat as labels (default: by name, see module doc).
      format: ``parquet`` or ``tfrecord``; by default from the file extension
        (``.parquet``/``.pq`` is Parquet, anything else is tried as TFRecord).

    Raises:
      SourceError: no files; SchemaError: nothing usable found.
    """
    from tfinput.sources import resolve_paths

    files = resolve_paths(paths, what="input")
    fmt = format or (
        "parquet" if files[0].lower().endswith((".parquet", ".pq", ".parq")) else "tfrecord"
    )
    if fmt == "parquet":
        cols, rows = _sample_parquet(files, sample_rows)
    elif fmt == "tfrecord":
        cols, rows = _sample_tfrecord(files, sample_rows)
    else:
        raise SourceError(f"format: expected 'parquet' or 'tfrecord', got {format!r}")
    if rows == 0:
        raise SchemaError(f"no records found in {len(files)} file(s), first {files[0]!r}")
    return _decide(cols, rows, files, set(labels) if labels is not None else None)


def _sample_parquet(files: list[str], limit: int) -> tuple[list[_Col], int]:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    cols: dict[str, _Col] = {}
    rows = 0
    for path in files:
        try:
            pf = pq.ParquetFile(path)
        except Exception as e:
            raise DataError(f"{path}: not a readable Parquet file ({e})") from e
        for rb in pf.iter_batches(batch_size=min(limit, 65536)):
            take = min(rb.num_rows, limit - rows)
            rb = rb.slice(0, take)
            for name, arr in zip(rb.schema.names, rb.columns):
                t = arr.type
                if pa.types.is_dictionary(t):
                    arr = arr.dictionary_decode()
                    t = arr.type
                is_list = (
                    pa.types.is_list(t)
                    or pa.types.is_large_list(t)
                    or (pa.types.is_fixed_size_list(t))
                )
                vt = t.value_type if is_list else t
                if pa.types.is_dictionary(vt):
                    vt = vt.value_type
                if pa.types.is_integer(vt) or pa.types.is_boolean(vt):
                    dtype = "int64"
                elif pa.types.is_floating(vt) or pa.types.is_decimal(vt):
                    dtype = "float32"
                elif (
                    pa.types.is_string(vt)
                    or pa.types.is_large_string(vt)
                    or (pa.types.is_binary(vt) or pa.types.is_large_binary(vt))
                ):
                    dtype = "string"
                else:
                    continue  # timestamps, structs...: not a feature kind tfinput reads
                col = cols.setdefault(name, _Col(name, dtype, is_list))
                if is_list:
                    lengths = pc.list_value_length(arr).fill_null(-1).to_numpy()
                    flat = pc.list_flatten(arr)
                else:
                    lengths = np.where(arr.is_null().to_numpy(zero_copy_only=False), -1, 1)
                    flat = arr.drop_null()
                col.values.append(_np_values(flat, dtype))
                col.lengths.append(lengths.astype(np.int64))
            rows += take
            if rows >= limit:
                return list(cols.values()), rows
    return list(cols.values()), rows


def _np_values(arr: Any, dtype: str) -> np.ndarray:
    import pyarrow as pa

    if dtype == "string":
        return arr.cast(pa.string()).to_numpy(zero_copy_only=False)
    return arr.cast(pa.float64()).to_numpy(zero_copy_only=False)


def _sample_tfrecord(files: list[str], limit: int) -> tuple[list[_Col], int]:
    import tensorflow as tf

    from tfinput.sources import TFRecordSource

    source = TFRecordSource(paths=tuple(files))
    seen: dict[str, dict[str, Any]] = {}
    rows = 0
    kind_dtype = {"int64_list": "int64", "float_list": "float32", "bytes_list": "string"}
    for path in files:
        ds = tf.data.TFRecordDataset(path, source.compression_of(path)).take(limit - rows)
        try:
            for record in ds.as_numpy_iterator():
                try:
                    ex = tf.train.Example.FromString(record)
                except Exception as e:
                    raise DataError(f"{path}: record {rows} is not a tf.train.Example ({e})") from e
                for key, feat in ex.features.feature.items():
                    kind = feat.WhichOneof("kind")
                    if kind is None:
                        continue
                    values = list(getattr(feat, kind).value)
                    entry = seen.setdefault(key, {"dtype": kind_dtype[kind], "rows": {}})
                    if entry["dtype"] != kind_dtype[kind]:
                        raise DataError(
                            f"{path}: feature {key!r} is {kind} in record {rows} but "
                            f"{entry['dtype']} in earlier records"
                        )
                    entry["rows"][rows] = values
                rows += 1
        except tf.errors.OpError as e:
            raise DataError(
                f"{path}: not a readable TFRecord file ({e.message.splitlines()[0]})"
            ) from e
        if rows >= limit:
            break
    cols = []
    for key, entry in seen.items():
        lengths = np.full(rows, -1, np.int64)
        flat: list[Any] = []
        for r, values in entry["rows"].items():
            lengths[r] = len(values)
            flat.extend(values)
        present = lengths[lengths >= 0]
        is_list = bool(present.size) and bool((present != 1).any())
        dtype = entry["dtype"]
        arr = (
            np.array([v.decode("utf-8", "replace") for v in flat], dtype=object)
            if dtype == "string"
            else np.asarray(flat, dtype=np.float64)
        )
        col = _Col(key, dtype, is_list, [arr], [lengths])
        cols.append(col)
    return cols, rows


def _decide(
    cols: list[_Col], rows: int, files: list[str], label_names: set[str] | None
) -> Inference:
    stats: list[ColumnStats] = []
    features: list[Any] = []
    tables: list[Table] = []
    labels: list[Label] = []
    finished = {c.name: (c, *c.finish()) for c in cols}
    list_lengths = {name: lengths for name, (c, _, lengths) in finished.items() if c.is_list}
    weights_of: dict[str, str] = {}
    for name, (c, _, lengths) in finished.items():
        if c.is_list and c.dtype == "float32":
            for other, other_len in list_lengths.items():
                if (
                    other != name
                    and finished[other][0].dtype != "float32"
                    and np.array_equal(np.maximum(lengths, 0), np.maximum(other_len, 0))
                ):
                    weights_of[name] = other
                    break
    weights_for = {v: k for k, v in weights_of.items()}
    for name, (c, values, lengths) in finished.items():
        present = lengths[lengths >= 0]
        missing = int((lengths < 0).sum())
        s: dict[str, Any] = {
            "name": name,
            "dtype": c.dtype,
            "is_list": c.is_list,
            "rows": rows,
            "missing": missing,
        }
        if c.is_list and present.size:
            s.update(
                length_p50=float(np.percentile(present, 50)),
                length_p90=float(np.percentile(present, 90)),
                length_p99=float(np.percentile(present, 99)),
                length_max=int(present.max()),
            )
        if values.size and c.dtype != "string":
            s.update(min_value=float(values.min()), max_value=float(values.max()))
        if values.size:
            s["distinct"] = len(np.unique(values))
        is_label = (
            (name in label_names) if label_names is not None else bool(_LABEL_NAMES.match(name))
        )
        note = ""
        if is_label and not c.is_list:
            kind = "label"
            labels.append(
                Label(
                    name=name,
                    dtype="int64" if c.dtype == "int64" else "float32",
                    default=0.0 if missing else None,
                )
            )
        elif name in weights_of:
            kind = f"weights of {weights_of[name]}"
        elif c.dtype == "float32" and c.is_list:
            fixed = present.size and (present == present[0]).all() and present[0] > 0
            if not fixed:
                kind, note = "skipped", "variable-length float list: not a feature kind"
            else:
                kind = "dense"
                features.append(Dense(name=name, length=int(present[0])))
        elif (
            c.dtype in ("float32", "int64")
            and not c.is_list
            and not (c.dtype == "int64" and _ID_NAMES.search(name))
        ):
            kind = "dense"
            negative = values.size and values.min() < 0
            big = values.size and values.max() > 1000
            features.append(
                Dense(
                    name=name,
                    dtype=c.dtype,
                    clip=(0.0, None) if big else None,
                    log1p=bool(big),
                )
            )
            if big:
                note = "large counts: clip at 0 then log1p"
            if negative and big:
                note += " (negatives clipped)"
        else:
            is_string = c.dtype == "string"
            if c.dtype == "float32":
                kind, note = "skipped", "float list"
                stats.append(ColumnStats(**s, kind=kind, note=note))
                continue
            if is_string:
                vocab = _pow2(4 * max(int(s.get("distinct") or 1), 1))
                vnote = f"{vocab} hash buckets (4x distinct seen)"
            else:
                lo = int(values.min()) if values.size else 0
                vocab = int(values.max()) + 1 if values.size else 1
                vnote = f"ids 0..{vocab - 1} seen: vocabulary {vocab} (sampled; check)"
                if lo < 0:
                    vnote = f"NEGATIVE ids seen (min {lo}): fix the data; " + vnote
            tables.append(Table(name=name, vocabulary_size=max(vocab, 1), dim=_dim(vocab)))
            dtype = "string" if is_string else "int64"
            if c.is_list:
                p99 = math.ceil(s.get("length_p99") or 1)
                kind = "multi_hot"
                features.append(
                    MultiHot(
                        name=name,
                        table=name,
                        dtype=dtype,
                        max_len=max(p99, 1),
                        weights=weights_for.get(name),
                    )
                )
                note = f"max_len {max(p99, 1)} (p99); " + vnote
            else:
                kind = "categorical"
                default = ("" if is_string else 0) if missing else None
                features.append(Categorical(name=name, table=name, dtype=dtype, default=default))
                note = vnote
        stats.append(ColumnStats(**s, kind=kind, note=note.strip()))
    if not features:
        raise SchemaError(f"no usable feature columns found in {files[0]!r} (and others)")
    schema = Schema(features=tuple(features), tables=tuple(tables), labels=tuple(labels))
    return Inference(schema=schema, columns=tuple(stats), files=tuple(files), sampled_rows=rows)
