"""Sampling the first rows of Parquet and TFRecord files into columns of flat values
plus per-row lengths, and telling the format of a file; sampling CSV/TSV text as
`tfinput.convert` reads it (`tfinput._src.core.formats.csv`), and typing each column from its
text: integers, floats or strings, with a note on the values that do not fit."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

import numpy as np

from tfinput._src.core.errors import DataError, SchemaError
from tfinput._src.core.formats import parquet, tfrecord

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pyarrow as pa
    import tensorflow as tf

    from tfinput._src.core.formats.csv import CsvReader, Layout

    #: What `_add_example` records of a key: its dtype and its values by row.
    _Seen = dict[str, dict[str, str | dict[int, list[int | float | bytes]]]]

_CSV_EXT = re.compile(r"\.(csv|tsv|txt|tab|dat)(\.(gz|gzip|bz2))?$", re.I)
#: tf.train.Feature kinds and the dtypes they are sampled as.
_EXAMPLE_DTYPES = {"int64_list": "int64", "float_list": "float32", "bytes_list": "string"}


@dataclasses.dataclass(frozen=True)
class ColumnSample:
    """One column's sample: flat values plus per-row lengths (-1 = missing)."""

    name: str
    dtype: str  # "int64" | "float32" | "string"
    is_list: bool
    values: np.ndarray
    lengths: np.ndarray

    @property
    def present(self) -> np.ndarray:
        """The lengths of the rows that have a value (a list may be empty)."""
        return self.lengths[self.lengths >= 0]

    @property
    def missing(self) -> int:
        """How many rows have no value."""
        return int((self.lengths < 0).sum())


@dataclasses.dataclass
class SampledColumn:
    """Sampled values of one column as they are read, chunk by chunk."""

    name: str
    dtype: str
    is_list: bool
    values: list[np.ndarray] = dataclasses.field(default_factory=list)
    lengths: list[np.ndarray] = dataclasses.field(default_factory=list)

    def finish(self) -> ColumnSample:
        """The chunks read so far, concatenated."""
        values = np.concatenate(self.values) if self.values else np.array([])
        lengths = np.concatenate(self.lengths) if self.lengths else np.array([], np.int64)
        return ColumnSample(self.name, self.dtype, self.is_list, values, lengths)


def format_of(path: str) -> str:
    """``parquet``, ``tfrecord`` or ``csv``: from the extension, else from the first bytes
    (text is CSV, binary is TFRecord)."""
    if parquet.is_parquet_name(path):
        return "parquet"
    if tfrecord.is_tfrecord_name(path):
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


def sample_parquet(files: list[str], limit: int) -> tuple[list[SampledColumn], int]:
    """The first ``limit`` rows of Parquet ``files``: the columns and the rows read.

    Columns of a type that is no feature kind (timestamps, structs...) are left out.

    Raises:
      DataError: a file that is not Parquet.
    """
    cols: dict[str, SampledColumn] = {}
    rows = 0
    for path in files:
        for rb in parquet.iter_batches(path, batch_size=min(limit, 65536)):
            take = min(rb.num_rows, limit - rows)
            _add_record_batch(cols, rb.slice(0, take))
            rows += take
            if rows >= limit:
                return list(cols.values()), rows
    return list(cols.values()), rows


def _add_record_batch(cols: dict[str, SampledColumn], rb: pa.RecordBatch) -> None:
    """Appends each column of the Arrow record batch ``rb`` to ``cols``."""
    import pyarrow.compute as pc

    for name, arr in zip(rb.schema.names, rb.columns):
        arr, is_list, dtype = _arrow_kind(arr)
        if dtype is None:
            continue  # timestamps, structs...: not a feature kind tfinput reads
        col = cols.setdefault(name, SampledColumn(name, dtype, is_list))
        if is_list:
            lengths = pc.list_value_length(arr).fill_null(-1).to_numpy()
            flat = pc.list_flatten(arr)
        else:
            lengths = np.where(arr.is_null().to_numpy(zero_copy_only=False), -1, 1)
            flat = arr.drop_null()
        col.values.append(_np_values(flat, dtype))
        col.lengths.append(lengths.astype(np.int64))


def _arrow_kind(
    arr: pa.Array | pa.ChunkedArray,
) -> tuple[pa.Array | pa.ChunkedArray, bool, str | None]:
    """``(array, is_list, dtype)`` of an Arrow column, dictionaries decoded; dtype None
    for a type that is no feature kind."""
    import pyarrow as pa

    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    is_list = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    vt = t.value_type if is_list else t
    if pa.types.is_dictionary(vt):
        vt = vt.value_type
    if pa.types.is_integer(vt) or pa.types.is_boolean(vt):
        return arr, is_list, "int64"
    if pa.types.is_floating(vt) or pa.types.is_decimal(vt):
        return arr, is_list, "float32"
    if (
        pa.types.is_string(vt)
        or pa.types.is_large_string(vt)
        or pa.types.is_binary(vt)
        or pa.types.is_large_binary(vt)
    ):
        return arr, is_list, "string"
    return arr, is_list, None


