"""`tfinput._src.applications.cli.console`: TensorFlow's log lines kept out of a command's output unless
``--verbose`` or the user's ``TF_CPP_MIN_LOG_LEVEL`` says otherwise."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import sys
import warnings

import pytest

from tfinput._src.applications.cli import console as cli_console
from tfinput._src.applications.cli.console import quiet_tensorflow, wants_verbose

TF_NOISE = ("cpu_feature_guard", "oneDNN", "absl::InitializeLog", "XLA service")


def _without_tf_log_level():
    return {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}


def _tfinput(*args, env, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "tfinput.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


# What a TensorFlow, XLA or absl C++ log line looks like, whatever its level.
TF_LOG_LINE = re.compile(
    r"^(?:[IWEF]\d{4} +\d+:\d+:\d+\.\d+ +\d+ \S+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] \S+:\d+\])"
)

_SMALL_TUNE = (
    "--n-trials 2 --batch-size 50 --windows 1 --window-batches 2 --warmup-batches 1 "
    "--confirm-top 1 --confirm-windows 1 --no-breakdown --no-format-advice"
)

# command -> (arguments, a line its output must hold): each on small data, with the
# steps that run TensorFlow's ops (a Keras ranking model; the oneDNN notice TF 2.20+
# logs as an E line on CPUs without AVX-512 comes from those ops, not from the import).
COMMANDS = {
    "demo": (
        "demo --n-trials 1 --step input_only --no-breakdown --no-format-advice --out {tmp}/demo "
        "--data-dir {tmp}/data",
        "demo finished in",
    ),
    "tune": (
        f"tune {{data}} --schema {{schema}} --step ranking --out {{tmp}}/tune {_SMALL_TUNE}",
        "best config:",
    ),
    "bench": (
        "bench {data} --schema {schema} --batch-size 50 --windows 2 --window-batches 2 "
        "--warmup-batches 1",
        "best:",
    ),
    "profile": (
        "profile --pipeline {tmp}/pipelines.py:make --step ranking --steps 3 "
        "--warmup 1 --logdir {tmp}/logs --config {tmp}/config.json",
        "Verdict:",
    ),
    "check": ("check {data} --schema {schema}", "1,000 records"),
    "convert": (
        "convert {data} --schema {schema} --input-format tfrecord --to columnar "
        "--out {tmp}/columnar",
        "columnar",
    ),
}


# The commands run in turn in one process, each through the ``tfinput`` entry point as
# the console script calls it (so the stderr filter is the command's own), with a marker
# line before each on both streams and its exit code after it. One TensorFlow import per
# group instead of one per command; the two groups are split between the CI ends.
_IN_TURN = """
import json, sys
from tfinput.cli import main

for argv in json.loads(sys.argv[1]):
    for stream in (sys.stdout, sys.stderr):
        print(f"@@@ tfinput {argv[0]}", file=stream, flush=True)
    sys.argv = ["tfinput", *argv]
    print(f"@@@ exit {main()}", flush=True)
"""
GROUPS = {
    "demo-check-convert": ("demo", "check", "convert"),
    "tune-bench-profile": ("tune", "bench", "profile"),
}


def _by_command(text: str) -> dict[str, str]:
    """Each command's share of a stream, by the marker lines."""
    out: dict[str, str] = {}
    for chunk in text.split("@@@ tfinput ")[1:]:
        name, _, rest = chunk.partition("\n")
        out[name] = rest
    return out


