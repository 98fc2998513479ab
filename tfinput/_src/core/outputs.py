"""Outputs written whole or not at all, and output paths checked before any work.

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
is refused by every reader (`tfinput._src.core.sources.files.data_files`), naming it,
until a run to the same output finishes.

`check_writable` is the check every command with an output path makes before any work:
the path can be created (its nearest existing folder is a folder and takes a new file),
with an error naming the path and the reason otherwise; it leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfinput._src.core.errors import ConfigError

__all__ = ["INCOMPLETE", "StagedDir", "check_writable", "unfinished_output"]

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


class StagedDir:
    """A directory output written under a hidden name and committed whole.

    Write every file into `path`, then call `commit`; leaving a ``with`` block without
    a commit (an error, Ctrl-C) deletes what was written.

    Args:
      out: The output directory (created at the commit if it does not exist).
      replaces: ``name -> bool``: whether an entry already in ``out`` is an older
        output's file, deleted at the commit (default: none; staged files replace
        entries of the same name in any case).

    Raises:
      ConfigError: ``out`` is a file, or no staging directory can be created.
    """

    def __init__(
        self, out: str | os.PathLike[str], *, replaces: Callable[[str], bool] | None = None
    ):
        self.out = Path(os.path.abspath(os.fspath(out)))
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

    def __exit__(self, *exc: Any) -> None:
        self.abort()

    def abort(self) -> None:
        """Delete the staging directory and what it holds (nothing after a commit)."""
        shutil.rmtree(self.path, ignore_errors=True)

    def commit(self) -> None:
        """Flush every staged file to disk and put them in place as one output."""
        names = sorted(os.listdir(self.path))
        for name in names:
            _fsync(self.path / name)
        _fsync(self.path)
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
        marker.write_text(f"tfinput (pid {os.getpid()}) is moving files into this output\n")
        _fsync(marker)
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


def _fsync(path: Path) -> None:
    """Flush a file or directory to disk (where the file system allows it)."""
    flags = os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
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
