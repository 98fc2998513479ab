"""``tfinput convert``: arguments, the text and ``--json`` summaries, exit codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import SHARED_DATA, cli_main, run_cli
from tfinput.schema import Dense, Schema

MOVIELENS = SHARED_DATA / "movielens_sample.txt"


def _write(tmp_path: Path, text: str, name: str = "in.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.skipif(not MOVIELENS.exists(), reason=f"{MOVIELENS} not found")
def test_cli_convert_json(tmp_path, capsys):
    code = cli_main(
        [
            "convert",
            str(MOVIELENS),
            "--out",
            str(tmp_path / "o"),
            "--preset",
            "movielens",
            "--to",
            "tfrecord",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["rows"], out["files"], out["skipped"]) == (200, 1, 0)
    assert Path(out["schema_path"]).is_file()


def test_cli_convert_text_summary(tmp_path, capsys):
    path = _write(tmp_path, "label;v;note\n1;2;a\n\n0;3;b\n")
    code, out, _ = run_cli(capsys, "convert", path, "--out", tmp_path / "o", "--label", "label")
    assert code == 0
    text = " ".join(out.split())  # the console wraps long lines
    assert text == (
        f"wrote 2 rows to 1 parquet file(s) in {tmp_path / 'o'}; schema: "
        f"{tmp_path / 'o' / 'schema.json'} delimiter ';', header yes; 2 features, 1 label(s) "
        "1 blank line(s) ignored"
    )


def test_cli_convert_with_a_schema_and_named_columns(tmp_path, capsys):
    path = _write(tmp_path, "1\t2.5\tx\n0\t1.5\ty\n", "in.tsv")
    schema = tmp_path / "schema.json"
    Schema.of([Dense(name="v")], labels=["label"]).to_json(schema)
    argv = ["--schema", schema, "--header", "no", "--columns", "label,v,s", "--delimiter", "tab"]
    code, out, _ = run_cli(capsys, "convert", path, "--out", tmp_path / "o", *argv)
    assert code == 0
    text = " ".join(out.split())
    assert "delimiter tab, header no; 1 features, 1 label(s)" in text
    assert "columns not in the schema (dropped): s" in text


def test_cli_convert_skip_reports_lines(tmp_path, capsys):
    path = _write(tmp_path, "a,label\n1,0\n2\n3,1\n")
    code = cli_main(
        [
            "convert",
            str(path),
            "--out",
            str(tmp_path / "o"),
            "--on-bad-rows",
            "skip",
            "--list-column",
            "x=;",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "1 bad row(s) skipped" in out and f"{path}:3: expected 2" in out


def test_cli_convert_error_is_one_line_exit_2(tmp_path, capsys):
    path = _write(tmp_path, "a,label\n1,0\n2\n")
    assert cli_main(["convert", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tfinput: error: {path}:3: expected 2 fields") and err.count("\n") == 1


def test_cli_convert_parquet_to_columnar(tmp_path, small_parquet, capsys):
    out = tmp_path / "col"
    argv = ["--out", str(out), "--to", "columnar", "--chunk-rows", "200", "--json"]
    code = cli_main(["convert", *small_parquet, *argv])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["rows"], data["input_format"], data["format"]) == (1000, "parquet", "columnar")
    assert data["manifest_path"] == str(out / "manifest.json")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["chunk_rows"] == 200 and manifest["rows"] == 1000
    code = cli_main(
        ["convert", *small_parquet, "--out", str(out), "--to", "columnar", "--overwrite"]
    )
    assert code == 0 and "manifest:" in capsys.readouterr().out


def test_cli_convert_ray_options_need_the_ray_engine(tmp_path, capsys):
    path = _write(tmp_path, "a,label\n1,0\n")
    argv = ["convert", str(path), "--out", str(tmp_path / "o"), "--ray-cpus", "2"]
    assert cli_main([*argv, "--split-mb", "8"]) == 2
    err = capsys.readouterr().err
    assert err == "tfinput: error: convert: --ray-cpus, --split-mb apply to --engine ray only\n"
    assert not (tmp_path / "o").exists()


def test_cli_convert_engine_ray_without_ray_names_the_extra(tmp_path, capsys, monkeypatch):
    path = _write(tmp_path, "a,label\n1,0\n")
    monkeypatch.setitem(sys.modules, "ray", None)  # as where Ray is not installed
    code = cli_main(["convert", str(path), "--out", str(tmp_path / "o"), "--engine", "ray"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("tfinput: error: convert --engine ray needs Ray Data") and (
        "pip install 'tfinput[ray]'" in err
    )
    assert not (tmp_path / "o").exists()


def test_cli_convert_reads_a_directory_and_its_schema(
    tmp_path, small_parquet, small_schema, capsys
):
    import shutil

    data = tmp_path / "data"  # what `tfinput datagen` writes: files plus schema.json
    data.mkdir()
    for path in small_parquet:
        shutil.copy(path, data)
    small_schema.to_json(data / "schema.json")
    (data / "_SUCCESS").write_text("")
    code, out, _ = run_cli(capsys, "convert", data, "--out", tmp_path / "col", "--to", "columnar")
    assert code == 0
    text = " ".join(out.split())
    assert text.startswith(
        f"schema: {data / 'schema.json'} (found beside the inputs; --schema to choose another) "
        f"wrote 1,000 rows to "
    )
    assert Schema.from_json(tmp_path / "col" / "schema.json") == small_schema

    (tmp_path / "empty").mkdir()
    argv = ["convert", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"tfinput: error: convert: input directory '{tmp_path / 'empty'}' holds no data files\n"
    )
