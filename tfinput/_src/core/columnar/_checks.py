"""What a columnar source checks of its files before reading: each file listed in the
manifest, its size the manifest's, and the manifest's columns those the schema reads
(of a compatible dtype)."""

from __future__ import annotations

from tfinput._src.core.columnar.format import (
    NUMERIC_DTYPES,
    Column,
    FileEntry,
    Manifest,
    file_stat,
    storage_columns,
)
from tfinput._src.core.errors import DataError, SchemaError, SourceError, did_you_mean
from tfinput._src.core.schema import MultiHot, Schema


def listed_entry(path: str, m: Manifest) -> FileEntry:
    """The manifest's entry for ``path``.

    Raises:
      SourceError: the manifest does not list the file.
    """
    entry = m.entry(path)
    if entry is None:
        raise SourceError(
            f"{path}: not listed in the manifest {m.path} (it lists "
            f"{len(m.files)} file(s), first {m.files[0].name if m.files else None!r}); "
            "the manifest does not match the files"
        )
    return entry


def _compatible(stored: Column, wanted: Column, numeric_ok: bool) -> bool:
    if stored == wanted:
        return True
    same_shape = (stored.layout, stored.width) == (wanted.layout, wanted.width)
    both_numeric = stored.dtype in NUMERIC_DTYPES and wanted.dtype in NUMERIC_DTYPES
    return same_shape and both_numeric and numeric_ok


def _column_users(schema: Schema) -> dict[str, str]:
    """The first feature (or label) reading each column, for error messages."""
    users: dict[str, str] = {}
    for f in schema.features:
        users.setdefault(f.source, f.name)
        if isinstance(f, MultiHot) and f.weights:
            users.setdefault(f.weights, f.name)
    for lab in schema.labels:
        users.setdefault(lab.source, lab.name)
    return users


def check_schema(m: Manifest, schema: Schema) -> None:
    numeric_ok = {f.source for f in schema.dense} | {lab.source for lab in schema.labels}
    users = _column_users(schema)
    for wanted in storage_columns(schema):
        found = m.column(wanted.name)
        feature = users.get(wanted.name, wanted.name)
        if found is None:
            names = [c.name for c in m.columns]
            raise SchemaError(
                f"{m.path}: feature {feature!r}: column {wanted.name!r} is not stored; "
                f"columns: {names[:40]}" + did_you_mean(wanted.name, names)
            )
        if not _compatible(found, wanted, wanted.name in numeric_ok):
            raise SchemaError(
                f"{m.path}: feature {feature!r}: column {wanted.name!r} is stored as "
                f"{found.describe()} but the schema reads it as {wanted.describe()}"
            )


def check_size(path: str, m: Manifest, entry: FileEntry) -> None:
    """Compare a data file's size on disk with its manifest entry.

    Raises:
      SourceError: the file is missing.
      DataError: the file is shorter (naming its first incomplete chunk) or longer
        than the manifest records.
    """
    stat = file_stat(path)
    if stat is None:
        raise SourceError(f"{path}: listed in the manifest {m.path} but missing")
    size = stat[1]
    if size == entry.bytes:
        return
    if size < entry.bytes:
        chunk = entry.chunk_at(size)
        first, last = m.chunk_rows_range(entry, chunk)
        raise DataError(
            f"{path}: truncated: {size:,} bytes on disk, the manifest records {entry.bytes:,}; "
            f"chunk {chunk} (rows {first}-{last}, from byte {entry.offsets[chunk]:,}) and "
            f"{entry.chunks - chunk - 1} later chunk(s) are missing or incomplete"
        )
    raise DataError(
        f"{path}: {size:,} bytes on disk but the manifest {m.path} records {entry.bytes:,}; "
        f"the file was rewritten or appended to after its manifest (chunks after "
        f"{entry.chunks - 1} are unknown); convert again"
    )
