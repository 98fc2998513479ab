"""What a read checks of its input files besides their paths: a file changed since the
build, empty files (skipped and logged, or refused), and the rows of an epoch."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

from tfinput._src.core.errors import DataError, SourceError

log = logging.getLogger("tfinput")

# (files, empty files) whose skipping was logged: a build lists its files more than
# once (the read, the resume identity), and bench and tune build many times.
_LOGGED_EMPTY: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()


def file_version(path: str) -> tuple[int, int] | None:
    """``(size, mtime_ns)`` of a local input file, to compare with later
    (`check_unchanged`); None for a remote one (not compared).

    Raises:
      OSError: the file cannot be stat'ed.
    """
    if "://" in path:
        return None
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def check_unchanged(path: str, version: tuple[int, int] | None) -> None:
    """Raise `DataError` naming ``path`` unless it is still ``version`` (`file_version`
    when the pipeline was built): a reader that reads a file by parts (Parquet row
    groups, by the footer read at build) would otherwise mix two versions of it.

    Raises:
      DataError: the file's size or modification time differ, or it is gone.
    """
    if version is None:
        return
    try:
        now = file_version(path)
    except OSError as e:
        found = f"it cannot be opened now ({e.strerror or e})"
    else:
        if now == version:
            return
        assert now is not None
        found = f"{now[0]:,} bytes now" + (", modified since" if now[0] == version[0] else "")
    raise DataError(
        f"{path}: the file changed while it was read: {version[0]:,} bytes when the "
        f"pipeline was built, {found} (rewritten, cut or appended to during the epoch; "
        "its rows would not be the file's); write files under another name and rename "
        "them into place, then build the pipeline again"
    )


def drop_empty_files(
    files: list[str], policy: str, *, rows: Callable[[str], int | None] | None = None
) -> tuple[list[str], list[str]]:
    """``(kept, empty)``: local files with no data left out (``policy="skip"``, logged
    once per process for a given list of files and its empty ones): zero bytes, or,
    where ``rows`` (a file's row count from its footer, None: unknown) is given, zero
    rows.

    Raises:
      SourceError: an empty file with ``policy="error"``; every file empty.
    """
    local = [f for f in files if "://" not in f]
    empty = [f for f in local if os.path.getsize(f) == 0 or (rows is not None and rows(f) == 0)]
    if empty and policy == "error":
        raise SourceError(
            f"{len(empty)} empty file(s) (0 bytes or 0 rows), first {empty[0]!r}; pass "
            "empty_files='skip' to skip them (tfinput logs how many)"
        )
    listing = (tuple(files), tuple(empty))
    if empty and listing not in _LOGGED_EMPTY:
        _LOGGED_EMPTY.add(listing)
        log.warning(
            "tfinput: skipped %d empty file(s) (0 bytes or 0 rows): %s",
            len(empty),
            ", ".join(empty[:5]) + (", ..." if len(empty) > 5 else ""),
        )
    skipped = set(empty)
    kept = [f for f in files if f not in skipped]
    if not kept:
        raise SourceError(
            f"all {len(files)} input file(s) are empty (0 bytes or 0 rows), first {files[0]!r}"
        )
    return kept, empty


def check_empty_files_policy(value: str) -> None:
    """Raise `SourceError` unless ``value`` is ``skip`` or ``error``."""
    if value not in ("skip", "error"):
        raise SourceError(f"empty_files: expected 'skip' or 'error', got {value!r}")


# (kind, path, size, mtime_ns) -> rows: a file's rows are counted once per process
# while it is unchanged (a TFRecord count reads the whole file).
_ROWS: dict[tuple[str, str, int, int], int] = {}


def epoch_rows(source: object, files: Sequence[str]) -> int | None:
    """Rows in one pass over ``files`` (``source.count_records`` per file, remembered
    while a file's size and modification time stay the same); None when a file cannot
    be counted."""
    count = getattr(source, "count_records", None)
    if count is None:
        return None
    kind = str(getattr(source, "kind", type(source).__name__))
    total = 0
    for path in files:
        try:
            st = os.stat(path)
            key: tuple[str, str, int, int] | None = (kind, path, st.st_size, st.st_mtime_ns)
        except OSError:  # a remote path (gs://...): counted every time
            key = None
        rows = _ROWS.get(key) if key else None
        if rows is None:
            rows = count(path)
            if rows is None:
                return None
            if key:
                _ROWS[key] = rows
        total += rows
    return total
