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
