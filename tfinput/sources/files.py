"""Input paths: globs, directories and lists of them into files; empty files."""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Sequence

from tfinput.errors import SourceError

__all__ = [
    "PathsLike",
    "as_paths",
    "resolve_paths",
    "data_files",
    "drop_empty_files",
    "check_empty_files_policy",
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
    not ``.json`` (the ``schema.json`` and ``manifest.json`` tfinput writes beside them)."""
    return sorted(
        os.path.join(directory, n)
        for n in os.listdir(directory)
        if not n.startswith((".", "_"))
        and not n.endswith(".json")
        and os.path.isfile(os.path.join(directory, n))
    )


def resolve_paths(paths: PathsLike, *, what: str = "input") -> list[str]:
    """Expand globs and directories into a sorted, de-duplicated list of files.

    Raises:
      SourceError: a pattern matches nothing, or a named file does not exist.
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
        out.extend(m for m in matches if m not in out)
    if not out:
        raise SourceError(f"no {what} files given")
    return out


def drop_empty_files(files: list[str], policy: str) -> tuple[list[str], list[str]]:
    """``(kept, empty)``: local zero-byte files left out (``policy="skip"``, logged).

    Raises:
      SourceError: an empty file with ``policy="error"``; every file empty.
    """
    empty = [f for f in files if "://" not in f and os.path.getsize(f) == 0]
    if empty and policy == "error":
        raise SourceError(
            f"{len(empty)} empty file(s), first {empty[0]!r}; pass empty_files='skip' to "
            "skip them (tfinput logs how many)"
        )
    if empty:
        log.warning("tfinput: skipped %d empty file(s): %s", len(empty), ", ".join(empty[:5]))
    kept = [f for f in files if f not in empty]
    if not kept:
        raise SourceError(f"all {len(files)} input file(s) are empty, first {files[0]!r}")
    return kept, empty


def check_empty_files_policy(value: str) -> None:
    """Raise `SourceError` unless ``value`` is ``skip`` or ``error``."""
    if value not in ("skip", "error"):
        raise SourceError(f"empty_files: expected 'skip' or 'error', got {value!r}")
