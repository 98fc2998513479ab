"""Input paths: globs, directories and lists of them into files; empty files."""

from __future__ import annotations

import glob
import logging
import os
import stat
from collections.abc import Callable, Sequence

from tfinput._src.core.errors import SourceError
from tfinput._src.core.outputs import unfinished_output

__all__ = [
    "epoch_rows",
    "PathsLike",
    "as_paths",
    "resolve_paths",
    "data_files",
    "drop_empty_files",
    "check_empty_files_policy",
    "check_regular_file",
]

log = logging.getLogger("tfinput")

PathsLike = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def as_paths(paths: PathsLike) -> tuple[str, ...]:
    """``paths`` as a tuple of strings (a source's ``paths`` field).

    Raises:
      SourceError: an empty list.
    """
    if isinstance(paths, (str, os.PathLike)):
        return (os.fspath(paths),)
    out = tuple(os.fspath(p) for p in paths)
    if not out:
        raise SourceError("no input paths given")
    return out


def data_files(directory: str) -> list[str]:
    """A directory's data files, sorted: not hidden, not ``_``-prefixed (``_SUCCESS``),
    not ``.json`` (the ``schema.json`` and ``manifest.json`` tfinput writes beside them).

    Raises:
      SourceError: any other entry that is not a readable file (a broken symbolic link,
        a folder, a pipe, an unreadable file), named: leaving it out would lose its
        data without a word; an unfinished output (`tfinput._src.core.outputs`).
    """
    unfinished = unfinished_output(directory)
    if unfinished:
        raise SourceError(unfinished)
    out = []
    for name in sorted(os.listdir(directory)):
        if name.startswith((".", "_")) or name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        problem = _not_a_data_file(path)
        if problem:
            raise SourceError(
                f"{path}: {problem}. Every entry of an input folder is read, except hidden "
                "and _-prefixed names and .json files; move it away or name the files to "
                "read (a list or a glob)"
            )
        out.append(path)
    return out


def _not_a_data_file(path: str) -> str | None:
    """Why ``path`` (an entry of an input folder) cannot be read as a data file."""
    if os.path.islink(path) and not os.path.exists(path):
        return f"a symbolic link to {os.readlink(path)!r}, which does not exist"
    if os.path.isdir(path):
        return "a folder (files inside folders of an input folder are not read)"
    if not os.path.isfile(path):
        return "not a regular file (a pipe, socket or device)"
    if not os.access(path, os.R_OK):
        return "not readable (permission denied)"
    return None


def _special_kind(path: str) -> str | None:
    """What ``path`` is when it exists but is neither a regular file nor a folder (a
    FIFO, a socket, a device); None otherwise."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    kinds = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((kind for test, kind in kinds if test(mode)), None)


def check_regular_file(path: str, *, what: str = "input") -> None:
    """Raise `SourceError` when ``path`` is a FIFO, a socket or a device: tfinput
    opens its inputs more than once (schema checks, counting, reading), and reading a
    pipe would wait for a writer forever or consume its data.
    """
    kind = _special_kind(path)
    if kind is not None:
        raise SourceError(
            f"{what} file {path!r} is {kind}, not a regular file: inputs are opened more "
            "than once (checks, counts, reads), which a stream cannot give; write the data "
            "to a file and name that"
        )


def resolve_paths(paths: PathsLike, *, what: str = "input") -> list[str]:
    """Expand globs and directories into a sorted, de-duplicated list of files.

    Raises:
      SourceError: a pattern matches nothing, a named file does not exist, or a named
        or matched path is a FIFO, a socket or a device (`check_regular_file`).
    """
    import tensorflow as tf

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if "://" in p:  # remote file systems: let TensorFlow expand the glob
            matches = sorted(tf.io.gfile.glob(p))
        elif any(ch in p for ch in "*?["):
            matches = sorted(glob.glob(p))
        elif os.path.isdir(p):
            matches = data_files(p)
        elif os.path.exists(p):
            matches = [p]
        else:
            raise SourceError(f"{what} file {p!r} does not exist")
        if not matches:
            raise SourceError(f"{what} pattern {p!r} matches no files")
        if "://" not in p:
            for m in matches:
                check_regular_file(m, what=what)
        out.extend(m for m in matches if m not in out)
    if not out:
        raise SourceError(f"no {what} files given")
    return out


# (files, empty files) whose skipping was logged: a build lists its files more than
# once (the read, the resume identity), and bench and tune build many times.
_LOGGED_EMPTY: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()


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
    kept = [f for f in files if f not in empty]
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
