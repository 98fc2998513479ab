"""`tfinput datagen`: arguments, the JSON and text summaries, and exit codes."""

from __future__ import annotations

import json

from tests.helpers import run_cli
from tfinput import testing
from tfinput.schema import Schema


def test_cli_datagen_json(tmp_path, capsys):
    argv = ["--preset", "small", "--rows", "1.5k", "--files", "2", "--format", "parquet", "--json"]
    code, stdout, _ = run_cli(capsys, "datagen", tmp_path, *argv)
    assert code == 0
    out = json.loads(stdout)
    assert (out["rows"], out["files"], out["format"]) == (1500, 2, "parquet")
    assert out["paths"][0].endswith("part-00000-of-00002.parquet")


def test_cli_datagen_bad_schema_file_exits_2(tmp_path, capsys):
    code, _, err = run_cli(
        capsys, "datagen", tmp_path, "--rows", "10", "--schema", tmp_path / "no.json"
    )
    assert code == 2
    assert err.startswith("tfinput: error: cannot read schema file") and err.count("\n") == 1


def test_cli_datagen_with_a_schema_file_writes_its_columns(tmp_path, capsys):
    schema = testing.small_schema(row_id=False)
    schema.to_json(tmp_path / "mine.json")
    argv = ["--rows", "30", "--files", "1", "--schema", tmp_path / "mine.json", "--json"]
    code, stdout, _ = run_cli(capsys, "datagen", tmp_path / "out", *argv)
    assert code == 0
    out = json.loads(stdout)
    assert out["paths"] == [str(tmp_path / "out" / "part-00000-of-00001.tfrecord")]
    assert Schema.from_json(out["schema_path"]) == schema


def test_cli_datagen_text_summary(tmp_path, capsys):
    code, stdout, _ = run_cli(
        capsys, "datagen", tmp_path, "--preset", "small", "--rows", "40", "--files", "2"
    )
    assert code == 0
    assert "wrote 40 rows" in stdout and "to 2 tfrecord file(s)" in stdout
    assert str(tmp_path / "schema.json") in stdout


def test_cli_datagen_wide_preset(tmp_path, capsys):
    argv = ["--preset", "wide", "--rows", "20", "--files", "1", "--json"]
    code, stdout, _ = run_cli(capsys, "datagen", tmp_path, *argv)
    assert code == 0
    schema = Schema.from_json(json.loads(stdout)["schema_path"])
    assert len(schema.features) == 1_000 and len(schema.tables) == 100
