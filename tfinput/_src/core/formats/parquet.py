"""Parquet files: opening (local paths and URIs), footers, reading and writing.

The one place tfinput touches ``pyarrow.parquet``: the Parquet source, conversion,
schema inference, datagen and the test helpers all read and write through it. An
unreadable file is a `tfinput.errors.DataError` naming it; footers are cached per file
version (path, modification time, size), since the tuner and bench build the same
pipeline many times.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from tfinput._src.core.errors import DataError

if TYPE_CHECKING:  # pyarrow is imported on first use
    import pyarrow as pa
    import pyarrow.parquet as pq


_EXTENSIONS = (".parquet", ".pq", ".parq")


def is_parquet_name(path: str) -> bool:
    """Whether a file name says Parquet (``.parquet``, ``.pq``, ``.parq``, any case)."""
    return path.lower().endswith(_EXTENSIONS)


def _unreadable(path: str, e: BaseException) -> DataError:
    line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return DataError(f"{path}: not a readable Parquet file ({line})")


def open_file(
    path: str, *, metadata: pq.FileMetaData | None = None, memory_pool: pa.MemoryPool | None = None
) -> pq.ParquetFile:
    """A ``pyarrow.parquet.ParquetFile`` for a local path or a URI (``s3://...``);
    ``metadata``, a footer already read, is not read again; ``memory_pool``: where its
    reads allocate (default: pyarrow's default pool).

    Raises:
      DataError: the file cannot be opened or is not Parquet.
    """
    import pyarrow.parquet as pq

    try:
        source: str | pa.NativeFile = path
        if "://" in path:
            import pyarrow.fs as pafs

            fs, inner = pafs.FileSystem.from_uri(path)
            source = fs.open_input_file(inner)
        pf = pq.ParquetFile(source, metadata=metadata)
        if memory_pool is not None:
            _read_into(pf, source, memory_pool)
        return pf
    except DataError:
        raise
    except Exception as e:  # pyarrow raises ArrowInvalid/OSError variants
        raise _unreadable(path, e) from e


def _read_into(pf: pq.ParquetFile, source: Any, memory_pool: pa.MemoryPool) -> None:
    """Point ``pf``'s reads at ``memory_pool``: ``ParquetFile`` takes no pool, but its
    reader (pyarrow's private ``ParquetReader``) does; opened as ``ParquetFile`` opens
    it. Where that reader is not as expected (another pyarrow), ``pf`` keeps reading
    into the default pool: the same data, logged once."""
    try:
        from pyarrow._parquet import ParquetReader

        reader = ParquetReader(memory_pool=memory_pool)
        reader.open(source, metadata=pf.metadata, pre_buffer=False)
    except (ImportError, TypeError, AttributeError) as e:
        _log_default_pool_once(e)
        return
    pf.reader = reader


def _log_default_pool_once(error: BaseException) -> None:
    if not _POOL_LOGGED:
        _POOL_LOGGED.append(True)
        logging.getLogger("tfinput").info(
            "tfinput: Parquet row groups decode into pyarrow's default memory pool (%s)", error
        )


_POOL_LOGGED: list[bool] = []


@functools.cache
def read_pool() -> pa.MemoryPool:
    """The pool the Parquet source decodes row groups into: jemalloc's where pyarrow
    has it and ``ARROW_DEFAULT_MEMORY_POOL`` does not choose one, else the default.
    pyarrow's default mimalloc pool hands the megabytes of each decoded row group back
    to the system and takes them again for the next one (page faults, zeroed pages on
    every read); jemalloc keeps them for a while (docs/bench.md, "What Parquet costs")."""
    import pyarrow as pa

    if "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        return pa.default_memory_pool()
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:  # a build without jemalloc (Windows)
        return pa.default_memory_pool()


def _version(path: str) -> tuple[int | None, int | None]:
    if "://" in path:
        return None, None
    stat = os.stat(path)
    return stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=4096)
def _footer(path: str, mtime_ns: int | None, size: int | None) -> pq.FileMetaData:
    del mtime_ns, size  # part of the cache key only
    return open_file(path).metadata


def footer(path: str) -> pq.FileMetaData:
    """A file's parsed footer (``pyarrow.parquet.FileMetaData``), cached per file
    version.

    Raises:
      DataError: the file cannot be opened or is not Parquet.
    """
    return _footer(path, *_version(path))


def num_rows(path: str) -> int:
    """Rows in a file, from its (cached) footer.

    Raises:
      DataError: the file cannot be opened or is not Parquet.
    """
    return int(footer(path).num_rows)


def read_schema(path: str) -> pa.Schema:
    """A file's Arrow schema, from its (cached) footer.

    Raises:
      DataError: the file cannot be opened or is not Parquet.
    """
    try:
        return footer(path).schema.to_arrow_schema()
    except DataError:
        raise
    except Exception as e:
        raise _unreadable(path, e) from e


def iter_batches(
    path: str, *, batch_size: int, columns: Sequence[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """A file's rows as record batches of up to ``batch_size`` rows (``columns``:
    those only, in that order; None: all).

    Raises:
      DataError: the file cannot be opened or is not Parquet.
    """
    pf = open_file(path)
    yield from pf.iter_batches(
        batch_size=batch_size, columns=None if columns is None else list(columns)
    )


def row_groups(
    path: str, *, columns: Sequence[str] | None = None, use_threads: bool = False
) -> Iterator[pa.Table]:
    """A file's row groups in order, one table each (``columns``: those only)."""
    pf = open_file(path)
    for group in range(pf.num_row_groups):
        yield pf.read_row_group(
            group, columns=None if columns is None else list(columns), use_threads=use_threads
        )


def writer(path: str | os.PathLike[str], schema: pa.Schema) -> pq.ParquetWriter:
    """A writer of one file with Arrow ``schema``: ``write_table(table,
    row_group_size=...)`` per row group, then ``close()`` (or use it in ``with``)."""
    import pyarrow.parquet as pq

    return pq.ParquetWriter(str(path), schema)


def write_table(table: pa.Table, path: str | os.PathLike[str], *, row_group_size: int) -> None:
    """Write ``table`` as one file, in row groups of ``row_group_size`` rows."""
    import pyarrow.parquet as pq

    pq.write_table(table, str(path), row_group_size=row_group_size)
