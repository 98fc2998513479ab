"""Files in and out: input paths (globs, directories and lists of them into files; empty
files), and outputs written whole or not at all, their paths checked before any work.

`StagedDir` is how ``tfinput convert`` and ``tfinput datagen`` write a data set: every
file goes into a hidden staging directory beside the output
(``.NAME.tfinput-staging-PID-XXXX``; inside the output when the output is a mount point
or holds the working directory, or when its parent cannot be written). `StagedDir.commit`
flushes every file to disk (``fsync``) and renames the staging directory onto the output
in one step. A process
killed before that leaves only the hidden staging directory, which no reader lists (a
directory's data files skip hidden names and ``*`` globs do not match them) and which
the next run to the same output deletes.

When the output directory already holds files the new output does not replace (files
of the user's own beside an overwritten conversion), the staged files are moved in one
by one instead, with `INCOMPLETE` in the output while they move: a directory holding it
is refused by every reader (`data_files`), naming it,
until a run to the same output finishes.

`check_writable` is the check every command with an output path makes before any work:
the path can be created (its nearest existing folder is a folder and takes a new file:
the folders missing on the way are created by the command, for a file output as for a
folder output), with an error naming the path and the reason otherwise; it leaves
nothing behind.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import logging
import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tfinput._src.core.errors import ConfigError, OutputError, SourceError

#: The file in an output directory while a commit moves files into it.
INCOMPLETE = ".tfinput-incomplete"
_STAGING = ".tfinput-staging-"
_OLD = ".tfinput-old-"


def check_writable(path: str | os.PathLike[str], *, what: str, directory: bool) -> None:
    """Check that ``path`` can be written, before any work, leaving nothing behind.

    Args:
      path: The output path (remote ``scheme://`` paths are not checked).
      what: How the error names the path (``--out``, ``convert: output``).
      directory: Whether the output is a directory (else a file).

    An output may be missing with the folders above it: the command creates them
    (`create_parents` for a file), so a long command does not end, its work done, on
    an output it cannot create.

    Raises:
      ConfigError: ``path`` exists as the other kind, a folder on the way is a file,
        or no file can be created where ``path`` goes (read-only, permission denied),
        naming ``path`` and the reason.
    """
    text = os.fspath(path)
    if "://" in text:
        return
    target = Path(os.path.abspath(text))
    if target.is_dir() and not directory:
        raise ConfigError(f"{what} {text}: is a directory; expected a file name")
    if target.exists() and not target.is_dir() and directory:
        raise ConfigError(f"{what} {text}: exists and is not a directory")
    folder = target if directory and target.is_dir() else target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(f"{what} {text}: cannot be created: {folder} is a file, not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".tfinput-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
        if target.is_file():
            with open(target, "ab"):
                pass
    except OSError as e:
        reason = "it takes no new files" if e.errno == errno.ENOENT else e.strerror or str(e)
        raise ConfigError(f"{what} {text}: cannot write in {folder}: {reason}") from None


def create_parents(path: str | os.PathLike[str]) -> None:
    """Create the folders missing above a file output ``path`` (which `check_writable`
    checked before the work), as a folder output's are created."""
    if "://" not in os.fspath(path):
        Path(os.path.abspath(os.fspath(path))).parent.mkdir(parents=True, exist_ok=True)


def unfinished_output(directory: str | os.PathLike[str]) -> str | None:
    """Why ``directory`` is an unfinished output (it holds `INCOMPLETE`), or None."""
    marker = os.path.join(directory, INCOMPLETE)
    if not os.path.exists(marker):
        return None
    return (
        f"{os.fspath(directory)} is an unfinished output: {INCOMPLETE} is there, so the "
        "run writing it stopped while moving its files in; run it again (convert: with "
        "--overwrite) or delete the directory"
    )


def unfinished_part(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` (a file or folder, named alone or matched by a glob) is part of an
    unfinished output, or None: it is in a folder holding `INCOMPLETE` (`unfinished_output`),
    or in the hidden staging or set-aside folder of a run writing an output (``.NAME.
    tfinput-staging-PID-XXXX``, ``.NAME.tfinput-old-...``; inside the output:
    ``.tfinput-staging-...``), killed or still running."""
    text = Path(os.path.abspath(os.fspath(path)))
    folder = text if text.is_dir() else text.parent
    for staging in (folder, *folder.parents):
        for mark in (_STAGING, _OLD):
            if staging.name.startswith(".") and mark in staging.name:
                # ``.NAME<mark>...`` beside the output NAME; ``<mark>...`` inside it
                out = staging.parent / staging.name.split(mark, 1)[0][1:]
                return (
                    f"{os.fspath(path)} is part of an unfinished output: it is in {staging}, "
                    f"where a run writing {out} stages its files (the run was stopped or is "
                    "still writing); read the output once the run has finished, or run it "
                    "again"
                )
    return unfinished_output(folder)


class StagedDir:
    """A directory output written under a hidden name and committed whole.

    Write every file into `path`, then call `commit`; leaving a ``with`` block without
    a commit (an error, Ctrl-C) deletes what was written. A full disk, raised by any
    writer inside the block (an ``OSError`` ``ENOSPC`` or ``EDQUOT``, TensorFlow's
    ``ResourceExhaustedError``, pyarrow's ``OSError``) or by the commit, leaves the
    block as one `OutputError` naming the output and the space its disk had.

    Args:
      out: The output directory (created at the commit if it does not exist).
      replaces: ``name -> bool``: whether an entry already in ``out`` is an older
        output's file, deleted at the commit (default: none; staged files replace
        entries of the same name in any case).
      what: How errors name the output (``convert: output``).

    Raises:
      ConfigError: ``out`` is a file, or no staging directory can be created.
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        *,
        replaces: Callable[[str], bool] | None = None,
        what: str = "output",
    ):
        self.out = Path(os.path.abspath(os.fspath(out)))
        self.given = os.fspath(out)
        self.what = what
        self.replaces = replaces or (lambda name: False)
        if self.out.exists() and not self.out.is_dir():
            raise ConfigError(f"output {os.fspath(out)!r} exists and is not a directory")
        remove_stale(self.out)
        self.path, self.inside = self._make()

    def _make(self) -> tuple[Path, bool]:
        """The staging directory, and whether it is inside the output."""
        parent = self.out.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            mount = self.out.is_dir() and os.stat(self.out).st_dev != os.stat(parent).st_dev
            here = Path.cwd() == self.out or self.out in Path.cwd().parents
            if not (mount or here):  # a renamed working directory would strand its shell
                name = f".{self.out.name}{_STAGING}{os.getpid()}-"
                return _fresh_dir(parent, name), False
        except OSError as e:
            if not self.out.is_dir():
                raise ConfigError(f"output {self.out}: cannot write: {e.strerror or e}") from None
        try:
            staged = _fresh_dir(self.out, f"{_STAGING}{os.getpid()}-")
        except OSError as e:
            raise ConfigError(f"output {self.out}: cannot write: {e.strerror or e}") from None
        return Path(staged), True

    def __enter__(self) -> StagedDir:
        return self

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        self.abort()
        if error is not None and disk_full(error):
            raise OutputError(self._full()) from None

    def _full(self) -> str:
        """The message of a full disk: the output, the space it had, what is left."""
        try:
            free = f"the {shutil.disk_usage(self.path.parent).free / 2**20:,.1f} MiB free"
        except OSError:
            free = "the space free"
        return (
            f"{self.what} {self.given}: no space left on device: the output needs more "
            f"than {free} on its disk; nothing was written there (the files written so "
            "far are deleted"
            + (", what was there before is unchanged" if self.out.exists() else "")
            + "): free space or choose an output on a larger disk"
        )

    def abort(self) -> None:
        """Delete the staging directory and what it holds (nothing after a commit)."""
        shutil.rmtree(self.path, ignore_errors=True)

    def commit(self) -> None:
        """Flush every staged file to disk and put them in place as one output."""
        names = sorted(os.listdir(self.path))
        for folder, _, files in os.walk(self.path, topdown=False):  # sub-folders too
            for name in files:
                _fsync(Path(folder, name))
            _fsync(Path(folder))
        if not self.inside and self._swap():
            return
        self._merge(names)

    def _swap(self) -> bool:
        """Rename the staging directory onto the output; False where it cannot be."""
        if self.out.is_dir():
            entries = os.listdir(self.out)
            if any(not (self.replaces(n) or n == INCOMPLETE) for n in entries):
                return False
            if entries:  # only an older output's files: move them aside first
                old = tempfile.mkdtemp(
                    prefix=f".{self.out.name}{_OLD}{os.getpid()}-", dir=self.out.parent
                )
                os.replace(self.out, os.path.join(old, "out"))
                os.replace(self.path, self.out)
                _fsync(self.out.parent)
                shutil.rmtree(old, ignore_errors=True)
                return True
        try:
            os.replace(self.path, self.out)  # the output is absent or an empty directory
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.EXDEV, errno.EBUSY):
                return False
            raise
        _fsync(self.out.parent)
        return True

    def _merge(self, names: list[str]) -> None:
        """Move the staged files into the output one by one, `INCOMPLETE` meanwhile;
        data files first, ``.json`` files (schema, manifest) last."""
        self.out.mkdir(parents=True, exist_ok=True)
        marker = self.out / INCOMPLETE
        try:
            marker.write_text(f"tfinput (pid {os.getpid()}) is moving files into this output\n")
            _fsync(marker)
        except OSError:  # a full disk: the output stays as it was
            marker.unlink(missing_ok=True)
            raise
        _fsync(self.out)
        for name in os.listdir(self.out):
            if self.replaces(name) and name not in names and (self.out / name).is_file():
                os.unlink(self.out / name)
        for name in sorted(names, key=lambda n: (n.endswith(".json"), n)):
            os.replace(self.path / name, self.out / name)
        _fsync(self.out)
        marker.unlink()
        _fsync(self.out)
        self.abort()


def remove_stale(out: Path) -> None:
    """Delete the staging and set-aside directories that runs to ``out`` left when they
    were killed (their process is gone)."""
    places = [(out.parent, f".{out.name}{_STAGING}"), (out.parent, f".{out.name}{_OLD}")]
    if out.is_dir():
        places.append((out, _STAGING))
    for folder, prefix in places:
        with contextlib.suppress(OSError):
            for name in os.listdir(folder):
                if name.startswith(prefix) and not _alive(name[len(prefix) :]):
                    shutil.rmtree(folder / name, ignore_errors=True)


def _alive(tail: str) -> bool:
    """Whether the process whose id starts ``tail`` (``PID-XXXX``) is running."""
    pid = tail.partition("-")[0]
    if not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


#: The errors of a full disk (or of a user's quota).
_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` says the disk is full: an ``OSError`` with ``ENOSPC`` or
    ``EDQUOT``, or an error of a writer that gives only text (TensorFlow's
    ``ResourceExhaustedError``, an error from a worker process) carrying their
    message."""
    if isinstance(error, OSError) and error.errno in _FULL:
        return True
    text = str(error)
    return any(os.strerror(n) in text for n in _FULL)


def _fsync(path: Path) -> None:
    """Flush a file or directory to disk (where the file system allows it).

    Raises:
      OSError: the flush lost data (a full disk, an I/O error): the file is not whole.
    """
    flags = os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno in (*_FULL, errno.EIO):
            raise
    finally:
        os.close(fd)


def _fresh_dir(parent: Path, prefix: str) -> Path:
    """A new, empty directory ``parent/prefix*`` with the mode the user's umask gives
    (`tempfile.mkdtemp` makes it 0700 whatever the umask, and the rename onto the
    output would keep that mode)."""
    while True:
        path = parent / f"{prefix}{uuid.uuid4().hex[:8]}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue


# ------------------------------------------------------------------ input paths
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
        data without a word; an unfinished output (`tfinput._src.core.files`).
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
    seen: set[str] = set()
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
            refuse_unfinished([p] if os.path.isdir(p) else matches)
        for m in matches:
            if m not in seen:
                seen.add(m)
                out.append(m)
    if not out:
        raise SourceError(f"no {what} files given")
    return out


def refuse_unfinished(paths: Sequence[str]) -> None:
    """Raise `SourceError` (`unfinished_part`) for the first path that is part of an
    unfinished output; each folder is looked at once.

    Raises:
      SourceError: naming the path, the marker or staging folder, and what to do.
    """
    seen: set[str] = set()
    for path in paths:
        if "://" in path:
            continue
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        if folder in seen:
            continue
        seen.add(folder)
        unfinished = unfinished_part(path)
        if unfinished:
            raise SourceError(unfinished)
