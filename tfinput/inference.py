"""Schema inference from Parquet/Arrow schemas, sampled tf.train.Example records and
CSV/TSV text: the one engine behind ``tfinput schema infer`` and ``tfinput convert``.

    result = tfinput.infer_schema("data/*.parquet")       # or "data/*.csv"
    print(result.table())            # what was observed, column by column
    result.schema.to_json("schema.json")

Rules (the JSON is meant to be reviewed and edited; every decision that is not obvious
is explained in the column's ``note``):

- float scalars → `Dense`; fixed-length float lists → `Dense` vectors;
- integer scalars → `Categorical` when the name looks like an id (``id``, ``*_id``,
  ``*Id``, ``C<n>``) or a value is beyond 2**53 (float64, hence a dense feature,
  would not hold it exactly), else `Dense` stored as int64 (counts); a column named
  like a target (`LABEL_NAMES`: ``label``, ``click``, ``target``, ``y``…) → `Label`;
- dense transforms from the observed values: non-negative values (or negatives at most
  1% of values, or none below -1) above `LARGE_VALUE` → ``clip`` at 0 then ``log1p``;
  other large magnitudes are left unscaled with a note (`tfinput.models.ranking_model`
  normalises its dense inputs);
- strings → hashed string `Categorical`;
- variable-length int or string lists → `MultiHot` with ``max_len`` = observed p99
  length; a float list whose row lengths always equal another list's → its weights;
- integer-id tables get ``vocabulary_size`` = observed max id + 1 with
  ``out_of_range: "modulo"`` (a sample: larger ids later are folded in, never an
  error); ids above `MAX_DIRECT_ROWS` are folded into ``4 × distinct values seen``
  rows; hashed tables get ``4 × distinct values seen``, rounded up to a power of two
  (or ``hash_buckets``);
- a ``-1`` "missing" marker in int ids is folded by ``out_of_range: "modulo"`` into a
  reserved id (``vocabulary_size - 1``, one row above the largest id seen); other
  negative int ids are never declared as int ids, which `tfinput check` rejects: CSV
  columns become hashed strings (each value keeps its own bucket), Parquet/TFRecord
  columns are skipped with a note saying how to fix them; list lengths are capped at
  `tfinput.schema.MAX_LEN`;
- CSV text: integer text stays int64 (``260.0`` too); integers beyond int64 make a
  string column (hashed), never a float one; a column with fewer than
  `NON_NUMERIC_TOLERANCE` (0.1%) non-numeric values stays numeric, and the note
  counts them (``1 of 10,000 values non-numeric, e.g. 'abc' at file:line``): they are
  left out of the statistics, and ``convert`` counts them as bad rows under its
  ``on_bad_rows`` policy; CSV categoricals always get a default (an empty field is a
  missing value);
- TFRecord keys are sorted by name, so the same records give the same schema;
- embedding dim = ``6 · rows^¼`` rounded to a multiple of 4, within [4, 128].
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tfinput.errors import DataError, SchemaError, SourceError
from tfinput.schema import MAX_LEN, Categorical, Dense, Label, MultiHot, Schema, Table

__all__ = ["infer_schema", "Inference", "ColumnStats", "LABEL_NAMES"]

#: Column names (any case) taken as labels when ``labels`` is not given.
LABEL_NAMES = (
    "label",
    "labels",
    "click",
    "clicked",
    "clicks",
    "target",
    "y",
    "rating",
    "is_click",
    "conversion",
)
_LABEL_NAMES = re.compile(rf"^({'|'.join(LABEL_NAMES)})$", re.I)
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
    list_columns: Mapping[str, str] | None = None,
    delimiter: str | None = None,
    header: bool | str = "auto",
    column_names: Sequence[str] | None = None,
    hash_buckets: int | None = None,
) -> Inference:
    """Infer a schema from Parquet, TFRecord or CSV/TSV files.

    ``tfinput convert`` infers with this function too, so ``tfinput schema infer
    data.csv`` and the ``schema.json`` that ``tfinput convert data.csv`` writes agree.

    Args:
      paths: Files, globs or directories.
      sample_rows: Rows sampled from the first files.
      labels: Column names to treat as labels (default: by name, see module doc).
      format: ``parquet``, ``tfrecord`` or ``csv``; by default from the file extension
        (``.parquet``/``.pq`` is Parquet, ``.tfrecord[s]``/``.tfr`` TFRecord,
        ``.csv``/``.tsv``/``.txt`` (optionally ``.gz``/``.bz2``) CSV; anything else is
        read as CSV if its first bytes are text, else as TFRecord).
      list_columns: CSV only: ``{column: item delimiter}`` of multi-valued columns.
      delimiter: CSV only: the field delimiter (default: sniffed).
      header: CSV only: ``"auto"``, True or False.
      column_names: CSV only: names of the columns of files without a header.
      hash_buckets: Rows of every hashed string table, and of folded int id tables;
        default: 4 x the distinct values seen, rounded up to a power of two.

    Raises:
      SourceError: no files; SchemaError: nothing usable found; DataError: a file that
      cannot be read in its format.
    """
    from tfinput.sources import resolve_paths

    files = resolve_paths(paths, what="input")
    fmt = format or _format_of(files[0])
    notes: dict[str, str] = {}
    csv_only = {
        "list_columns": list_columns,
        "delimiter": delimiter,
        "column_names": column_names,
        "header": None if header == "auto" else header,
    }
    if fmt != "csv" and any(v is not None for v in csv_only.values()):
        given = [k for k, v in csv_only.items() if v is not None]
        raise SourceError(f"{', '.join(given)}: CSV inputs only; {files[0]!r} is read as {fmt}")
    if fmt == "parquet":
        cols, rows = _sample_parquet(files, sample_rows)
    elif fmt == "tfrecord":
        cols, rows = _sample_tfrecord(files, sample_rows)
    elif fmt == "csv":
        cols, rows, notes = _sample_csv(
            files,
            sample_rows,
            lists=dict(list_columns or {}),
            layout_args=dict(delimiter=delimiter, header=header, column_names=column_names),
        )
    else:
        raise SourceError(f"format: expected 'parquet', 'tfrecord' or 'csv', got {format!r}")
    if rows == 0:
        raise SchemaError(f"no records found in {len(files)} file(s), first {files[0]!r}")
    return _decide(
        cols,
        rows,
        files,
        set(labels) if labels is not None else None,
        text=fmt == "csv",
        notes=notes,
        hash_buckets=hash_buckets,
    )


_CSV_EXT = re.compile(r"\.(csv|tsv|txt|tab|dat)(\.(gz|gzip|bz2))?$", re.I)
_TFRECORD_EXT = re.compile(r"\.(tfrecords?|tfr)(\.(gz|gzip|zz|zlib))?$", re.I)


def _format_of(path: str) -> str:
    if path.lower().endswith((".parquet", ".pq", ".parq")):
        return "parquet"
    if _TFRECORD_EXT.search(path):
        return "tfrecord"
    if _CSV_EXT.search(path):
        return "csv"
    with open(path, "rb") as f:  # no extension: text is CSV, binary is TFRecord
        head = f.read(4096)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3:
            return "tfrecord"
    return "tfrecord" if not head or b"\0" in head else "csv"


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
    # Integers stay int64: float64 is exact only up to 2**53, and ids go beyond.
    target = pa.int64() if dtype == "int64" else pa.float64()
    return arr.cast(target).to_numpy(zero_copy_only=False)


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
    # Keys come in protobuf map order, which differs between runs: sort them, so that
    # the same records always give the same schema, byte for byte.
    for key, entry in sorted(seen.items()):
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
            else np.asarray(flat, dtype=np.int64 if dtype == "int64" else np.float64)
        )
        col = _Col(key, dtype, is_list, [arr], [lengths])
        cols.append(col)
    return cols, rows


#: A CSV field read as an integer (``260.0`` too: writers that went through floats).
_INT_TEXT = r"^[+-]?[0-9]+(\.0*)?$"
#: A CSV field read as a finite number.
_NUMBER_TEXT = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
#: Non-numeric values tolerated in a numeric CSV column: fewer than 1 in 1,000.
NON_NUMERIC_TOLERANCE = 0.001


def _text_kind(text: Any, where: list[str]) -> tuple[str, np.ndarray, str]:
    """The type of a CSV column from its non-null text values: ``(dtype, values,
    note)``, values as int64, float64 or str numpy arrays. ``where[i]`` is the
    ``file:line`` of ``text[i]`` (for notes).

    A column is numeric when fewer than `NON_NUMERIC_TOLERANCE` of its values are not
    numbers (those are left out of the statistics and named in the note; the
    converter counts them as bad rows); integer text stays int64, and integers beyond
    int64 make the column a string column.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(text)
    if n == 0:
        return "string", np.array([], dtype=object), ""
    is_num = pc.match_substring_regex(text, _NUMBER_TEXT).to_numpy(zero_copy_only=False)
    bad = int(n - is_num.sum())
    note = ""
    if bad:
        first = int(np.flatnonzero(~is_num)[0])
        seen = (
            f"{bad:,} of {n:,} values non-numeric, e.g. {text[first].as_py()!r} at {where[first]}"
        )
        if bad >= NON_NUMERIC_TOLERANCE * n:
            note = f"{seen}: read as text" if bad < n / 2 else ""
            return "string", text.to_numpy(zero_copy_only=False), note
        note = (
            f"{seen}: numeric (under {NON_NUMERIC_TOLERANCE:.1%} non-numeric), those values "
            "left out here; convert counts them as bad rows (on_bad_rows)"
        )
        text = text.filter(pa.array(is_num))
    if pc.all(pc.match_substring_regex(text, _INT_TEXT)).as_py():
        digits = pc.replace_substring_regex(text, r"\.0*$", "")
        try:
            return "int64", pc.cast(digits, pa.int64()).to_numpy(zero_copy_only=False), note
        except pa.ArrowInvalid:
            longest = max(len(s.lstrip("+-")) for s in digits.to_pylist())
            big = (
                f"integers beyond int64 (up to {longest} digits): hashed as strings, never "
                "floats (float64 is exact only up to 2**53)"
            )
            return (
                "string",
                text.to_numpy(zero_copy_only=False),
                "; ".join(filter(None, [note, big])),
            )
    return "float32", pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False), note


