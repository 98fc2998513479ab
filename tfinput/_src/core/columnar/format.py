"""The columnar record format: version, reserved keys, stored columns and checksums.

A record is one serialized ``tf.train.Example`` holding one chunk of rows; see
`tfinput.columnar_records` for the layout. This module names the keys and dtypes every
other part (writer, reader, offline verification) agrees on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from tfinput._src.core.errors import SchemaError
from tfinput._src.core.schema import Categorical, Dense, Schema

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST",
    "EXTENSION",
    "DEFAULT_CHUNK_ROWS",
    "LENGTHS_SUFFIX",
    "ROWS_KEY",
    "CHECK_KEY",
    "VERSION_KEY",
    "NUMERIC_DTYPES",
    "NUMPY_DTYPES",
    "RECORD_FRAMING",
    "Column",
    "storage_columns",
    "payload_keys",
    "payload_check",
    "chunk_digest",
]

#: Format name and version, written into every manifest and (as ``@format``) record.
FORMAT = "tfinput.columnar/1"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
EXTENSION = ".tfcol"
#: Rows per record: divides every power-of-two batch size >= 1024.
DEFAULT_CHUNK_ROWS = 1024

#: Suffix of the key holding a list column's int32 row lengths.
LENGTHS_SUFFIX = "@lengths"
#: Meta keys of every record: row count, checksum block, format version.
ROWS_KEY, CHECK_KEY, VERSION_KEY = "@rows", "@check", "@format"
#: Stored dtypes that are raw little-endian arrays, and their NumPy dtypes.
NUMERIC_DTYPES = ("float32", "int64")
NUMPY_DTYPES = {"float32": "<f4", "int64": "<i8"}
#: TFRecord framing per record: length (8) + length CRC (4) + data CRC (4).
RECORD_FRAMING = 16


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
        return (self.name, self.name + LENGTHS_SUFFIX) if self.layout == "list" else (self.name,)

    def describe(self) -> str:
        """The layout, dtype and width, as error messages show them (``fixed float32[3]``)."""
        shape = f"[{self.width}]" if self.width else ""
        return f"{self.layout} {self.dtype}{shape}"

    def to_dict(self) -> dict[str, Any]:
        """The manifest's JSON form (``width`` only for vectors)."""
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
        if col.name.startswith("@") or col.name.endswith(LENGTHS_SUFFIX):
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


def payload_keys(columns: Sequence[Column]) -> list[str]:
    """Every payload key of a record, in checksum order."""
    return [k for c in columns for k in c.keys]


def payload_check(payload: Sequence[bytes]) -> bytes:
    """A record's ``@check`` value: the 8-byte FarmHash64 of each payload value, joined."""
    import tensorflow as tf

    return tf.fingerprint(tf.constant(payload, dtype=tf.string)).numpy().tobytes()


def chunk_digest(check: bytes) -> str:
    """The manifest's digest of a chunk: the hex FarmHash64 of its ``@check`` value."""
    import tensorflow as tf

    return tf.fingerprint(tf.constant([check])).numpy()[0].tobytes().hex()
