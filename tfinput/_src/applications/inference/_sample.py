"""Sampling the first rows of Parquet and TFRecord files into columns of flat values
plus per-row lengths, and telling the format of a file (CSV sampling: `_text`)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from tfinput._src.core.errors import DataError
from tfinput._src.core.formats import parquet, tfrecord

__all__ = ["ColumnSample", "SampledColumn", "format_of", "sample_parquet", "sample_tfrecord"]

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


def _add_record_batch(cols: dict[str, SampledColumn], rb: Any) -> None:
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


def _arrow_kind(arr: Any) -> tuple[Any, bool, str | None]:
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


def _np_values(arr: Any, dtype: str) -> np.ndarray:
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

    seen: dict[str, dict[str, Any]] = {}
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


def _add_example(seen: dict[str, dict[str, Any]], ex: Any, *, row: int, path: str) -> None:
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


def _example_columns(seen: dict[str, dict[str, Any]], rows: int) -> list[SampledColumn]:
    """The sampled columns of ``seen`` (see `_add_example`); a key whose rows all hold
    one value is a scalar column."""
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
            np.array([v.decode("utf-8", "backslashreplace") for v in flat], dtype=object)
            if dtype == "string"
            else np.asarray(flat, dtype=np.int64 if dtype == "int64" else np.float64)
        )
        cols.append(SampledColumn(key, dtype, is_list, [arr], [lengths]))
    return cols
