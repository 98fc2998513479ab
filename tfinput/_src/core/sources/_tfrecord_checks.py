"""Build-time checks of TFRecord files: whole last record, first records against the
schema, and a shuffle buffer no larger than the files can hold."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfinput._src.core.errors import DataError, SchemaError, did_you_mean
from tfinput._src.core.formats import tfrecord
from tfinput._src.core.schema import Categorical, Dense, Label, MultiHot, Schema

log = logging.getLogger("tfinput")

#: Records of the first file compared with the schema at build (`TFRecordSource.validate`).
SAMPLE_RECORDS = 256
#: Bytes of a record besides its data: length (8), length CRC (4), data CRC (4).
_RECORD_OVERHEAD = 16
#: DEFLATE's largest compression ratio: a bound on what a compressed file can hold.
_DEFLATE_MAX_RATIO = 1032


def capped_shuffle_buffer(requested: int, files: list[str], compressed: bool) -> int:
    """``shuffle_buffer`` capped at the most records the files can hold.

    TensorFlow's shuffle allocates about 24 bytes per slot up front, whatever the data
    size (a buffer of 1e9 took 24 GB), so a buffer larger than the data only costs
    memory. Every record takes at least 16 bytes of file (its framing), so an
    uncompressed data set of S bytes holds at most S // 16 records; a GZIP/ZLIB one at
    most ``S * 1032 // 16`` (DEFLATE's largest ratio). Remote files are not measured.
    A capped value is logged with the requested and the used value.
    """
    if any("://" in f for f in files):
        return requested
    total = sum(os.path.getsize(f) for f in files)
    most = max(1, total * (_DEFLATE_MAX_RATIO if compressed else 1) // _RECORD_OVERHEAD)
    if requested <= most:
        return requested
    log.warning(
        "tfinput: shuffle_buffer %d is larger than the %d record(s) the %d file(s) can hold "
        "(%d bytes, at least %d bytes per record); using %d",
        requested,
        most,
        len(files),
        total,
        _RECORD_OVERHEAD,
        most,
    )
    return most


def _masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli) of a few bytes (the length field)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


_WHOLE_FILES: set[tuple[str, int, int]] = set()  # (path, mtime_ns, size) found whole


def _version(path: str) -> tuple[str, int, int]:
    """``(path, mtime_ns, size)``: a file version, for the checks done once per version."""
    stat = os.stat(path)
    return (path, stat.st_mtime_ns, stat.st_size)


def check_tail_once(path: str) -> None:
    """`_check_tail`, skipped for a file version already found whole (the tuner and
    bench build the same pipeline many times)."""
    key = _version(path)
    if key not in _WHOLE_FILES:
        _check_tail(path)
        _WHOLE_FILES.add(key)


def _check_tail(path: str, windows: Sequence[int] = (1 << 14, 1 << 17, 1 << 20)) -> None:
    """Raise `DataError` if an uncompressed TFRecord file ends inside a record header.

    Reads the file's last bytes and looks for the last record's header: 8 bytes of
    length L at offset q whose masked CRC follows, with the record ending at EOF
    (q + 16 + L == size: the file is whole) or 1-11 bytes before it (a cut header).
    Cost: one read of the tail per file (numpy, no per-record Python). A last record
    larger than the largest window cannot be located and is not judged.
    """
    size = os.path.getsize(path)
    if 0 < size < 12:
        raise DataError(
            f"{path}: truncated TFRecord: {size} byte(s), less than one record header at "
            "offset 0 (the file was cut while being copied or written?)"
        )
    with open(path, "rb") as fh:
        for window in windows:
            start = max(0, size - window)
            fh.seek(start)
            tail = fh.read(size - start)
            found = _tail_boundary(tail)
            if found is not None:
                whole, end = found
                if whole:
                    return
                raise DataError(
                    f"{path}: truncated TFRecord: the file ends {size - start - end} byte(s) "
                    f"into a record header at offset {start + end} (the file was cut while "
                    "being copied or written?); records after that offset are lost"
                )
            if start == 0:
                return


def _tail_boundary(tail: bytes) -> tuple[bool, int] | None:
    """``(True, n)`` when a record ends exactly at the end of ``tail``; ``(False, end)``
    when one ends 1-11 bytes before it; None when no record boundary was found."""
    n = len(tail)
    buf = np.frombuffer(tail, np.uint8)
    best: tuple[bool, int] | None = None
    for align in range(8):
        count = (n - align - _RECORD_OVERHEAD) // 8 + 1
        if count <= 0:
            continue
        lengths = np.frombuffer(buf, "<u8", count=count, offset=align)
        q = align + 8 * np.arange(count, dtype=np.int64)
        room = n - _RECORD_OVERHEAD - q  # data bytes that fit between header and EOF
        ok = lengths <= np.uint64(1 << 62)
        gap = np.where(ok, room - lengths.astype(np.int64, copy=False), -1)
        for i in np.flatnonzero((gap >= 0) & (gap <= 11)):
            pos = int(q[i])
            crc = int.from_bytes(tail[pos + 8 : pos + 12], "little")
            if crc != _masked_crc32c(tail[pos : pos + 8]):
                continue
            end = n - int(gap[i])
            if gap[i] == 0:
                return True, n
            if best is None or end > best[1]:
                best = (False, end)
    return best


_EXAMPLE_KIND = {"float32": "float_list", "int64": "int64_list", "string": "bytes_list"}


def _expected_kind(f: Dense | Categorical | MultiHot | Label) -> str:
    return _EXAMPLE_KIND[f.dtype]


def check_first_examples(
    path: str, compression: str, schema: Schema, *, allow_absent: Sequence[str] = ()
) -> None:
    """Compare the first `SAMPLE_RECORDS` records of ``path`` with the schema."""
    records: list[bytes] = []
    try:
        for record in tfrecord.records(path, compression).take(SAMPLE_RECORDS):
            records.append(record.numpy())
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        if not records:
            raise DataError(
                f"{path}: not a readable TFRecord file ({_tf_message(e, path)})"
                + _compression_hint(path, compression)
            ) from e
        # Damage after the first records is reported while reading, with its offset.
    check_examples(path, records, schema, allow_absent=allow_absent)


def check_examples(
    path: str, records: Sequence[bytes], schema: Schema, *, allow_absent: Sequence[str] = ()
) -> None:
    """`check_first_examples` of the first records of ``path``, already read."""
    if not records:
        return
    examples = [tfrecord.parse_example(r, path=path, index=i) for i, r in enumerate(records)]
    _check_example_kinds(path, examples[0], schema)
    seen: set[str] = set()
    for example in examples:
        seen.update(example.features.feature.keys())
    keys = [(f.name, f.source) for f in schema.features]
    keys += [(f.name, f.weights) for f in schema.multi_hot if f.weights]
    keys += [(lab.name, lab.source) for lab in schema.labels]
    for name, key in keys:
        if key not in seen and key not in allow_absent:
            raise SchemaError(
                f"{path}: feature {name!r}: key {key!r} is absent from all of the first "
                f"{len(examples)} record(s), so every value would be the default; keys "
                f"present: {sorted(seen)[:40]}" + did_you_mean(key, seen) + " (fix the "
                "schema, or list the key in allow_absent if it is that sparse)"
            )


_SAMPLES_OK: set[tuple[Any, ...]] = set()  # check_first_examples passed on these


def check_first_examples_once(
    path: str, compression: str, schema: Schema, *, allow_absent: Sequence[str] = ()
) -> None:
    """`check_first_examples`, skipped for a file version (path, modification time,
    size) that already passed it with the same schema: the tuner and bench build the
    same pipeline many times, and each check starts a TensorFlow reader."""
    try:
        key = (*_version(path), compression, schema, tuple(allow_absent))
    except OSError:  # a remote path (gs://...): checked every time
        check_first_examples(path, compression, schema, allow_absent=allow_absent)
        return
    if key not in _SAMPLES_OK:
        check_first_examples(path, compression, schema, allow_absent=allow_absent)
        _SAMPLES_OK.add(key)


def check_first_example(path: str, compression: str, schema: Schema) -> None:
    """Kinds and required keys of the first record only (`tfinput.convert` uses it)."""
    check_first_examples(path, compression, schema, allow_absent=schema.columns())


#: The first bytes of a GZIP stream and the usual first bytes of a ZLIB one.
_MAGIC = {"GZIP": (b"\x1f\x8b",), "ZLIB": (b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda")}


def _compression_hint(path: str, compression: str) -> str:
    """``"; ..."`` naming the compression to set when ``path`` starts like a compressed
    stream of another kind than ``compression``; empty otherwise."""
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            head = f.read(2)
    except (OSError, tf.errors.OpError):
        return ""
    for kind, magic in _MAGIC.items():
        if head in magic and kind != compression:
            return (
                f"; it starts like a {kind} stream: read it with compression={kind!r} "
                f"(--compression {kind}), or name it with a {'.gz' if kind == 'GZIP' else '.zz'} "
                "extension"
            )
    return ""


def _tf_message(e: BaseException, path: str) -> str:
    """A TensorFlow error's sentence without graph-node noise or the path again."""
    from tfinput._src.core.errors import clean_error

    text = clean_error(e).replace(path, "").strip(" :")
    return re.sub(r"\s*\(\w+Error\)$", "", text)


def _check_example_kinds(path: str, example: Any, schema: Schema) -> None:
    present = example.features.feature
    checks: list[tuple[str, str, Any, bool]] = []
    for f in schema.features:
        required = isinstance(f, Categorical) and f.default is None
        checks.append((f.name, f.source, f, required))
        if isinstance(f, MultiHot) and f.weights:
            weights = Dense(name=f.weights)
            checks.append((f.name, f.weights, weights, False))
    for lab in schema.labels:
        checks.append((lab.name, lab.source, lab, lab.default is None))
    for name, key, f, required in checks:
        if key not in present:
            if required:
                raise SchemaError(
                    f"{path}: feature {name!r}: key {key!r} is missing from the first record "
                    f"and the schema gives it no default; keys present: {sorted(present)[:40]}"
                    + did_you_mean(key, present)
                )
            continue
        found = present[key].WhichOneof("kind")
        expected = _expected_kind(f)
        if found is not None and found != expected:
            hint = {"int64_list": "int64", "float_list": "float32", "bytes_list": "string"}[found]
            raise SchemaError(
                f"{path}: feature {name!r}: the schema expects {expected} "
                f"(dtype {f.dtype}) but the file holds {found}; set dtype={hint!r} or fix the data"
            )
