"""Offline verification of a columnar data set: every chunk against its manifest."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from tfinput._src.core.columnar.format import (
    CHECK_KEY,
    FORMAT_VERSION,
    RECORD_FRAMING,
    ROWS_KEY,
    VERSION_KEY,
    chunk_digest,
    payload_check,
    payload_keys,
)
from tfinput._src.core.columnar.manifest import FileEntry, Manifest, file_stat
from tfinput._src.core.columnar.source import ColumnarSource, check_size
from tfinput._src.core.errors import DataError
from tfinput._src.core.formats import tfrecord

__all__ = ["ChunkProblem", "verify_files"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChunkProblem:
    """A chunk that failed `verify_files`."""

    path: str
    chunk: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: chunk {self.chunk}: {self.reason}"


def verify_files(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> list[ChunkProblem]:
    """Read every chunk of every file and check it against its manifest (offline).

    Checks, per file: the size, the record count, each record's offset, its format
    version, row count, every payload value's fingerprint and the manifest digest.

    Args:
      paths: As for `tfinput.columnar_records.columnar`.

    Returns:
      The problems found, empty if the data set is intact.
    """
    from tfinput._src.core.sources.files import as_paths

    source = ColumnarSource(paths=as_paths(paths))
    problems: list[ChunkProblem] = []
    for path, m, entry in source.resolve():
        problems.extend(_verify_file(source, path, m, entry))
    return problems


def _verify_file(
    source: ColumnarSource, path: str, m: Manifest, entry: FileEntry
) -> list[ChunkProblem]:
    """The problems of one data file: its size, then each record, then the count."""
    import tensorflow as tf

    try:
        check_size(path, m, entry)
    except DataError as e:
        stat = file_stat(path)
        chunk = entry.chunk_at(stat[1]) if stat else 0
        return [ChunkProblem(path=path, chunk=chunk, reason=str(e))]
    keys = payload_keys(m.columns)
    strings = {c.name for c in m.columns if c.dtype == "string"}
    problems: list[ChunkProblem] = []
    index = 0
    offset = 0
    try:
        for record in tfrecord.records(path):
            reason = _verify_record(record.numpy(), m, entry, index, offset, keys, strings)
            if reason:
                problems.append(ChunkProblem(path=path, chunk=index, reason=reason))
            offset += len(record.numpy()) + RECORD_FRAMING
            index += 1
    except tf.errors.OpError as e:
        chunk = entry.chunk_at(offset) if index < entry.chunks else index
        reason = source.explain_error(path, getattr(e, "message", str(e)))
        problems.append(ChunkProblem(path=path, chunk=chunk, reason=reason))
        return problems
    if index != entry.chunks:
        reason = f"{index} chunk(s) in the file, {entry.chunks} in the manifest"
        problems.append(ChunkProblem(path=path, chunk=index, reason=reason))
    return problems


def _verify_record(
    data: bytes,
    m: Manifest,
    entry: FileEntry,
    index: int,
    offset: int,
    keys: list[str],
    strings: set[str],
) -> str | None:
    """What is wrong with record ``index`` of a file (at byte ``offset``), or None."""
    from tensorflow.core.example import example_pb2

    if index >= entry.chunks:
        return f"extra record beyond the manifest's {entry.chunks} chunk(s)"
    if entry.offsets[index] != offset:
        return f"record at byte {offset}, the manifest says {entry.offsets[index]}"
    try:
        fmap = example_pb2.Example.FromString(data).features.feature
    except Exception as e:  # protobuf's DecodeError has no stable import path
        return f"not a columnar record ({e})"
    version = list(fmap[VERSION_KEY].int64_list.value) if VERSION_KEY in fmap else []
    if version != [FORMAT_VERSION]:
        return f"format version {version}, this tfinput reads {FORMAT_VERSION}"
    rows = list(fmap[ROWS_KEY].int64_list.value)
    want_rows = m.chunk_rows_range(entry, index)
    if rows != [want_rows[1] - want_rows[0] + 1]:
        return f"{rows} rows, the manifest implies {want_rows[1] - want_rows[0] + 1}"
    check = fmap[CHECK_KEY].bytes_list.value[0] if CHECK_KEY in fmap else b""
    if len(check) != 8 * len(keys):
        return f"checksum block of {len(check)} bytes, expected {8 * len(keys)}"
    missing = [k for k in keys if k not in fmap]
    if missing:
        return f"missing column(s) {missing}"
    payload = [
        b"".join(fmap[k].bytes_list.value) if k in strings else fmap[k].bytes_list.value[0]
        for k in keys
    ]
    computed = payload_check(payload)
    for i, k in enumerate(keys):
        if computed[8 * i : 8 * i + 8] != check[8 * i : 8 * i + 8]:
            return f"column {k!r} does not match its checksum: the chunk is corrupt"
    if chunk_digest(check) != entry.digests[index]:
        return "its checksums do not match the manifest digest (file replaced or rewritten)"
    return None
