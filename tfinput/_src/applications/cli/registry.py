"""The command registry: every ``tfinput`` subcommand, and the one `main` that runs them.

A subcommand is a `Command`: its name, its help, a function adding its arguments and
a function running it. `COMMANDS` says where each one lives, in the order ``tfinput
--help`` lists them; the modules of `tuners` and `profiles` are imported only when the
parser is built, so `tfinput` never depends on them at import time. A new command is
a `Command` in a module of its own (`tfinput._src.applications.cli.commands` for the ones that need only
`tfinput`) and one line in `COMMANDS`.

Exit codes: a command's run returns 0 (done) or 1 (a report was printed but the data or
the trace has problems) and raises `tfinput.errors.TfinputError` for bad usage or input,
which `run_command` prints as one line on stderr (no traceback) and turns into 2; Ctrl-C
gives 130; a reader that closes stdout early (``tfinput check DATA | head -1``) gives 141
(128 + SIGPIPE, what a shell reports for a program killed by SIGPIPE), quietly.
Argument errors are argparse's own (exit code 2, usage on stderr).
"""

from __future__ import annotations

import _thread
import argparse
import dataclasses
import importlib
import logging
import os
import select
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tfinput._src.applications.cli.console import (
    filter_stderr,
    quiet_tensorflow,
    say,
    wants_verbose,
)
from tfinput._src.core.errors import TfinputError

#: Exit code when stdout's reader closed it early: 128 + SIGPIPE, as a shell reports a
#: program that SIGPIPE ended (``yes | head -1``), so it never reads as "problems found".
STDOUT_CLOSED = 141

#: Every subcommand as ``MODULE:ATTRIBUTE``, in the order ``tfinput --help`` lists them.
COMMANDS = (
    "tfinput._src.applications.cli.commands.schema:SCHEMA_COMMAND",
    "tfinput._src.applications.cli.commands.check:CHECK_COMMAND",
    "tfinput._src.applications.cli.commands.check:DOCTOR_COMMAND",
    "tuners._cli:TUNE_COMMAND",
    "tuners._cli:DEMO_COMMAND",
    "tfinput._src.applications.cli.commands.convert:CONVERT_COMMAND",
    "tfinput._src.applications.cli.commands.convert:DATAGEN_COMMAND",
    "tfinput._src.applications.cli.commands.bench:BENCH_COMMAND",
    "tfinput._src.applications.cli.commands.serve:EXPORT_COMMAND",
    "tfinput._src.applications.cli.commands.serve:SERVE_COMMAND",
    "profiles._cli:PROFILE_COMMAND",
    "profiles._cli:INSPECT_COMMAND",
)


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of a command that takes none of its own."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Command:
    """One ``tfinput`` subcommand: its arguments and its run.

    Calling a command (``command(args)``) runs it through `run_command`, the error path
    every command shares.

    Attributes:
      name: The word on the command line.
      help: Its line in ``tfinput --help``.
      run: ``args -> exit code``: 0 done, 1 a report was printed but the data (or
        trace) has problems. Raises `TfinputError` for bad usage or input.
      arguments: Adds the command's own arguments to its parser.
      description: The paragraph of ``tfinput NAME --help`` (None: none).
      actions: Sub-actions (``tfinput schema infer``, ``tfinput schema tpu``); a command
        with actions has no ``run`` of its own.
      error_names_command: Errors read ``tfinput NAME: error: ...`` rather than
        ``tfinput: error: ...``.
      error_first_line: Only the first line of an error message is printed.
    """

    name: str
    help: str
    run: Callable[[argparse.Namespace], int] | None = None
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    description: str | None = None
    actions: tuple[Command, ...] = ()
    error_names_command: bool = False
    error_first_line: bool = False

    def register(self, subparsers: Any) -> argparse.ArgumentParser:
        """Add this command (and its actions) to what ``add_subparsers()`` returned.

        The parsed arguments carry the command to run as ``args.func``.

        Returns:
          The command's parser.
        """
        parser = subparsers.add_parser(self.name, help=self.help, description=self.description)
        self.arguments(parser)
        if self.actions:
            actions = parser.add_subparsers(
                dest=f"{self.name}_command", required=True, metavar="ACTION"
            )
            for action in self.actions:
                action.register(actions)
        else:
            parser.set_defaults(func=self)
        return parser

    def __call__(self, args: argparse.Namespace) -> int:
        """Run the command with the shared error path; returns the exit code."""
        return run_command(self, args)


def commands() -> list[Command]:
    """Every `Command` of `COMMANDS`, in order (imports the modules that hold them)."""
    found = []
    for spec in COMMANDS:
        module, _, attribute = spec.partition(":")
        found.append(getattr(importlib.import_module(module), attribute))
    return found


