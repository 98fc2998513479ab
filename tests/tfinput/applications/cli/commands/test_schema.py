"""``tfinput schema infer`` and ``tfinput schema tpu`` (`tfinput._src.applications.cli.commands.schema`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_cli
from tfinput import cli
from tfinput.schema import Schema


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


# ------------------------------------------------------------------- new tests
def test_schema_tpu_json_lists_every_table_and_feature(schema_file, small_schema, capsys):
    code, out, _ = run_cli(
        capsys, "schema", "tpu", schema_file, "--per-replica-batch-size", "64", "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["tables"] == {
        "items": {"vocabulary_size": 1000, "dim": 8, "combiner": "mean"},
        "user": {"vocabulary_size": 500, "dim": 8, "combiner": "mean"},
        "tokens": {"vocabulary_size": 2048, "dim": 4, "combiner": "sqrtn"},
    }
    ids = [f.name for f in small_schema.categorical]
    assert sorted(data["features"]) == sorted(ids)
    assert data["features"]["user_id"] == {
        "table": "user",
        "output_shape": [64],
        "max_sequence_length": 0,
    }
    assert sorted(p["table"] for p in data["placement"]) == ["items", "tokens", "user"]


def test_schema_tpu_table(schema_file, capsys):
    code, out, _ = run_cli(capsys, "schema", "tpu", schema_file, "--per-replica-batch-size", "64")
    assert code == 0
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│" in line}
    assert set(rows) >= {"items", "user", "tokens"}
    assert "history, last_item" in rows["items"] or "last_item, history" in rows["items"]
    assert "mirror" in rows["user"] and "2,048" in rows["tokens"]


def test_schema_tpu_errors(tmp_path, schema_file, capsys):
    code, out, err = run_cli(capsys, "schema", "tpu", schema_file, "--per-replica-batch-size", "0")
    assert (code, out) == (2, "")
    assert err == "tfinput: error: per_replica_batch_size: expected a positive int, got 0\n"
    missing = tmp_path / "none.json"
    code, _, err = run_cli(capsys, "schema", "tpu", missing, "--per-replica-batch-size", "8")
    assert code == 2 and err.startswith("tfinput: error: cannot read schema file")
    assert str(missing) in err


@pytest.mark.parametrize("kind", ["tfrecord", "parquet"])
def test_schema_infer_json_on_the_fixture_files(request, kind, capsys):
    files = request.getfixturevalue(f"small_{kind}")
    code, out, _ = run_cli(capsys, "schema", "infer", *files, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["files"] == list(files) and data["sampled_rows"] == 1000
    kinds = {c["name"]: c["kind"] for c in data["columns"]}
    assert kinds["price"] == "dense" and kinds["label"] == "label"
    assert (kinds["history"], kinds["tags"]) == ("multi_hot", "multi_hot")
    assert kinds["user_id"] == kinds["country"] == "categorical"
    schema = Schema.from_dict(data["schema"])
    assert schema.feature("history").weights == "history_w"
    assert schema.feature("embedding").length == 3
    assert [label.name for label in schema.labels] == ["label"]


def test_schema_infer_writes_a_schema_that_check_accepts(tmp_path, small_parquet, capsys):
    out_path = tmp_path / "inferred.json"
    files = small_parquet[:2]
    code, out, _ = run_cli(
        capsys, "schema", "infer", *files, "-o", out_path, "--sample-rows", "300"
    )
    assert code == 0
    assert f"schema written to {out_path} (review and edit it" in out
    assert "2 file(s), 300 rows sampled" in out  # the table's title
    assert Schema.from_json(out_path).feature("tags").dtype == "string"
    code, out, _ = run_cli(capsys, "check", *files, "--schema", out_path)
    assert code == 0 and "2 file(s), 500 records, 0 with problems" in out


def test_schema_infer_csv_with_a_list_column_and_a_label(tmp_path, capsys):
    path = tmp_path / "events.csv"
    rows = [f"u{i % 7},a|b{'|c' * (i % 3)},{i * 0.5},{i % 2}" for i in range(60)]
    path.write_text("user,genres,score,click\n" + "\n".join(rows) + "\n")
    argv = ["schema", "infer", path, "--list-column", "genres", "--label", "click"]
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    printed = out[out.index("{") :]  # after the table: the schema JSON itself
    schema = Schema.from_dict(json.loads(printed))
    genres = schema.feature("genres")
    assert (genres.max_len, genres.dtype) == (4, "string")
    assert schema.feature("user").dtype == "string"
    assert [label.name for label in schema.labels] == ["click"]


def test_schema_infer_bad_list_column(tmp_path, capsys):
    path = tmp_path / "events.csv"
    path.write_text("user,genres\nu1,a|b\n")
    code, out, err = run_cli(capsys, "schema", "infer", path, "--list-column", "genres=")
    assert (code, out) == (2, "")
    assert err == "tfinput: error: --list-column: expected NAME or NAME=DELIMITER, got 'genres='\n"


def test_schema_infer_on_a_fifo_fails_at_once_naming_it(tmp_path):
    """A FIFO given by name (no writer on the other side) used to block the sample
    read forever: the command now exits 2 with one line naming the path."""
    fifo = tmp_path / "events"
    os.mkfifo(fifo)
    root = Path(__file__).resolve().parents[5]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tfinput.cli", "schema", "infer", str(fifo)],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=600,  # a hang fails here instead of blocking the suite
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == (
        f"tfinput: error: input file {str(fifo)!r} is a FIFO (named pipe), not a regular "
        "file: inputs are opened more than once (checks, counts, reads), which a stream "
        "cannot give; write the data to a file and name that"
    )
    assert "Traceback" not in proc.stderr


def test_schema_infer_says_each_tables_dim_rule_and_the_model_size(tmp_path, small_parquet, capsys):
    out_path = tmp_path / "inferred.json"
    code, out, _ = run_cli(capsys, "schema", "infer", *small_parquet, "-o", out_path)
    assert code == 0
    schema = Schema.from_json(out_path)
    text = " ".join(out.split())  # the table's cells and caption unwrapped
    assert "embedding tables: the model size these dims imply" in text
    for t in schema.tables:
        rule = f"dim {t.dim} = 6·V^¼ = {6 * t.vocabulary_size**0.25:.1f} for V = "
        row = [line for line in out.splitlines() if f" {t.name} " in line and "6·V^¼" in line]
        assert len(row) == 1 and rule + f"{t.vocabulary_size:,}" in row[0], (t, row)
        assert f"{t.vocabulary_size * t.dim:,}" in row[0]
    total = sum(t.vocabulary_size * t.dim for t in schema.tables)
    assert f"total {total:,} parameters, {4 * total / 1e6:,.1f} MB at float32" in text
    assert 'change a dim by editing the table\'s "dim" in the schema JSON (docs/data.md)' in text


@pytest.mark.parametrize(
    ("rows", "dim", "why"),
    [
        (100_000, 108, "dim 108 = 6·V^¼ = 106.7 for V = 100,000, rounded to a multiple of 4"),
        (10_000_000, 128, "dim 128 = 6·V^¼ = 337.4 for V = 10,000,000, capped at 128"),
        (100_000, 16, "dim 16: set in the schema (the rule would give 108)"),
    ],
    ids=["rounded", "capped", "edited"],
)
def test_dim_rule(rows, dim, why):
    from tfinput._src.applications.inference._decide import dim_rule

    assert dim_rule(rows, dim) == why