def _sample_csv(
    files: list[str], limit: int, *, lists: dict[str, str], layout_args: dict[str, Any]
) -> tuple[list[_Col], int, dict[str, str]]:
    """Sample CSV/TSV files as `tfinput.convert` reads them (same layout sniffing, same
    reader): columns typed by `_text_kind`, and notes per column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from tfinput.convert import _layout, _Reader

    first = _layout(files[0], preset=None, list_delimiters=set(lists.values()), **layout_args)
    batches: list[Any] = []
    where: list[str] = []
    rows = 0
    for i, path in enumerate(files):
        layout = (
            first
            if i == 0
            else _layout(path, preset=None, list_delimiters=set(lists.values()), **layout_args)
        )
        if layout.names != first.names:
            raise SchemaError(
                f"{path}: columns {layout.names} differ from those of {files[0]}: {first.names}"
            )
        reader = _Reader(path, layout, None)
        try:
            for batch, lines in reader.batches():
                valid = np.zeros(batch.num_rows, dtype=bool)
                for col in batch.columns:
                    valid |= col.is_valid().to_numpy(zero_copy_only=False)
                keep = np.flatnonzero(valid)[: limit - rows]  # blank lines are not rows
                batches.append(batch.take(pa.array(keep)))
                where += [f"{path}:{int(lines[k])}" for k in keep]
                rows += len(keep)
                if rows >= limit:
                    break
        finally:
            reader.close()
        if rows == 0 and reader.invalid:
            line, reason = reader.invalid[0]
            raise DataError(f"{path}:{line}: {reason} (no valid row to infer a schema from)")
        if rows >= limit:
            break
    table = pa.Table.from_batches(batches, schema=reader.reader.schema) if batches else None
    cols: list[_Col] = []
    notes: dict[str, str] = {}
    for name in first.names:
        if table is None:
            break
        text = table.column(name).combine_chunks()
        if name in lists:
            parts = pc.split_pattern(text.fill_null(""), pattern=lists[name])
            row_of = np.repeat(np.arange(rows), pc.list_value_length(parts).to_numpy())
            flat = pc.list_flatten(parts)
            keep = pc.not_equal(flat, "").to_numpy(zero_copy_only=False)
            flat, row_of = flat.filter(pa.array(keep)), row_of[keep]
            dtype, values, note = _text_kind(flat, [where[r] for r in row_of])
            if dtype == "float32":  # float lists are not a CSV list kind: keep the text
                dtype, values = "string", flat.to_numpy(zero_copy_only=False)
            lengths = np.bincount(row_of, minlength=rows).astype(np.int64)
            cols.append(_Col(name, dtype, True, [values], [lengths]))
        else:
            present = text.is_valid().to_numpy(zero_copy_only=False)
            dtype, values, note = _text_kind(
                text.drop_null(), [w for w, p in zip(where, present) if p]
            )
            lengths = np.where(present, 1, -1).astype(np.int64)
            cols.append(_Col(name, dtype, False, [values], [lengths]))
        if note:
            notes[name] = note
    return cols, rows, notes


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


#: Integers up to this magnitude are exact in float64 (dense features are floats).
_EXACT_FLOAT = 2**53
#: Integer id tables above this many rows (max id + 1) are folded into 4 x distinct rows.
MAX_DIRECT_ROWS = 1 << 24
#: Dense values above this are taken as heavy-tailed counts or large magnitudes.
LARGE_VALUE = 1000.0


def _dense(name: str, dtype: str, values: np.ndarray) -> tuple[Dense, str]:
    """A dense feature, with the transform proposed from observed statistics.

    Non-negative (or almost: negatives at most 1% of values, or none below -1) values
    above `LARGE_VALUE` are heavy-tailed counts: ``clip`` at 0 then ``log1p``. Other
    large magnitudes (values well below zero) are left unscaled, with a note: log1p
    needs x > -1, and `tfinput.models.ranking_model` normalises its dense inputs.
    """
    if not values.size:
        return Dense(name=name, dtype=dtype), ""
    finite = np.isfinite(values)
    if not finite.all():
        dense, note = _dense(name, dtype, values[finite])
        bad = f"{int((~finite).sum()):,} NaN/inf values: the pipeline rejects them (write nulls)"
        return dense, _join(bad, note)
    lo, hi = float(values.min()), float(values.max())
    neg = int((values < 0).sum())
    if hi > LARGE_VALUE and (lo >= -1 or neg <= 0.01 * values.size):
        note = f"large non-negative values (max {hi:.4g}): clip at 0 then log1p"
        if neg:
            note += f" ({neg:,} negative values, min {lo:g}, clipped to 0)"
        return Dense(name=name, dtype=dtype, clip=(0.0, None), log1p=True), note
    if max(abs(lo), abs(hi)) > LARGE_VALUE:
        note = (
            f"large magnitudes ({lo:.4g}..{hi:.4g}) with negative values: left unscaled "
            "(log1p needs x > -1); tfinput.models.ranking_model normalises dense inputs, "
            "set clip/log1p here or rescale the data for another model"
        )
        return Dense(name=name, dtype=dtype), note
    return Dense(name=name, dtype=dtype), ""


def _decide(
    cols: list[_Col],
    rows: int,
    files: list[str],
    label_names: set[str] | None,
    *,
    text: bool = False,
    notes: Mapping[str, str] | None = None,
    hash_buckets: int | None = None,
) -> Inference:
    notes = notes or {}
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
        given = notes.get(name, "")  # what reading the text found (CSV)
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
        elif not c.is_list and (
            c.dtype == "float32"
            or (
                c.dtype == "int64"
                and not _ID_NAMES.search(name)
                and (not values.size or int(np.abs(values).max()) <= _EXACT_FLOAT)
            )
        ):
            kind = "dense"
            dense, note = _dense(name, c.dtype, values)
            features.append(dense)
        else:
            dtype = c.dtype
            if dtype == "float32":
                kind, note = "skipped", "float list"
                stats.append(ColumnStats(**s, kind=kind, note=_join(given, note)))
                continue
            big = ""
            if dtype == "int64" and values.size and int(np.abs(values).max()) > _EXACT_FLOAT:
                big = (
                    f"integers beyond 2**53 (max {int(values.max())}) are not exact as "
                    "floats, so not dense: read as ids"
                )
            marker = 0  # rows of -1 "missing" markers, folded into a reserved id
            if dtype == "int64" and values.size and int(values.min()) == -1:
                marker = int((values == -1).sum())
                values = values[values != -1]
            if dtype == "int64" and values.size and int(values.min()) < 0:
                lo, neg = int(values.min()), int((values < 0).sum())
                seen = f"negative ids seen (min {lo}, {neg:,} of {values.size:,} values)"
                if not text:
                    kind = "skipped"
                    note = (
                        f"{seen}: not declared, since ids must be >= 0 (tfinput check rejects "
                        "negative ids); map the marker to a missing value or to a reserved "
                        "id >= 0 and declare the column categorical"
                    )
                    stats.append(ColumnStats(**s, kind=kind, note=_join(given, big, note)))
                    continue
                dtype = "string"
                big = _join(
                    big,
                    f"{seen}: hashed as strings, so every value ({lo} included) keeps its own "
                    "bucket (int ids must be >= 0)",
                )
            distinct = max(int(s.get("distinct") or 1), 1)
            out_of_range = "error"
            if dtype == "string":
                vocab = hash_buckets or _pow2(4 * distinct)
                vnote = f"{vocab} hash buckets" + ("" if hash_buckets else " (4x distinct seen)")
            else:
                hi = int(values.max()) if values.size else 0
                out_of_range = "modulo"
                if hi + 1 > MAX_DIRECT_ROWS:
                    vocab = hash_buckets or _pow2(4 * distinct)
                    vnote = (
                        f"ids up to {hi} are too sparse for a row per id: folded into {vocab} "
                        "rows (out_of_range modulo)"
                    )
                else:
                    vocab = hi + 1 + (1 if marker else 0)
                    vnote = (
                        f"ids 0..{hi} seen: vocabulary {vocab} (sampled: larger ids are folded "
                        "in, out_of_range modulo; check)"
                    )
                if marker:
                    vnote = _join(
                        f"-1 seen {marker:,} times, taken as a missing marker: out_of_range "
                        f"modulo folds it into id {vocab - 1}"
                        + (" (reserved: no sampled id uses it)" if vocab == hi + 2 else ""),
                        vnote,
                    )
            tables.append(Table(name=name, vocabulary_size=max(vocab, 1), dim=_dim(vocab)))
            if c.is_list:
                p99 = min(math.ceil(s.get("length_p99") or 1), MAX_LEN)
                kind = "multi_hot"
                features.append(
                    MultiHot(
                        name=name,
                        table=name,
                        dtype=dtype,
                        max_len=max(p99, 1),
                        weights=weights_for.get(name),
                        out_of_range=out_of_range,
                    )
                )
                note = _join(big, f"max_len {max(p99, 1)} (p99); " + vnote)
            else:
                kind = "categorical"
                # CSV writes a missing value as an empty field anywhere: always a default.
                default = ("" if dtype == "string" else 0) if (missing or text) else None
                features.append(
                    Categorical(
                        name=name,
                        table=name,
                        dtype=dtype,
                        default=default,
                        out_of_range=out_of_range,
                    )
                )
                note = _join(big, vnote)
        stats.append(ColumnStats(**s, kind=kind, note=_join(given, note.strip())))
    if not features:
        raise SchemaError(f"no usable feature columns found in {files[0]!r} (and others)")
    schema = Schema(features=tuple(features), tables=tuple(tables), labels=tuple(labels))
    return Inference(schema=schema, columns=tuple(stats), files=tuple(files), sampled_rows=rows)