@pytest.mark.slow
@pytest.mark.parametrize("group", list(GROUPS))
def test_commands_print_no_tensorflow_log_lines(group, small_tfrecord, schema_file, tmp_path):
    """Each command run as a user runs it (the ``tfinput`` entry point, no
    TF_CPP_MIN_LOG_LEVEL, no --verbose) prints none of TensorFlow's C++ log lines, on
    stdout or stderr, and no Python warning."""
    (tmp_path / "pipelines.py").write_text(
        "import tfinput\n"
        f"FILES = {list(small_tfrecord)!r}\n"
        "def make(config=None):\n"
        f"    schema = tfinput.Schema.from_json({schema_file!r})\n"
        "    return tfinput.tfrecord(FILES, schema)\n"
    )
    (tmp_path / "config.json").write_text('{"batch_size": 50}')
    fill = {"data": " ".join(small_tfrecord), "schema": schema_file, "tmp": tmp_path}
    argvs = [shlex.split(COMMANDS[c][0].format(**fill)) for c in GROUPS[group]]
    proc = subprocess.run(
        [sys.executable, "-c", _IN_TURN, json.dumps(argvs)],
        capture_output=True,
        text=True,
        env=_without_tf_log_level(),
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out, err = _by_command(proc.stdout), _by_command(proc.stderr)
    for command in GROUPS[group]:
        said = out.get(command, "") + err.get(command, "")
        assert "@@@ exit 0" in out.get(command, ""), (command, said[-3000:])
        assert COMMANDS[command][1] in said, (command, said[-3000:])
    lines = (proc.stdout + proc.stderr).splitlines()
    logged = [line for line in lines if TF_LOG_LINE.match(line)]
    assert logged == [], "\n".join(logged)
    assert not [line for line in lines if any(n in line for n in TF_NOISE)]
    assert "Warning:" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
def test_verbose_shows_tensorflow_log_lines(small_tfrecord, schema_file):
    env = _without_tf_log_level()
    plain = subprocess.run(
        [sys.executable, "-c", "import tensorflow"], capture_output=True, text=True, env=env
    )
    proc = _tfinput("--verbose", "check", *small_tfrecord, "--schema", schema_file, env=env)
    assert proc.returncode == 0, proc.stderr
    for marker in ("oneDNN", "cpu_feature_guard"):
        # whatever this TensorFlow build prints by itself comes back with --verbose
        assert (marker in proc.stderr) == (marker in plain.stderr), marker


@pytest.fixture
def restore_loggers():
    """The ``tensorflow`` and ``absl`` logger levels as they were before the test."""
    levels = {n: logging.getLogger(n).level for n in ("tensorflow", "absl")}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.parametrize(
    "verbose, preset, expected",
    [(False, None, "2"), (True, None, None), (False, "0", "0")],
    ids=["quiet", "verbose", "user-set"],
)
def test_quiet_tensorflow_sets_the_log_level_unless_asked(monkeypatch, verbose, preset, expected):
    import logging
    import warnings

    from tfinput._src.applications.cli.console import quiet_tensorflow

    if preset is None:
        monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    else:
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", preset)
    levels = {n: logging.getLogger(n).level for n in ("tensorflow", "absl")}
    try:
        with warnings.catch_warnings():
            changed = quiet_tensorflow(verbose=verbose)
        assert os.environ.get("TF_CPP_MIN_LOG_LEVEL") == expected
        assert changed is (expected == "2")
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


@pytest.mark.parametrize(
    "argv, verbose",
    [
        (["--verbose", "check", "x"], True),
        (["check", "x", "--verbose"], False),  # a global option: before the subcommand
        (["check", "--", "--verbose"], False),
        ([], False),
    ],
    ids=["global", "after-subcommand", "after-dashes", "empty"],
)
def test_wants_verbose(argv, verbose):
    from tfinput._src.applications.cli.console import wants_verbose

    assert wants_verbose(argv) is verbose


def test_wants_verbose_after_other_global_options():
    assert wants_verbose(["--version", "--verbose", "check"]) is True
    assert wants_verbose(["--", "--verbose"]) is False


def test_quiet_tensorflow_silences_loggers_and_python_warnings(monkeypatch, restore_loggers):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert quiet_tensorflow() is True
        for module in ("tensorflow.python.data.ops", "keras.src.backend", "absl.flags", "mylib"):
            warnings.warn_explicit(f"from {module}", UserWarning, "x.py", 1, module=module)
    assert [str(w.message) for w in caught] == ["from mylib"]
    assert logging.getLogger("tensorflow").level == logging.ERROR
    assert logging.getLogger("absl").level == logging.ERROR
    # TensorFlow is already imported in this process: no import hook is left waiting
    assert "tensorflow" in sys.modules
    assert not any(isinstance(f, cli_console._QuietTensorFlowImport) for f in sys.meta_path)


# An absl INFO line, a glog-style WARNING line, the absl preamble and the continuation
# of the cpu_feature_guard notice (the lines TensorFlow writes while it loads) ...
NOISE = (
    "I0000 00:00:1700000000.123456    4242 cpu_feature_guard.cc:210] This TensorFlow binary "
    "is optimized to use available CPU instructions.\n"
    "2025-01-02 03:04:05.678901: W tensorflow/core/util/port.cc:113] oneDNN custom "
    "operations are on.\n"
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow "
    "with the appropriate compiler flags.\n"
    "E0000 00:00:1700000000.123456    4242 util.cc:131] oneDNN supports DT_INT32 only on "
    "platforms with AVX-512. Falling back to the default Eigen-based implementation.\n"
)
# ... and the lines that must stay: fatal errors, and anything that is not TensorFlow's.
KEPT = (
    "F0000 00:00:1700000000.123456    4242 cuda_dnn.cc:8310] Check failed: stream != nullptr\n"
    "my own message\n"
)


def test_filtered_stderr_drops_tensorflow_info_and_warning_lines(capfd):
    with cli_console._filtered_stderr():
        os.write(2, (NOISE + KEPT).encode())
    assert capfd.readouterr().err == KEPT


def test_filtered_stderr_replays_everything_when_the_import_fails(capfd):
    with pytest.raises(ImportError), cli_console._filtered_stderr():
        os.write(2, (NOISE + KEPT).encode())
        raise ImportError("libtensorflow_framework.so.2: cannot open shared object file")
    # Everything written comes back, once and in order. Not `==`: other threads of this
    # process may write to descriptor 2 meanwhile and are replayed too (seen: a tf.data
    # service client of an earlier test in the same worker logging failed heartbeats).
    assert capfd.readouterr().err.count(NOISE + KEPT) == 1


_FILTERED_CHILD = """
import os, sys
from tfinput._src.applications.cli.console import filter_stderr
assert filter_stderr()
os.write(2, sys.argv[1].encode())
print(sys.stderr.isatty(), flush=True)
os.write(2, b"a partial line")
if sys.argv[2] == "crash":
    os.abort()
"""


@pytest.mark.parametrize("end", ["exit", "crash"])
def test_filter_stderr_drops_log_lines_for_the_process_life_and_outlives_a_crash(end):
    proc = subprocess.run(
        [sys.executable, "-c", _FILTERED_CHILD, NOISE + KEPT, end],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == (0 if end == "exit" else -6), proc.stderr
    assert proc.stdout == "False\n"  # stderr was a pipe: it still is one
    # Everything but the log lines, in order; the partial line too, after an abort.
    assert proc.stderr == KEPT + "a partial line"


def test_filter_stderr_keeps_a_terminal_a_terminal():
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", _FILTERED_CHILD, NOISE + KEPT, "exit"],
        stdout=subprocess.PIPE,
        stderr=slave,
        text=True,
    )
    os.close(slave)
    out, _ = proc.communicate(timeout=60)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # the terminal's every writer closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.returncode == 0 and out == "True\n"  # progress bars still see a terminal
    text = seen.decode().replace("\r\n", "\n")
    assert text == KEPT + "a partial line"
