"""TFRecord files of ``tf.train.Example``: names, compression, reading and writing.

The one place tfinput reads and writes TFRecord files: the TFRecord and columnar
sources, the checks, conversion, schema inference, datagen and the test helpers all go
through it. Records are read natively (``tf.data.TFRecordDataset``); examples are
written column by column in the protobuf wire format (`encode_examples`), which
``tf.io.parse_example`` parses exactly as the protobuf library's output.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tfinput._src.core.errors import DataError, SourceError
from tfinput._src.core.formats._example_wire import WireColumn, bytes_column, encode_examples

if TYPE_CHECKING:  # TensorFlow is imported on first use
    import tensorflow as tf

__all__ = [
    "COMPRESSIONS",
    "WireColumn",
    "bytes_column",
    "check_compression",
    "compression_from_name",
    "compression_of",
    "count_readable",
    "count_records",
    "encode_examples",
    "is_tfrecord_name",
    "parse_example",
    "records",
    "write_records",
    "writer",
]

#: TensorFlow's compression type per accepted spelling (case-insensitive).
COMPRESSIONS = {None: "", "": "", "none": "", "gzip": "GZIP", "zlib": "ZLIB"}

_FILE_NAME = re.compile(r"\.(tfrecords?|tfr)(\.(gz|gzip|zz|zlib))?$", re.I)


def is_tfrecord_name(path: str) -> bool:
    """Whether a file name says TFRecord (``.tfrecord``, ``.tfrecords``, ``.tfr``,
    optionally compressed: ``.gz``, ``.gzip``, ``.zz``, ``.zlib``)."""
    return bool(_FILE_NAME.search(path))


def compression_from_name(path: str) -> str:
    """The compression a file name says: ``.gz``/``.gzip`` is GZIP, ``.zz``/``.zlib``
    is ZLIB, anything else none (``""``)."""
    lower = path.lower()
    if lower.endswith((".gz", ".gzip")):
        return "GZIP"
    return "ZLIB" if lower.endswith((".zz", ".zlib")) else ""


def check_compression(compression: str | None) -> None:
    """Raise `SourceError` unless ``compression`` is None, ``"none"``, ``"GZIP"``,
    ``"ZLIB"`` or ``"auto"`` (any case)."""
    if compression != "auto" and (compression or "").lower() not in COMPRESSIONS:
        raise SourceError(
            f"TFRecord compression {compression!r} unknown; expected one of "
            "None, 'GZIP', 'ZLIB', 'auto'"
        )


def compression_of(compression: str | None, path: str) -> str:
    """TensorFlow's compression type of ``path`` (``""`` for none) under a setting
    that `check_compression` accepts (``"auto"``: `compression_from_name`)."""
    if compression == "auto":
        return compression_from_name(path)
    return COMPRESSIONS[(compression or "").lower()]


def records(
    paths: str | Sequence[str] | tf.Tensor,
    compression: str | tf.Tensor = "",
    *,
    buffer_size: int | None = None,
) -> tf.data.Dataset:
    """The serialized records of ``paths`` (a path, a list, or a string tensor, as in
    a ``tf.data`` function) in order, natively (scalar strings)."""
    import tensorflow as tf

    files = list(paths) if isinstance(paths, (list, tuple)) else paths
    return tf.data.TFRecordDataset(files, compression, buffer_size=buffer_size)


def count_records(
    paths: str | Sequence[str], compression: str = "", *, limit: int | None = None
) -> int:
    """Records in ``paths`` (up to ``limit``), counted natively in batches.

    Raises:
      tf.errors.OpError: a file cannot be read that far.
    """
    import tensorflow as tf

    ds = records(paths, compression)
    if limit is not None:
        ds = ds.take(limit)
    return int(
        ds.batch(4096).reduce(tf.constant(0, tf.int64), lambda n, b: n + tf.size(b, tf.int64))
    )


def count_readable(path: str, compression: str = "") -> int:
    """Records of ``path`` that read whole from its start: all of them for a whole
    file, those before the first damaged or cut record otherwise (counted natively in
    batches, then one by one in the batch that failed).

    Raises:
      tf.errors.OpError: the file cannot be opened (missing, not readable).
    """
    import tensorflow as tf

    damaged = (tf.errors.DataLossError, tf.errors.InvalidArgumentError)
    step = 4096
    counted = 0
    try:
        for batch in records(path, compression).batch(step):
            counted += int(tf.size(batch))
    except damaged:
        try:
            for _ in records(path, compression).skip(counted).take(step):
                counted += 1
        except damaged:
            pass
    return counted


def parse_example(record: bytes, *, path: str, index: int) -> tf.train.Example:
    """One record as a ``tf.train.Example``.

    Raises:
      DataError: the record is not one (naming the file and the record's index).
    """
    import tensorflow as tf

    try:
        return tf.train.Example.FromString(record)
    except Exception as e:  # protobuf's DecodeError has no stable import path
        raise DataError(f"{path}: record {index} is not a tf.train.Example ({e})") from e


def writer(path: str | os.PathLike[str], compression: str | None = "") -> tf.io.TFRecordWriter:
    """A writer of one file (``compression``: None, ``""``, ``"GZIP"`` or ``"ZLIB"``):
    ``write(record)`` per record, then ``close()`` (or use it in ``with``)."""
    import tensorflow as tf

    options = tf.io.TFRecordOptions(compression_type=compression or "")
    return tf.io.TFRecordWriter(str(path), options)


def write_records(
    path: str | os.PathLike[str], serialized: Iterable[bytes], compression: str | None = ""
) -> None:
    """Write the serialized records as one file."""
    with writer(path, compression) as w:
        for record in serialized:
            w.write(record)
