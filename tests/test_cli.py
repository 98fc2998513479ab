"""The `tfinput` command: exit codes and output."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tfinput import cli


@pytest.fixture
def schema_file(tmp_path, small_schema):
    path = tmp_path / "schema.json"
    small_schema.to_json(path)
    return str(path)


def test_check_ok(small_tfrecord, schema_file, capsys):
    assert cli.main(["check", *small_tfrecord, "--schema", schema_file]) == 0
    out = capsys.readouterr().out
    assert "4 file(s), 1,000 records, 0 with problems" in out


def test_check_reports_bad_file_and_exits_1(small_tfrecord, schema_file, tmp_path, capsys):
    bad = tmp_path / "bad.tfrecord"
    with open(small_tfrecord[0], "rb") as f:
        data = bytearray(f.read())
    data[200] ^= 0xFF
    bad.write_bytes(bytes(data))
    assert cli.main(["check", small_tfrecord[1], str(bad), "--schema", schema_file, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert report["files"][0]["error"] is None
    assert "corrupted record" in report["files"][1]["error"]


def test_check_parquet(small_parquet, schema_file, capsys):
    assert cli.main(["check", *small_parquet, "--schema", schema_file]) == 0
    assert "1,000 records" in capsys.readouterr().out


def test_bad_schema_file(small_tfrecord, tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text('{"features": [{"kind": "dense"}]}')
    assert cli.main(["check", *small_tfrecord, "--schema", str(path)]) == 2
    err = capsys.readouterr().err
    assert "features[0]" in err and "name" in err


def test_schema_tpu(schema_file, capsys):
    assert (
        cli.main(["schema", "tpu", schema_file, "--per-replica-batch-size", "128", "--json"]) == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["features"]["history"]["table"] == "items"
    assert data["features"]["history"]["output_shape"] == [128]
    assert {p["decision"] for p in data["placement"]} == {"mirror"}
    assert cli.main(["schema", "tpu", schema_file, "--per-replica-batch-size", "128"]) == 0
    assert "TPU embedding tables" in capsys.readouterr().out


def test_usage_error_exit_code():
    proc = subprocess.run(
        [sys.executable, "-m", "tfinput.cli", "nope"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_console_script_help():
    proc = subprocess.run(["tfinput", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for command in ("schema", "check"):
        assert command in proc.stdout


def test_check_columnar_without_schema(small_columnar, capsys):
    directory = os.path.dirname(small_columnar[0])
    assert cli.main(["check", directory]) == 0
    assert "1,000 records" in capsys.readouterr().out


def test_check_without_schema_says_where_it_looked(small_tfrecord, capsys):
    assert cli.main(["check", *small_tfrecord]) == 2
    assert "no --schema given and no schema.json next to" in capsys.readouterr().err


# ------------------------------------------------------ TensorFlow's log lines
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


def test_commands_do_not_print_tensorflow_log_lines(small_tfrecord, schema_file):
    proc = _tfinput("check", *small_tfrecord, "--schema", schema_file, env=_without_tf_log_level())
    assert proc.returncode == 0, proc.stderr
    assert "1,000 records" in proc.stdout
    noise = [line for line in proc.stderr.splitlines() if any(n in line for n in TF_NOISE)]
    assert noise == []


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


def test_the_parser_does_not_load_tensorflow():
    # main() quiets TensorFlow before anything imports it: importing the CLI and building
    # its parser (every subcommand's module) must not load TensorFlow.
    code = (
        "import sys\n"
        "from tfinput import cli\n"
        "cli.build_parser().parse_args(['check', 'x'])\n"
        "print(sorted(m for m in ('tensorflow', 'keras', 'optuna', 'plotly') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# ------------------------------------------------------------------ registry
def test_help_lists_every_registered_command():
    from tfinput.cli.registry import commands

    names = [c.name for c in commands()]
    assert names == [
        "schema", "check", "doctor", "tune", "demo", "convert", "datagen", "bench", "profile",
        "inspect",
    ]  # fmt: skip
    text = cli.build_parser().format_help()
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


def test_tuners_and_profiles_import_no_private_tfinput_module():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    private = []
    for path in sorted([*root.glob("tuners/**/*.py"), *root.glob("profiles/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfinput"):
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("tfinput")]
            else:
                continue
            if any(part.startswith("_") for n in names for part in n.split(".")):
                private.append(f"{path.relative_to(root)}:{node.lineno}")
    assert private == []
