"""`tfinput.cli.tf_logs`: TensorFlow's log lines kept out of a command's output unless
``--verbose`` or the user's ``TF_CPP_MIN_LOG_LEVEL`` says otherwise."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings

import pytest

from tfinput.cli import tf_logs
from tfinput.cli.tf_logs import quiet_tensorflow, wants_verbose

TF_NOISE = ("cpu_feature_guard", "oneDNN", "absl::InitializeLog", "XLA service")


def _without_tf_log_level():
    return {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}


def _tfinput(*args, env):
    return subprocess.run(
        [sys.executable, "-m", "tfinput.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.slow
def test_commands_do_not_print_tensorflow_log_lines(small_tfrecord, schema_file):
    proc = _tfinput("check", *small_tfrecord, "--schema", schema_file, env=_without_tf_log_level())
    assert proc.returncode == 0, proc.stderr
    assert "1,000 records" in proc.stdout
    noise = [line for line in proc.stderr.splitlines() if any(n in line for n in TF_NOISE)]
    assert noise == []


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

    from tfinput.cli.tf_logs import quiet_tensorflow

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
    from tfinput.cli.tf_logs import wants_verbose

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
    assert not any(isinstance(f, tf_logs._QuietTensorFlowImport) for f in sys.meta_path)


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
)
# ... and the lines that must stay: errors, and anything that is not TensorFlow's.
KEPT = (
    "E0000 00:00:1700000000.123456    4242 cuda_dnn.cc:8310] Unable to register cuDNN factory\n"
    "my own message\n"
)


def test_filtered_stderr_drops_tensorflow_info_and_warning_lines(capfd):
    with tf_logs._filtered_stderr():
        os.write(2, (NOISE + KEPT).encode())
    assert capfd.readouterr().err == KEPT


def test_filtered_stderr_replays_everything_when_the_import_fails(capfd):
    with pytest.raises(ImportError), tf_logs._filtered_stderr():
        os.write(2, (NOISE + KEPT).encode())
        raise ImportError("libtensorflow_framework.so.2: cannot open shared object file")
    # Everything written comes back, once and in order. Not `==`: other threads of this
    # process may write to descriptor 2 meanwhile and are replayed too (seen: a tf.data
    # service client of an earlier test in the same worker logging failed heartbeats).
    assert capfd.readouterr().err.count(NOISE + KEPT) == 1