def build_parser() -> argparse.ArgumentParser:
    """The ``tfinput`` argument parser with every registered command (no TensorFlow)."""
    from tfinput._src.applications.doctor import summary

    parser = argparse.ArgumentParser(
        prog="tfinput",
        description="Fixed-shape tf.data input pipelines for ranking models: build, "
        "measure, tune and profile.",
    )
    parser.add_argument("--version", action="version", version=summary())
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's own log lines and warnings (hidden by default unless "
        "TF_CPP_MIN_LOG_LEVEL is set), and the traceback of every failed trial (not "
        "only the first)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands():
        command.register(subparsers)
    return parser


def run_command(command: Command, args: argparse.Namespace) -> int:
    """Run ``command`` and return its exit code: the one error path of every command.

    A `TfinputError` is printed as ``tfinput[ NAME]: error: MESSAGE`` on stderr and
    gives 2; Ctrl-C prints ``tfinput: interrupted`` and gives 130; stdout closed by its
    reader (``| head -1``) gives `STDOUT_CLOSED`, with nothing printed.
    """
    if command.run is None:
        raise TypeError(f"command {command.name!r} has actions, not a run of its own")
    try:
        code = int(command.run(args) or 0)
        sys.stdout.flush()  # a closed stdout shows here, not in the flush at exit
        return code
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # Nothing more can reach the reader; later writes and the flush at exit go nowhere.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return STDOUT_CLOSED
    except TfinputError as e:
        message = str(e)
        if command.error_first_line:
            message = message.splitlines()[0] if message else type(e).__name__
        where = f"tfinput {command.name}" if command.error_names_command else "tfinput"
        print(f"{where}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        forgive_interrupted_teardown()
        say("tfinput: interrupted")
        return 130


def forgive_interrupted_teardown() -> None:
    """After Ctrl-C, keep tfinput's message the last line: a TensorFlow object whose
    construction the interrupt cut short (a traced function's ``AtomicFunction``) can
    fail in its ``__del__`` when collected at exit (``AttributeError``, or ``KeyError``
    from its reference count), and Python would print that traceback after it. Such
    errors from TensorFlow's ``__del__`` methods are dropped from then on; every other
    unraisable exception is reported."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        where = unraisable.object
        if (
            isinstance(unraisable.exc_value, Exception)
            and getattr(where, "__name__", "") == "__del__"
            and getattr(where, "__module__", "").startswith("tensorflow")
        ):
            return
        previous(unraisable)

    sys.unraisablehook = hook


def keep_interrupts() -> None:
    """Make a Ctrl-C that lands where Python cannot raise it count.

    Python raises ``KeyboardInterrupt`` at the next instruction of the main thread. When
    that instruction belongs to a garbage-collector callback (JAX registers one, and
    Keras loads JAX) or a ``__del__``, the exception cannot propagate: Python prints
    ``Exception ignored in ...`` with a traceback and goes on as if no key was pressed.
    This hook delivers such an interrupt to the main thread again (`_thread.interrupt_main`),
    where it stops the command as Ctrl-C should, and prints nothing. Other unraisable
    exceptions are reported as before. For the ``tfinput`` process only (`main` with no
    ``argv``): a library does not change its caller's hooks."""
    previous = sys.unraisablehook

    def again() -> None:
        # From another thread, once the hook has returned: raised in the hook itself,
        # the interrupt would be lost the same way. One that lands in a callback again
        # comes back here.
        time.sleep(0.05)
        _thread.interrupt_main()

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            threading.Thread(target=again, name="tfinput-ctrl-c", daemon=True).start()
            return
        previous(unraisable)

    sys.unraisablehook = hook


def _stdout_closed() -> bool:
    """Whether stdout's reader is gone (a pipe whose read end was closed): a
    `BrokenPipeError` from anything else (a socket, a worker's pipe) is a real error."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    if not hasattr(select, "poll"):  # no poll (Windows): a broken stdout is the likely one
        return True
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poll.poll(0))


def main(argv: Sequence[str] | None = None) -> int:
    """The ``tfinput`` command: parse ``argv`` (default ``sys.argv[1:]``), run, exit code."""
    # Before anything imports TensorFlow: its C++ log lines stay out of the output
    # unless --verbose (or the user's own TF_CPP_MIN_LOG_LEVEL).
    tokens = list(sys.argv[1:] if argv is None else argv)
    verbose = wants_verbose(tokens)
    if quiet_tensorflow(verbose=verbose) and argv is None:
        filter_stderr()  # the ``tfinput`` process itself: TF's C++ lines at any time
    if argv is None:
        keep_interrupts()
    if verbose:  # e.g. the tuner logs every failed trial's traceback, not only the first
        logging.getLogger("tfinput").setLevel(logging.DEBUG)
    args = build_parser().parse_args(argv)
    return run_command(args.func, args)
