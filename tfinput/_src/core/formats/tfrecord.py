"""TFRecord files of ``tf.train.Example``: names, compression, reading and writing.

The one place tfinput reads and writes TFRecord files: the TFRecord and columnar
sources, the checks, conversion, schema inference, datagen and the test helpers all go
through it. Records are read natively (``tf.data.TFRecordDataset``); examples are
written column by column in the protobuf wire format (`encode_examples`), which
``tf.io.parse_example`` parses exactly as the protobuf library's output.

Building one ``tf.train.Example`` per row through the protobuf API costs tens of
microseconds per row. The encoder (`encode_examples` of `WireColumn` values,
`bytes_column`) writes the same messages column by column instead:

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }   # entry: key = 1, value = 2
    Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                            Int64List int64_list = 3; } }
    FloatList / Int64List { repeated float / int64 value = 1 [packed = true]; }
    BytesList { repeated bytes value = 1; }

Every part of every row is a *piece*: a padded ``[rows, width]`` uint8 block plus the
number of bytes actually used in each row. A row's record is the concatenation of its
pieces, which one boolean-mask selection over the horizontally stacked blocks produces
for all rows at once. Rows are processed in chunks so the padded blocks stay small.

The output is byte-for-byte a valid serialization that `tf.io.parse_example` parses
exactly as it parses the protobuf library's output (packed lists are always written
with their length prefix, also when empty, which protobuf allows).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from tfinput._src.core.errors import DataError, SourceError

if TYPE_CHECKING:  # TensorFlow is imported on first use
    import tensorflow as tf

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


#: Files' counts handed to Python at once by `count_each` (one element per file costs
#: more than the native read of a small file).
_COUNT_BATCH = 512


def count_each(
    paths: Sequence[str], compression: str = "", *, sample: int = 0
) -> list[tuple[int, list[bytes]] | None]:
    """Each file's records, counted natively in one pass over all of them, with its
    first ``sample`` serialized records: ``(count, first records)`` per file, None for
    a file that cannot be read to its end (damaged, cut, unreadable).

    One pipeline reads the files one after the other and hands their counts over in
    batches: the cost is the records plus a small cost per file, not a reader built
    per file. A file's count is complete once a later file's comes. After a batch that
    fails, the files from the last one seen are read again one at a time, each closed
    by a marker, to find the one that fails; the batched read goes on after it.
    """
    import tensorflow as tf

    out: list[tuple[int, list[bytes]] | None] = [None] * len(paths)
    width = max(sample, 0)

    def counts(i: tf.Tensor, path: tf.Tensor) -> tf.data.Dataset:
        def counted(b: tf.Tensor) -> tuple[tf.Tensor, ...]:
            head = b[:width]
            return i, tf.size(b, out_type=tf.int64), head, tf.size(head, out_type=tf.int64)

        return records(path, compression).batch(4096).map(counted)

    def closed(i: tf.Tensor, path: tf.Tensor) -> tf.data.Dataset:
        end = (i, tf.constant(-1, tf.int64), tf.zeros([0], tf.string), tf.constant(0, tf.int64))
        return counts(i, path).concatenate(tf.data.Dataset.from_tensors(end))

    start, exact = 0, False
    while start < len(paths):
        files = tf.data.Dataset.from_tensor_slices(
            (tf.range(start, len(paths), dtype=tf.int64), list(paths[start:]))
        )
        if exact:  # one file at a time, each closed by a marker
            elements = files.flat_map(closed).batch(1)
        else:
            elements = files.flat_map(counts).padded_batch(_COUNT_BATCH)
        current, counted, heads = start - 1, 0, []  # the file being read
        last_closed = start - 1
        try:
            for numbers, sizes, firsts, kept in elements.as_numpy_iterator():
                for i, n, head, k in zip(numbers.tolist(), sizes.tolist(), firsts, kept.tolist()):
                    if i != current:  # the file before is complete
                        if not exact and current >= start:
                            out[current] = (counted, heads)
                        current, counted, heads = i, 0, head[:k].tolist()
                    if n < 0:  # a file's marker
                        out[i], last_closed = (counted, heads), i
                    else:
                        counted += n
            if not exact and current >= start:
                out[current] = (counted, heads)
            start = len(paths)
        except tf.errors.OpError:
            if exact:  # the file after the last one closed fails: None
                start, exact = last_closed + 2, False
            else:  # again from the last file seen, which may be incomplete
                start, exact = max(current, start), True
    return out


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


# --------------------------------------- the vectorized tf.train.Example encoder
_KIND_TAG = {"bytes": 0x0A, "float": 0x12, "int64": 0x1A}
_LEN1 = 0x0A  # field 1, wire type 2 (length-delimited)
_LEN2 = 0x12  # field 2, wire type 2
_CHUNK_BYTES = 32 << 20  # target size of one chunk's padded blocks


@dataclasses.dataclass(frozen=True, kw_only=True)
class WireColumn:
    """One tf.Example key, for every row.

    Attributes:
      key: Feature key in the Example map.
      kind: ``float`` (FloatList), ``int64`` (Int64List) or ``bytes`` (BytesList).
      values: ``float``/``int64``: the values, ``[rows]`` (one per row), ``[rows, n]``
        (n per row) or flat with ``row_lengths``. ``bytes``: the concatenated bytes of
        every value, as a flat uint8 array, with ``value_lengths``.
      row_lengths: Number of values in each row, for variable-length lists.
      value_lengths: ``bytes`` only: byte length of each value.
      present: Optional bool ``[rows]``; False leaves the key out of that row's Example
        (a missing value, filled by the parse spec's default).
    """

    key: str
    kind: Literal["float", "int64", "bytes"]
    values: np.ndarray
    row_lengths: np.ndarray | None = None
    value_lengths: np.ndarray | None = None
    present: np.ndarray | None = None


def bytes_column(
    key: str,
    values: Sequence[bytes] | np.ndarray,
    *,
    row_lengths: np.ndarray | None = None,
    present: np.ndarray | None = None,
) -> WireColumn:
    """A ``bytes`` `WireColumn` from a sequence (or object array) of ``bytes``."""
    items = [v if isinstance(v, bytes) else str(v).encode() for v in values]
    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    data = np.frombuffer(b"".join(items), dtype=np.uint8)
    return WireColumn(
        key=key,
        kind="bytes",
        values=data,
        value_lengths=lengths,
        row_lengths=row_lengths,
        present=present,
    )


# ----------------------------------------------------------------- pieces
def _nbytes(v: np.ndarray) -> np.ndarray:
    """Bytes of each uint64 value's varint (1 to 10)."""
    out = np.ones(v.shape[0], dtype=np.int64)
    top = int(v.max()) if v.shape[0] else 0
    for k in range(1, 10):
        if top < 1 << (7 * k):
            break
        out += v >= np.uint64(1 << (7 * k))
    return out


def _varints(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varint encodings of uint64 values: a padded ``[n, width]`` block and lengths."""
    v = np.ascontiguousarray(v).astype(np.uint64, copy=False)
    nbytes = _nbytes(v)
    width = int(nbytes.max()) if v.shape[0] else 1
    if width == 1:
        return v.astype(np.uint8)[:, None], nbytes
    shifts = (np.arange(width, dtype=np.uint64) * np.uint64(7))[None, :]
    block = ((v[:, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
    more = np.arange(width)[None, :] < (nbytes - 1)[:, None]
    block |= more.astype(np.uint8) << 7
    return block, nbytes


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _pad(flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Ragged bytes (concatenated rows) to a zero-padded ``[rows, max_len]`` block."""
    width = int(lengths.max()) if lengths.shape[0] else 0
    block = np.zeros((lengths.shape[0], width), dtype=np.uint8)
    if width:
        block[np.arange(width)[None, :] < lengths[:, None]] = flat
    return block


def _concat(pieces: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise concatenation of padded pieces: flat bytes and per-row lengths (no rows:
    nothing, as for a list column empty in every row)."""
    rows = pieces[0][1].shape[0]
    if rows == 0:
        return np.zeros(0, np.uint8), np.zeros(0, np.int64)
    stacked = np.concatenate([b for b, _ in pieces], axis=1)
    mask = np.ones(stacked.shape, dtype=bool)
    lengths = np.zeros(rows, dtype=np.int64)
    at = 0
    for block, n in pieces:
        width = block.shape[1]
        if width and int(n.min()) < width:
            mask[:, at : at + width] = np.arange(width)[None, :] < n[:, None]
        lengths += n
        at += width
    return stacked[mask], lengths


def _const(data: bytes, rows: int, present: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    block = np.broadcast_to(np.frombuffer(data, dtype=np.uint8), (rows, len(data)))
    lengths = np.full(rows, len(data), dtype=np.int64)
    return block, _gate(lengths, present)


def _gate(lengths: np.ndarray, present: np.ndarray | None) -> np.ndarray:
    return lengths if present is None else np.where(present, lengths, 0)


def _segment_sums(values: np.ndarray, row_lengths: np.ndarray) -> np.ndarray:
    ends = np.cumsum(row_lengths)
    csum = np.concatenate([[0], np.cumsum(values)])
    return csum[ends] - csum[ends - row_lengths]


def _payload(col: WireColumn, rows: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """The list message body of each row: (padded block, lengths, packed?)."""
    if col.kind == "bytes":
        vlens = np.asarray(col.value_lengths, dtype=np.int64)
        head, head_lens = _varints(vlens)
        head = np.concatenate([np.full((vlens.shape[0], 1), _LEN1, np.uint8), head], axis=1)
        flat, per_value = _concat([(head, head_lens + 1), (_pad(col.values, vlens), vlens)])
        row_lengths = np.ones(rows, np.int64) if col.row_lengths is None else col.row_lengths
        lengths = _segment_sums(per_value, row_lengths)
        return _pad(flat, lengths), lengths, False
    values = np.asarray(col.values)
    if col.kind == "float":
        raw = np.ascontiguousarray(values, dtype="<f4")
        if col.row_lengths is None:
            block = raw.reshape(rows, -1).view(np.uint8)
            return block, np.full(rows, block.shape[1], np.int64), True
        lengths = np.asarray(col.row_lengths, np.int64) * 4
        return _pad(raw.reshape(-1).view(np.uint8), lengths), lengths, True
    ints = np.ascontiguousarray(values, dtype=np.int64).reshape(-1).view(np.uint64)
    block, nbytes = _varints(ints)
    if col.row_lengths is None and values.ndim == 1:
        return block, nbytes, True
    row_lengths = (
        np.full(rows, values.shape[1], np.int64)
        if col.row_lengths is None
        else np.asarray(col.row_lengths, np.int64)
    )
    mask = np.arange(block.shape[1])[None, :] < nbytes[:, None]
    lengths = _segment_sums(nbytes, row_lengths)
    return _pad(block[mask], lengths), lengths, True


def _header(key: bytes, kind: str, packed: bool, payload_len: int) -> bytes:
    """Everything of one map entry before the list body, for a body of ``payload_len``."""
    if packed:
        list_msg = bytes([_LEN1]) + _varint_bytes(payload_len)
        list_len = len(list_msg) + payload_len
    else:
        list_msg, list_len = b"", payload_len
    feature = bytes([_KIND_TAG[kind]]) + _varint_bytes(list_len) + list_msg
    feature_len = len(feature) + payload_len
    entry = bytes([_LEN1]) + _varint_bytes(len(key)) + key + bytes([_LEN2])
    entry += _varint_bytes(feature_len) + feature
    entry_len = len(entry) + payload_len
    return bytes([_LEN1]) + _varint_bytes(entry_len) + entry


def _column_pieces(col: WireColumn, rows: int) -> tuple[list, np.ndarray]:
    """Pieces of one column's map entry in each row, and the entry's byte length."""
    present = None if col.present is None else np.asarray(col.present, dtype=bool)
    payload, payload_len, packed = _payload(col, rows)
    key = col.key.encode()
    # The header depends only on the body's length: build it once per distinct length
    # and look it up (bodies are short: one value or a short list).
    lo, top = int(payload_len.min()), int(payload_len.max())
    if top - lo <= 4096:
        lengths, index = np.arange(lo, top + 1), payload_len - lo
    else:
        lengths, index = np.unique(payload_len, return_inverse=True)
    headers = [_header(key, col.kind, packed, int(n)) for n in lengths]
    head_lens = np.array([len(h) for h in headers], dtype=np.int64)
    table = np.zeros((len(headers), int(head_lens.max())), dtype=np.uint8)
    for i, h in enumerate(headers):
        table[i, : len(h)] = np.frombuffer(h, dtype=np.uint8)
    if lo == top:
        head = np.broadcast_to(table[0], (rows, table.shape[1]))
    else:
        head = table[index]
    head_len = _gate(head_lens[index], present)
    pieces = [(head, head_len), (payload, _gate(payload_len, present))]
    return pieces, head_len + _gate(payload_len, present)


# --------------------------------------------------------------- chunking
def _row_slice(col: WireColumn, start: int, stop: int, offsets: dict) -> WireColumn:
    present = None if col.present is None else col.present[start:stop]
    if col.row_lengths is None and col.kind != "bytes":
        return dataclasses.replace(col, values=col.values[start:stop], present=present)
    row_off = offsets.get("rows")
    if col.row_lengths is None:
        a, b = start, stop
        row_lengths = None
    else:
        a, b = int(row_off[start]), int(row_off[stop])
        row_lengths = col.row_lengths[start:stop]
    if col.kind != "bytes":
        return dataclasses.replace(
            col, values=col.values[a:b], row_lengths=row_lengths, present=present
        )
    byte_off = offsets["bytes"]
    return dataclasses.replace(
        col,
        values=col.values[int(byte_off[a]) : int(byte_off[b])],
        value_lengths=col.value_lengths[a:b],
        row_lengths=row_lengths,
        present=present,
    )


def _chunk(columns: Sequence[WireColumn], rows: int) -> list[bytes]:
    pieces: list = []
    features_len = np.zeros(rows, dtype=np.int64)
    for col in columns:
        col_pieces, total = _column_pieces(col, rows)
        pieces += col_pieces
        features_len += total
    head, head_len = _varints(features_len)
    pieces = [_const(bytes([_LEN1]), rows, None), (head, head_len), *pieces]
    flat, lengths = _concat(pieces)
    data = flat.tobytes()
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends[:-1]]
    return [data[a:b] for a, b in zip(starts, ends, strict=True)]


def encode_examples(
    columns: Sequence[WireColumn], rows: int, *, chunk_rows: int | None = None
) -> list[bytes]:
    """Serialize ``rows`` ``tf.train.Example`` records, one per row.

    Args:
      columns: The keys and their values (see `WireColumn`).
      rows: Number of rows.
      chunk_rows: Rows encoded at a time (None: sized for about 32 MiB of work).

    Returns:
      The serialized records, in row order.
    """
    if rows == 0:
        return []
    if not columns:
        return [b""] * rows
    offsets: list[dict] = []
    width = 0
    for col in columns:
        off: dict = {}
        if col.row_lengths is not None:
            off["rows"] = np.concatenate([[0], np.cumsum(col.row_lengths)])
            per_row = max(1, int(off["rows"][-1]) // max(rows, 1))
        else:
            per_row = 1 if np.ndim(col.values) <= 1 else int(np.shape(col.values)[1])
        if col.kind == "bytes":
            off["bytes"] = np.concatenate([[0], np.cumsum(col.value_lengths)])
            per_row = max(1, int(off["bytes"][-1]) // max(rows, 1)) + 3 * per_row
        else:
            per_row *= 10
        width += 24 + len(col.key) + per_row
        offsets.append(off)
    step = chunk_rows or max(256, _CHUNK_BYTES // (4 * width))
    out: list[bytes] = []
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        part = [_row_slice(c, start, stop, o) for c, o in zip(columns, offsets, strict=True)]
        out += _chunk(part, stop - start)
    return out
