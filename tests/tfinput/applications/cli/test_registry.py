"""`tfinput._src.applications.cli.registry`: the command list, ``tfinput --help``, and `main`'s exit codes
and one-line errors (usage, ConfigError, DataError, interrupts)."""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cli_main, run_cli
from tfinput import cli
from tfinput._src.applications.cli import registry
from tfinput._src.applications.cli.registry import Command, run_command
from tfinput.errors import ConfigError, DataError


def test_usage_error_exit_code():
    proc = subprocess.run(
        [sys.executable, "-m", "tfinput.cli", "nope"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_console_script_help():
    # the script installed beside this interpreter (a venv's bin/ need not be on PATH)
    script = Path(sys.executable).with_name("tfinput")
    proc = subprocess.run(
        [str(script) if script.is_file() else shutil.which("tfinput") or "tfinput", "--help"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0
    for command in ("schema", "check"):
        assert command in proc.stdout


def test_the_parser_does_not_load_tensorflow():
    # main() quiets TensorFlow before anything imports it: importing the CLI and building
    # its parser (every subcommand's module) must not load TensorFlow.
    code = (
        "import sys\n"
        "from tfinput._src.applications.cli.registry import build_parser\n"
        "build_parser().parse_args(['check', 'x'])\n"
        "print(sorted(m for m in ('tensorflow', 'keras', 'optuna', 'plotly') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_help_lists_every_registered_command():
    from tfinput._src.applications.cli.registry import commands

    names = [c.name for c in commands()]
    assert names == [
        "schema", "check", "doctor", "tune", "demo", "convert", "datagen", "bench", "export", "serve",
        "profile", "inspect",
    ]  # fmt: skip
    text = registry.build_parser().format_help()
    listed = [line.split()[0] for line in text.splitlines() if line.startswith("    ")]
    assert [n for n in listed if n in names] == names


@pytest.mark.parametrize(
    "argv, line",
    [
        (["check", "x", "--schema", "no.json"], "tfinput: error: cannot read schema file"),
        (["tune", "--demo", "--n-trials", "0"], "tfinput tune: error: --n-trials must be >= 1"),
        (["inspect"], "tfinput inspect: error: give a LOGDIR to analyse"),
    ],
    ids=["unnamed", "tune", "inspect"],
)
def test_errors_are_one_line_on_stderr_with_exit_code_2(tmp_path, monkeypatch, capsys, argv, line):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(line) and "Traceback" not in err


# ------------------------------------------------- main on the real commands
def test_every_command_has_its_help_page(capsys):
    for command in registry.commands():
        with pytest.raises(SystemExit) as exit_:
            cli_main([command.name, "--help"])
        assert exit_.value.code == 0, command.name
        out = capsys.readouterr().out
        assert out.startswith(f"usage: tfinput {command.name}"), command.name
        for action in command.actions:  # tfinput schema: infer, tpu
            assert action.name in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nope"], "argument COMMAND: invalid choice: 'nope'"),
        ([], "the following arguments are required: COMMAND"),
        (["schema"], "the following arguments are required: ACTION"),
        (["check"], "the following arguments are required: paths"),
        (["check", "x", "--batch-size", "many"], "argument --batch-size: invalid int value"),
    ],
    ids=["unknown-command", "no-command", "no-action", "no-paths", "bad-int"],
)
def test_usage_errors_exit_2_with_argparse_usage(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        cli_main(argv)
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("usage: tfinput") and message in err


def test_version_prints_the_doctor_summary(capsys):
    from tfinput.doctor import summary

    with pytest.raises(SystemExit) as exit_:
        cli_main(["--version"])
    assert exit_.value.code == 0
    # argparse wraps the line to the terminal width
    assert capsys.readouterr().out.split() == summary().split()


def test_config_error_of_a_real_command(small_tfrecord, capsys):
    # no --schema and no schema.json beside the data: ConfigError -> exit code 2
    code, out, err = run_cli(capsys, "check", small_tfrecord[0])
    assert code == 2 and out == ""
    assert err.startswith("tfinput: error: no --schema given and no schema.json next to")
    assert len(err.strip().splitlines()) == 1


def test_data_error_of_a_real_command(tmp_path, capsys):
    # a file that is no TFRecord: DataError -> exit code 2, naming the file
    path = tmp_path / "garbage.tfrecord"
    path.write_bytes(b"not a record at all " * 8)
    code, out, err = run_cli(capsys, "schema", "infer", path)
    assert code == 2 and out == ""
    assert err.startswith(f"tfinput: error: {path}: not a readable TFRecord file")
    assert len(err.strip().splitlines()) == 1
    # TensorFlow's sentence, without its graph-node noise
    assert "corrupted record" in err.lower() or "truncated record" in err.lower(), err
    assert "function_node" not in err and "[Op:" not in err, err


# --------------------------------------- the shared error path, command by command
def _raise(error: BaseException | None, code: int | None = 0):
    def run(args: argparse.Namespace) -> int | None:
        if error is not None:
            raise error
        return code

    return run


MULTI_LINE = DataError("a.tfrecord: record 3: feature 'ids'\nexpected int64, found string")


@pytest.mark.parametrize(
    "outcome, options, code, err",
    [
        (None, {}, 0, ""),
        (1, {}, 1, ""),
        (ConfigError("--n-trials must be >= 1"), {}, 2, "tfinput: error: --n-trials must be >= 1\n"),
        (MULTI_LINE, {}, 2, f"tfinput: error: {MULTI_LINE}\n"),
        (MULTI_LINE, {"error_names_command": True}, 2, f"tfinput x: error: {MULTI_LINE}\n"),
        (
            MULTI_LINE,
            {"error_first_line": True},
            2,
            "tfinput: error: a.tfrecord: record 3: feature 'ids'\n",
        ),
        (KeyboardInterrupt(), {}, 130, "tfinput: interrupted\n"),
    ],
    ids=[
        "none-is-0", "problems-1", "config-error", "data-error", "names-command", "first-line",
        "ctrl-c",
    ],
)  # fmt: skip
def test_run_command_exit_codes_and_error_lines(capsys, outcome, options, code, err):
    if isinstance(outcome, BaseException):
        command = Command(name="x", help="", run=_raise(outcome), **options)
    else:
        command = Command(name="x", help="", run=_raise(None, outcome), **options)
    assert command(argparse.Namespace()) == code
    assert capsys.readouterr() == ("", err)


def test_other_exceptions_are_not_swallowed():
    # a bug is a traceback, not a one-line usage error
    command = Command(name="x", help="", run=_raise(ZeroDivisionError("bug")))
    with pytest.raises(ZeroDivisionError):
        run_command(command, argparse.Namespace())


_CLOSED_EARLY = """
tfinput() { "$PY" -m tfinput.cli "$@"; }
tfinput check "$@" 2>"$ERR/closed" | head -n 0; echo "closed ${PIPESTATUS[0]}"
tfinput check "$@" 2>"$ERR/first" | head -1; echo "first line ${PIPESTATUS[0]}"
"""


def test_a_reader_that_closes_stdout_early_is_not_problems_found(
    small_tfrecord, schema_file, tmp_path
):
    """``tfinput check DATA | head -1``: a reader that closes the pipe ends the command
    quietly with 141 (128 + SIGPIPE, as a shell reports ``yes | head -1``), never 1
    ("problems found"), and no traceback. With ``head -n 0`` the pipe is closed before
    the first line (141 every time); with ``head -1`` after it, so the command may also
    finish first (0: the data are fine)."""
    root = Path(__file__).resolve().parents[4]
    env = {**os.environ, "PY": sys.executable, "ERR": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    data = small_tfrecord[:2]
    proc = subprocess.run(
        ["bash", "-c", _CLOSED_EARLY, "closed-early", *data, "--schema", schema_file],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=900,
    )
    lines = proc.stdout.splitlines()
    assert lines[0] == "closed 141", proc.stdout
    assert lines[1] == f"{data[0]}: 250 records  ok"
    assert lines[2] in ("first line 141", "first line 0")
    for name in ("closed", "first"):
        err = (tmp_path / name).read_text()
        assert "Traceback" not in err and "BrokenPipe" not in err and "tfinput: " not in err, err


def test_a_broken_pipe_that_is_not_stdout_is_not_swallowed(capsys):
    """A `BrokenPipeError` from anything but a closed stdout (a socket, a worker's pipe)
    is a real failure: raised, not turned into the quiet exit code."""
    command = Command(name="x", help="", run=_raise(BrokenPipeError(32, "worker pipe")))
    with pytest.raises(BrokenPipeError, match="worker pipe"):
        run_command(command, argparse.Namespace())
    assert registry.STDOUT_CLOSED == 141


def test_a_command_with_actions_has_no_run_of_its_own():
    command = Command(
        name="group", help="", actions=(Command(name="a", help="", run=_raise(None)),)
    )
    with pytest.raises(TypeError, match="'group' has actions"):
        run_command(command, argparse.Namespace())


def _add_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--level", type=int, default=0)


def _by_level(args: argparse.Namespace) -> int:
    if args.level == 2:
        raise DataError("data.parquet: feature 'price': expected float, found string")
    return args.level


#: A command of this test module, added to `COMMANDS` the way a new command is.
PROBE_COMMAND = Command(
    name="probe",
    help="a command of the tests",
    arguments=_add_level,
    run=_by_level,
    error_names_command=True,
)


def test_a_command_is_one_line_in_commands(monkeypatch, capsys):
    monkeypatch.setattr(registry, "COMMANDS", (*registry.COMMANDS, f"{__name__}:PROBE_COMMAND"))
    assert "probe" in registry.build_parser().format_help()
    assert run_cli(capsys, "probe") == (0, "", "")
    assert run_cli(capsys, "probe", "--level", "1") == (1, "", "")
    code, out, err = run_cli(capsys, "probe", "--level", "2")
    assert (code, out) == (2, "")
    assert (
        err == "tfinput probe: error: data.parquet: feature 'price': expected float, found string\n"
    )


def test_after_ctrl_c_a_tensorflow_teardown_error_does_not_follow_the_last_line():
    """A process that was interrupted: a TensorFlow object left half-built (its
    ``__del__`` raising ``AttributeError`` at collection, as an ``AtomicFunction`` cut
    short by Ctrl-C does) prints nothing after tfinput's line; the same error from
    other code is still reported."""
    code = """
import gc, sys
from tfinput._src.applications.cli.registry import forgive_interrupted_teardown

def make(module):
    def __del__(self):
        return self._generated_graph  # never set: construction was cut short
    __del__.__module__ = module
    return type("Half", (), {"__del__": __del__})

forgive_interrupted_teardown()
print("tfinput: interrupted", file=sys.stderr)
make("tensorflow.python.eager.polymorphic_function.atomic_function")()
gc.collect()
class Counted:  # an AtomicFunction's reference count already gone: KeyError
    def __del__(self):
        raise KeyError((1, b"__inference_Dataset_map_lambda_1025"))
Counted.__del__.__module__ = "tensorflow.python.eager.polymorphic_function.atomic_function"
Counted()
gc.collect()
print("--- other code", file=sys.stderr)
make("mine")()
gc.collect()
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    ).stderr.splitlines()
    assert out[:2] == ["tfinput: interrupted", "--- other code"], out
    assert "AttributeError" in out[-1] and "_generated_graph" in out[-1]


def test_a_ctrl_c_that_lands_in_a_garbage_collector_callback_still_stops_the_command():
    """Ctrl-C raised inside a garbage-collector callback (JAX's, which Keras loads)
    cannot propagate there: Python would print ``Exception ignored`` with a traceback
    and go on. The ``tfinput`` process delivers it to the main thread again, which
    stops as on any Ctrl-C, and prints no traceback."""
    code = """
import gc, signal, sys, time
from tfinput._src.applications.cli.registry import keep_interrupts

# Python's Ctrl-C handler, as a command started from a terminal has it: a suite run in
# the background of a non-interactive shell ignores SIGINT, and its children inherit
# that (interrupt_main then does nothing, as a real Ctrl-C would not reach them either).
signal.signal(signal.SIGINT, signal.default_int_handler)
keep_interrupts()
pressed = [True]

def callback(phase, info):  # Ctrl-C landing while the collector runs this
    if pressed and phase == "start":
        pressed.clear()
        raise KeyboardInterrupt

gc.callbacks.append(callback)
try:
    gc.collect()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.01)
    print("--- the interrupt was lost", file=sys.stderr)
except KeyboardInterrupt:
    print("tfinput: interrupted", file=sys.stderr)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.stderr.splitlines() == ["tfinput: interrupted"], result.stderr


def test_a_line_said_is_one_write_with_its_newline(monkeypatch):
    """Python checks for Ctrl-C after each write that reaches the descriptor: a line
    written in two parts (``print``: the text, then the newline) can be left without
    its end, and the next line glued to it. `say` writes both at once."""
    from tfinput._src.applications.cli.console import say

    writes = []

    class Stream(io.StringIO):
        def write(self, s):
            writes.append(s)
            return super().write(s)

    monkeypatch.setattr(sys, "stderr", Stream())
    say("trial 0 [autotune] complete")
    say("tfinput: interrupted")
    assert writes == ["trial 0 [autotune] complete\n", "tfinput: interrupted\n"]
