"""What a ``tfinput`` command shows: the console every command prints with, and its
progress bar (`console`, `progress`), and TensorFlow's own log lines kept out of the
output: `quiet_tensorflow`, called by `tfinput._src.applications.cli.registry.main` before anything
imports TensorFlow, unless the global ``--verbose`` (`wants_verbose`) or the user's
``TF_CPP_MIN_LOG_LEVEL`` says otherwise."""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import importlib.abc
import importlib.util
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import types
    from importlib.machinery import ModuleSpec

    import rich.console
    import rich.progress
    import rich.table

# The lines TensorFlow's C++ runtime (and XLA, absl) writes to stderr: INFO, WARNING and
# ERROR lines in the glog/absl formats (TF 2.20+ logs some whatever TF_CPP_MIN_LOG_LEVEL
# says, e.g. the oneDNN notice as an E line on CPUs without AVX-512), the absl preamble
# and the continuation of the cpu_feature_guard notice. Errors that matter reach the user
# as Python exceptions; F(atal) lines, written just before an abort, are kept.
_TF_NOISE = re.compile(
    r"^(?:[IWE]\d{4} +\d+:\d+:\d+\.\d+ +\d+ [\w./-]+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] \S+:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions:.*rebuild TensorFlow)"
)
# The start of a line that may turn out to be noise once its end arrives.
_TF_NOISE_PREFIX = re.compile(
    r"^(?:[IWE]\d{0,4}(?: .*)?|\d{1,4}(?:-.*)?|WARNING: All log.*|To enable the following.*)$"
)
_TF_WARNING_MODULES = r"(tensorflow|keras|tf_keras|absl|google\.protobuf|h5py)(\.|$)"


def wants_verbose(argv: list[str]) -> bool:
    """Whether the global ``--verbose`` comes before the subcommand in ``argv``."""
    for token in argv:
        if token == "--verbose":
            return True
        if token == "--" or not token.startswith("-"):
            return False
    return False


def quiet_tensorflow(*, verbose: bool = False) -> bool:
    """Keep TensorFlow's C++ and Python log lines out of a command's output.

    Unless ``verbose`` or the user set ``TF_CPP_MIN_LOG_LEVEL``: sets it to ``"2"``
    (warnings and info off, errors kept; ``TF_ENABLE_ONEDNN_OPTS`` is left alone), sets
    the ``tensorflow`` and ``absl`` Python loggers to ERROR, ignores Python warnings
    raised in TensorFlow, Keras and absl, and drops the INFO/WARNING lines TensorFlow
    writes while it loads (before the level applies). Must run before TensorFlow is
    imported; `tfinput._src.applications.cli.registry.main` calls it first.

    Returns:
      Whether anything was changed.
    """
    if verbose or "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        return False
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    for name in ("tensorflow", "absl"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=_TF_WARNING_MODULES)
    if "tensorflow" not in sys.modules and not any(
        isinstance(f, _QuietTensorFlowImport) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _QuietTensorFlowImport())
    return True


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    """Filters stderr (the file descriptor) while ``tensorflow`` itself is imported."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "tensorflow":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)  # once: the real finders do the rest
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        real = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            try:
                with _filtered_stderr():
                    real(module)
            finally:
                with contextlib.suppress(AttributeError):
                    del loader.exec_module

        # A loader that takes no attributes is left as it is (no filter).
        with contextlib.suppress(AttributeError):
            loader.exec_module = exec_module
        return spec


@contextlib.contextmanager
def _filtered_stderr() -> Iterator[None]:
    """Send file descriptor 2 to a temporary file; then replay what is not noise (all
    of it if the body raised)."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all
        yield
        return
    ok = False
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
            ok = True
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            keep = [
                line
                for line in text.splitlines(keepends=True)
                if not ok or not _TF_NOISE.match(line)
            ]
            if keep:
                sys.stderr.write("".join(keep))
                sys.stderr.flush()


# The filter process: reads what the command writes to descriptor 2 and writes every line
# but TensorFlow's log lines to the real stderr (its stdout). Ctrl-C and SIGTERM reach it
# with the command's process group: it ignores them and drains until every writer closes,
# so nothing the command wrote (a traceback, a crash dump) is lost. A partial line is
# passed on at once unless it may still become a log line; then it waits for its end, at
# most a second.
_FILTER = r"""
import os, re, select, signal, sys
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
noise, prefix = re.compile(sys.argv[1].encode()), re.compile(sys.argv[2].encode())

def out(data):
    while data:
        try:
            data = data[os.write(1, data):]
        except OSError:  # the real stderr is gone: keep draining, drop
            return

buf = b""
while True:
    ready, _, _ = select.select([0], [], [], 1.0 if buf else None)
    if not ready:
        out(buf)
        buf = b""
        continue
    try:
        chunk = os.read(0, 1 << 16)
    except OSError:  # a pseudo-terminal whose writers all closed
        chunk = b""
    if not chunk:
        break
    *lines, buf = (buf + chunk).split(b"\n")
    out(b"".join(line + b"\n" for line in lines if not noise.match(line)))
    if buf and not prefix.match(buf):
        out(buf)
        buf = b""
if buf and not noise.match(buf):
    out(buf)
"""


_filtering = False  # whether this process's stderr goes through the filter already


