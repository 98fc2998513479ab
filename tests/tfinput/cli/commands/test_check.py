"""``tfinput check`` (`tfinput.cli.commands.check`): every file read through the schema,
problems reported per file, exit code 1 when there are any."""

from __future__ import annotations

import json
import os
import shutil

from tests.helpers import run_cli
from tfinput import cli


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


def test_check_columnar_without_schema(small_columnar, capsys):
    directory = os.path.dirname(small_columnar[0])
    assert cli.main(["check", directory]) == 0
    assert "1,000 records" in capsys.readouterr().out


def test_check_without_schema_says_where_it_looked(small_tfrecord, capsys):
    assert cli.main(["check", *small_tfrecord]) == 2
    assert "no --schema given and no schema.json next to" in capsys.readouterr().err


# ------------------------------------------------------------------- new tests
def test_check_prints_every_file_and_the_empty_ones(
    tmp_path, small_tfrecord, small_schema, capsys, caplog
):
    files = [shutil.copy(path, tmp_path) for path in small_tfrecord[:2]]
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    small_schema.to_json(tmp_path / "schema.json")  # found next to the data
    code, out, err = run_cli(capsys, "check", tmp_path / "*.tfrecord")
    assert code == 0
    assert out.splitlines() == [
        f"{files[0]}: 250 records  ok",
        f"{files[1]}: 250 records  ok",
        "1 empty file(s) skipped",
        "2 file(s), 500 records, 0 with problems",
    ]
    assert err == ""
    assert f"skipped 1 empty file(s): {tmp_path / 'empty.tfrecord'}" in caplog.text  # a warning


def test_check_json_on_good_data(small_parquet, schema_file, capsys):
    files = small_parquet[:2]
    code, out, _ = run_cli(capsys, "check", *files, "--schema", schema_file, "--json")
    assert code == 0
    report = json.loads(out)
    assert report == {
        "ok": True,
        "records": 500,
        "empty_files": [],
        "files": [{"path": p, "records": 250, "error": None} for p in files],
    }


def test_check_names_the_feature_and_what_was_expected(
    tmp_path, small_tfrecord, small_schema, capsys
):
    # a schema whose 'user' table is too small for the ids in the data
    data = small_schema.to_dict()
    for table in data["tables"]:
        if table["name"] == "user":
            table["vocabulary_size"] = 100
    schema = tmp_path / "tight.json"
    schema.write_text(json.dumps(data))
    argv = ["check", small_tfrecord[0], "--schema", schema, "--batch-size", "50", "--json"]
    code, out, _ = run_cli(capsys, *argv)
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False and report["records"] == 250
    (problem,) = report["files"]
    assert problem["path"] == small_tfrecord[0]
    assert problem["error"].startswith(
        "records 0-49: feature 'user_id': id out of range; expected ids in [0, 100) "
        "(table 'user'), or set out_of_range='modulo'. Largest id found: "
    )