def _np_values(arr: pa.Array | pa.ChunkedArray, dtype: str) -> np.ndarray:
    import pyarrow as pa

    if dtype == "string":
        try:
            return arr.cast(pa.string()).to_numpy(zero_copy_only=False)
        except (pa.ArrowException, UnicodeDecodeError):
            # Bytes that are not UTF-8 (ids written as raw bytes, in a binary column or
            # in a string column by a writer that does not check UTF-8): the pipeline hashes
            # the bytes as they are; here they only need telling apart (escaped, as for
            # TFRecord, so that distinct bytes stay distinct).
            raw = arr.cast(pa.binary()).to_pylist()
            return np.array(
                [None if v is None else v.decode("utf-8", "backslashreplace") for v in raw],
                dtype=object,
            )
    # Integers stay int64: float64 is exact only up to 2**53, and ids go beyond.
    target = pa.int64() if dtype == "int64" else pa.float64()
    return arr.cast(target).to_numpy(zero_copy_only=False)


def sample_tfrecord(files: list[str], limit: int) -> tuple[list[SampledColumn], int]:
    """The first ``limit`` tf.train.Example records of TFRecord ``files``: the columns,
    sorted by key, and the rows read.

    Raises:
      DataError: a file that is not TFRecord, a record that is not a tf.train.Example,
      or a key whose kind changes between records.
    """
    import tensorflow as tf

    from tfinput._src.core.errors import clean_error

    seen: _Seen = {}
    rows = 0
    for path in files:
        ds = tfrecord.records(path, tfrecord.compression_from_name(path)).take(limit - rows)
        try:
            for record in ds.as_numpy_iterator():
                ex = tfrecord.parse_example(record, path=path, index=rows)
                _add_example(seen, ex, row=rows, path=path)
                rows += 1
        except tf.errors.OpError as e:
            raise DataError(
                f"{path}: not a readable TFRecord file ({clean_error(e).splitlines()[0]})"
            ) from e
        if rows >= limit:
            break
    return _example_columns(seen, rows), rows


def _add_example(seen: _Seen, ex: tf.train.Example, *, row: int, path: str) -> None:
    """Records the values of every feature of ``ex`` under ``seen[key]["rows"][row]``."""
    for key, feat in ex.features.feature.items():
        kind = feat.WhichOneof("kind")
        if kind is None:
            continue
        values = list(getattr(feat, kind).value)
        entry = seen.setdefault(key, {"dtype": _EXAMPLE_DTYPES[kind], "rows": {}})
        if entry["dtype"] != _EXAMPLE_DTYPES[kind]:
            raise DataError(
                f"{path}: feature {key!r} is {kind} in record {row} but "
                f"{entry['dtype']} in earlier records"
            )
        entry["rows"][row] = values


def _example_columns(seen: _Seen, rows: int) -> list[SampledColumn]:
    """The sampled columns of ``seen`` (see `_add_example`); a key whose rows all hold
    one value is a scalar column."""
    cols = []
    # Keys come in protobuf map order, which differs between runs: sort them, so that
    # the same records always give the same schema, byte for byte.
    for key, entry in sorted(seen.items()):
        lengths = np.full(rows, -1, np.int64)
        flat: list[int | float | bytes] = []
        for r, values in entry["rows"].items():
            lengths[r] = len(values)
            flat.extend(values)
        present = lengths[lengths >= 0]
        is_list = bool(present.size) and bool((present != 1).any())
        dtype = entry["dtype"]
        arr = (
            np.array([v.decode("utf-8", "backslashreplace") for v in flat], dtype=object)
            if dtype == "string"
            else np.asarray(flat, dtype=np.int64 if dtype == "int64" else np.float64)
        )
        cols.append(SampledColumn(key, dtype, is_list, [arr], [lengths]))
    return cols


#: A CSV field read as an integer (``260.0`` too: writers that went through floats).
_INT_TEXT = r"^[+-]?[0-9]+(\.0*)?$"
#: A CSV field read as a finite number.
_NUMBER_TEXT = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
#: Non-numeric values tolerated in a numeric CSV column: fewer than 1 in 1,000.
NON_NUMERIC_TOLERANCE = 0.001


def text_kind(text: pa.Array, where: list[str]) -> tuple[str, np.ndarray, str]:
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
        return _integer_text(text, note)
    return "float32", pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False), note


def _integer_text(text: pa.Array, note: str) -> tuple[str, np.ndarray, str]:
    """`text_kind` of integer text: int64, or strings when a value is beyond int64."""
    import pyarrow as pa
    import pyarrow.compute as pc

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