def filter_stderr() -> bool:
    """Drop TensorFlow's C++ log lines from everything this process (and the processes it
    starts) writes to descriptor 2, for the rest of its life.

    TensorFlow and XLA log from C++ straight to the descriptor, some lines whatever
    ``TF_CPP_MIN_LOG_LEVEL`` says, and at any time (the first time an op runs, not only
    while TensorFlow loads). Descriptor 2 becomes a pipe (a pseudo-terminal when stderr
    is a terminal, so progress bars and colours stay) read by a small filter process that
    writes the rest to the real stderr. The filter outlives a crash of this process, so
    a traceback or a fatal error is never lost. `tfinput._src.applications.cli.registry.main` calls it for the
    ``tfinput`` command (not for ``main(argv)`` called from Python) unless ``--verbose``
    or the user's ``TF_CPP_MIN_LOG_LEVEL``.

    Returns:
      Whether the filter was started (not on Windows, nor without a stderr, nor a
      second time).
    """
    global _filtering
    if os.name != "posix" or _filtering:
        return False
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all
        return False
    if os.isatty(saved):
        import termios
        import tty

        read_end, write_end = os.openpty()
        with contextlib.suppress(OSError):
            import fcntl

            size = fcntl.ioctl(saved, termios.TIOCGWINSZ, b"\0" * 8)
            fcntl.ioctl(write_end, termios.TIOCSWINSZ, size)
        tty.setraw(write_end)  # bytes pass as written: the real terminal translates
    else:
        read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _FILTER, _TF_NOISE.pattern, _TF_NOISE_PREFIX.pattern],
            stdin=read_end,
            stdout=saved,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
    except OSError:
        for fd in (read_end, write_end, saved):
            os.close(fd)
        return False
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)
    atexit.register(_stop_filter, proc, saved)
    _filtering = True
    return True


def _stop_filter(proc: subprocess.Popen[bytes], saved: int) -> None:
    """At exit: give descriptor 2 back and let the filter write what it still holds
    (a few seconds at most: processes this one started may still hold the pipe)."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def say(line: str) -> None:
    """``line`` on stderr, with its newline, in one write, flushed.

    ``print(line)`` writes the text and the newline apart, and Python checks for Ctrl-C
    after each write that reaches the descriptor: an interrupt there leaves the line
    without its end, and the next line (``tfinput: interrupted``) is glued to it. Lines a
    command prints while it may be interrupted go through here."""
    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()


#: Columns of a console whose stream is not a terminal (piped or captured output).
PIPED_WIDTH = 160


def console(
    stderr: bool = False, *, piped_width: int = PIPED_WIDTH, highlight: bool = False
) -> rich.console.Console:
    """A rich console on stdout (or stderr).

    Args:
      stderr: Print to stderr (progress and remarks) instead of stdout (the result).
      piped_width: Columns when the stream is not a terminal: a wide, stable layout for
        piped or captured output. On a terminal, the terminal's width.
      highlight: Let rich colour numbers and strings it recognises (terminals only).
    """
    stream = sys.stderr if stderr else sys.stdout
    return _console_class()(
        file=stream, highlight=highlight, width=None if stream.isatty() else piped_width
    )


@functools.cache
def _console_class() -> type[rich.console.Console]:
    """rich's ``Console``, raising `BrokenPipeError` when its reader closed the stream
    (rich's own default exits with 1, which `tfinput check` uses for "problems found");
    `tfinput._src.applications.cli.registry.run_command` turns it into its exit code."""
    from rich.console import Console

    class PipeConsole(Console):  # type: ignore[misc]
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader closed the stream")

    return PipeConsole


def progress() -> rich.progress.Progress:
    """A rich progress display on stderr (silent when stderr is not a terminal)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console(stderr=True),
        transient=False,
        disable=not sys.stderr.isatty(),
    )


class ProgressLines:
    """Progress of a long step where no bar can show it (stderr piped, captured, a
    log): a line on stderr every ``every`` seconds once the step has run that long,
    ``check: 4,000 of 10,000 files (20 s)``, and a last one when it ends. A step that
    ends sooner prints nothing.

    Call it as ``progress(done, total)``, as often as the step likes.

    Args:
      description: What is in progress (``check``).
      unit: What is counted (``files``).
      every: Seconds between lines (fewer lines against a fresher count).
      clock: Seconds from any origin (injectable for tests).
    """

    def __init__(
        self,
        description: str,
        unit: str,
        *,
        every: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.description, self.unit, self.every, self.clock = description, unit, every, clock
        self.start: float | None = None
        self.last: float | None = None  # when the last line was printed
        self.ended = False

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if self.start is None:
            self.start = now
        if self.ended:
            return
        since = now - (self.last if self.last is not None else self.start)
        if since < self.every and not (done >= total and self.last is not None):
            return
        self.last = now
        self.ended = done >= total
        say(f"{self.description}: {done:,} of {total:,} {self.unit} ({now - self.start:.0f} s)")


@contextlib.contextmanager
def progress_of(description: str, unit: str) -> Iterator[Callable[[int, int], None]]:
    """``progress(done, total)`` of a long step: a bar (`progress`) on a terminal,
    `ProgressLines` elsewhere, so that a piped or logged run shows it too."""
    if not sys.stderr.isatty():
        yield ProgressLines(description, unit)
        return
    with progress() as bar:
        task = bar.add_task(description, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def rich_table(title: str, columns: Sequence[str], **options: object) -> rich.table.Table:
    """A rich table titled ``title`` with ``columns``, whose long cells fold onto more
    lines; ``options`` are more `rich.table.Table` arguments (``caption=``)."""
    from rich.table import Table

    t = Table(title=title, **options)  # type: ignore[arg-type]
    for column in columns:
        t.add_column(column, overflow="fold")
    return t
