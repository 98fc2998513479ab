"""The console every ``tfinput`` command prints with, and its progress bar."""

from __future__ import annotations

import errno
import functools
import sys
from typing import Any

__all__ = ["PIPED_WIDTH", "console", "progress"]

#: Columns of a console whose stream is not a terminal (piped or captured output).
PIPED_WIDTH = 160


def console(
    stderr: bool = False, *, piped_width: int = PIPED_WIDTH, highlight: bool = False
) -> Any:
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
def _console_class() -> Any:
    """rich's ``Console``, raising `BrokenPipeError` when its reader closed the stream
    (rich's own default exits with 1, which `tfinput check` uses for "problems found");
    `tfinput._src.applications.cli.registry.run_command` turns it into its exit code."""
    from rich.console import Console

    class PipeConsole(Console):  # type: ignore[misc]
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader closed the stream")

    return PipeConsole


def progress() -> Any:
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