def sample_csv(
    files: list[str], limit: int, *, lists: dict[str, str], layout_args: Mapping[str, object]
) -> tuple[list[SampledColumn], int, dict[str, str]]:
    """Sample CSV/TSV files as `tfinput.convert` reads them (same layout sniffing, same
    reader): columns typed by `text_kind`, and notes per column.

    Args:
      files: The CSV files; all must have the columns of the first.
      limit: Rows to sample (blank lines are not rows).
      lists: ``{column: item delimiter}`` of multi-valued columns.
      layout_args: ``delimiter``, ``header`` and ``column_names`` for the layout sniffer.

    Returns:
      The columns, the rows sampled and ``{column: note}``.

    Raises:
      SchemaError: a file whose columns differ from the first's; DataError: a file
      with no valid row.
    """
    table, where, names = _read_rows(files, limit, lists=lists, layout_args=layout_args)
    rows = len(where)
    cols: list[SampledColumn] = []
    notes: dict[str, str] = {}
    if table is None:
        return cols, rows, notes
    for name in names:
        text = table.column(name).combine_chunks()
        if name in lists:
            col, note = _list_column(name, text, lists[name], where)
        else:
            col, note = _scalar_column(name, text, where)
        cols.append(col)
        if note:
            notes[name] = note
    return cols, rows, notes


def _read_rows(
    files: list[str], limit: int, *, lists: dict[str, str], layout_args: Mapping[str, object]
) -> tuple[pa.Table | None, list[str], list[str]]:
    """The first ``limit`` rows of ``files`` as an Arrow table of text (None if there
    are none), the ``file:line`` of each row, and the column names."""
    import pyarrow as pa

    from tfinput._src.core.formats.csv import CsvReader, sniff_layout

    def layout_of(path: str) -> Layout:
        return sniff_layout(path, preset=None, list_delimiters=set(lists.values()), **layout_args)

    first = layout_of(files[0])
    batches: list[pa.RecordBatch] = []
    where: list[str] = []
    for i, path in enumerate(files):
        layout = first if i == 0 else layout_of(path)
        if layout.names != first.names:
            raise SchemaError(
                f"{path}: columns {layout.names} differ from those of {files[0]}: {first.names}"
            )
        reader = CsvReader(path, layout, None)
        try:
            got, lines = _first_rows(reader, limit - len(where))
        finally:
            reader.close()
        batches += got
        where += [f"{path}:{line}" for line in lines]
        if not where and reader.invalid:
            line, reason = reader.invalid[0]
            raise DataError(f"{path}:{line}: {reason} (no valid row to infer a schema from)")
        if len(where) >= limit:
            break
    table = pa.Table.from_batches(batches, schema=reader.reader.schema) if batches else None
    return table, where, first.names


def _first_rows(reader: CsvReader, limit: int) -> tuple[list[pa.RecordBatch], list[int]]:
    """Up to ``limit`` rows of a `CsvReader`: record batches and the rows' line numbers."""
    import pyarrow as pa

    batches: list[pa.RecordBatch] = []
    kept: list[int] = []
    for batch, lines in reader.batches():
        valid = np.zeros(batch.num_rows, dtype=bool)
        for col in batch.columns:
            valid |= col.is_valid().to_numpy(zero_copy_only=False)
        keep = np.flatnonzero(valid)[: limit - len(kept)]  # blank lines are not rows
        batches.append(batch.take(pa.array(keep)))
        kept += [int(lines[k]) for k in keep]
        if len(kept) >= limit:
            break
    return batches, kept


def _list_column(
    name: str, text: pa.Array, delimiter: str, where: list[str]
) -> tuple[SampledColumn, str]:
    """A multi-valued column split on ``delimiter``; empty items are dropped."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = len(where)
    parts = pc.split_pattern(text.fill_null(""), pattern=delimiter)
    row_of = np.repeat(np.arange(rows), pc.list_value_length(parts).to_numpy())
    flat = pc.list_flatten(parts)
    keep = pc.not_equal(flat, "").to_numpy(zero_copy_only=False)
    flat, row_of = flat.filter(pa.array(keep)), row_of[keep]
    dtype, values, note = text_kind(flat, [where[r] for r in row_of])
    if dtype == "float32":  # float lists are not a CSV list kind: keep the text
        dtype, values = "string", flat.to_numpy(zero_copy_only=False)
    lengths = np.bincount(row_of, minlength=rows).astype(np.int64)
    return SampledColumn(name, dtype, True, [values], [lengths]), note


def _scalar_column(name: str, text: pa.Array, where: list[str]) -> tuple[SampledColumn, str]:
    """A single-valued column; an empty field is a missing value."""
    present = text.is_valid().to_numpy(zero_copy_only=False)
    dtype, values, note = text_kind(text.drop_null(), [w for w, p in zip(where, present) if p])
    lengths = np.where(present, 1, -1).astype(np.int64)
    return SampledColumn(name, dtype, False, [values], [lengths]), note
