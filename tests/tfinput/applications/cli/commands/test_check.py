"""``tfinput check`` (`tfinput._src.applications.cli.commands.check`): every file read through the schema,
problems reported per file, exit code 1 when there are any; ``--resume``: the input
position saved and restored on the user's files, compared with an uninterrupted run."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import tensorflow as tf

import tfinput
from tests.helpers import SEQUENTIAL, run_cli
from tfinput import cli, testing
from tfinput.config import PipelineConfig


def test_check_ok(small_tfrecord, schema_file, capsys):
    # Two of the four files: every file checked is a build of its own.
    assert cli.main(["check", *small_tfrecord[:2], "--schema", schema_file]) == 0
    out = capsys.readouterr().out
    assert "2 file(s), 500 records, 0 with problems" in out


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
    assert cli.main(["check", *small_parquet[:2], "--schema", schema_file]) == 0
    assert "2 file(s), 500 records, 0 with problems" in capsys.readouterr().out


def test_bad_schema_file(small_tfrecord, tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text('{"features": [{"kind": "dense"}]}')
    assert cli.main(["check", *small_tfrecord, "--schema", str(path)]) == 2
    err = capsys.readouterr().err
    assert "features[0]" in err and "name" in err


def test_check_columnar_without_schema(tmp_path, small_schema, capsys):
    # One file of three chunks (each columnar file checked costs a build of its own).
    testing.write_columnar(tmp_path, small_schema, rows=300, chunk_rows=100)
    assert cli.main(["check", str(tmp_path)]) == 0
    assert "300 records" in capsys.readouterr().out


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
        f"1 empty file(s) skipped (0 bytes or 0 rows): {tmp_path / 'empty.tfrecord'}",
        "2 file(s), 500 records, 0 with problems",
    ]
    assert err == ""
    assert (
        f"skipped 1 empty file(s) (0 bytes or 0 rows): {tmp_path / 'empty.tfrecord'}" in caplog.text
    )


def test_check_reads_2000_small_files_with_a_progress_bar(tmp_path, capsys, monkeypatch):
    """2,000 files of one record each (read together, not a pipeline each): every file
    counted, and on a terminal the progress bar counts the files."""
    import os
    import pty
    import sys
    import threading

    schema = testing.small_schema()
    records = testing.to_examples(testing.generate(schema, rows=2000, seed=0), schema)
    for i, record in enumerate(records):
        with tf.io.TFRecordWriter(str(tmp_path / f"part-{i:05d}.tfrecord")) as w:
            w.write(record)
    schema.to_json(tmp_path / "schema.json")
    master, slave = pty.openpty()
    seen = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # every writer of the terminal closed
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    with os.fdopen(slave, "w") as terminal:
        monkeypatch.setattr(sys, "stderr", terminal)
        code = cli.main(["check", str(tmp_path), "--json"])
        monkeypatch.undo()
    reader.join(60)
    os.close(master)
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["records"] == 2000 and len(report["files"]) == 2000
    assert {f["records"] for f in report["files"]} == {1}
    assert report["files"][1999]["path"] == str(tmp_path / "part-01999.tfrecord")
    bar = seen.decode(errors="replace")
    assert "check" in bar and "2000/2000" in bar


def test_check_fails_on_a_folder_that_would_lose_a_file_and_lists_0_row_files(
    tmp_path, small_parquet, small_schema, capsys, caplog
):
    """A shard on an unmounted volume (a broken link in the folder) would lose its rows:
    check fails and names it. A Parquet file with 0 rows holds nothing: skipped, listed."""
    import pyarrow.parquet as pq

    data = tmp_path / "data"
    data.mkdir()
    kept = [shutil.copy(path, data) for path in small_parquet[:2]]
    empty = data / "part-9.parquet"
    pq.write_table(pq.read_table(small_parquet[0]).slice(0, 0), empty)
    small_schema.to_json(data / "schema.json")
    code, out, _ = run_cli(capsys, "check", data)
    assert code == 0
    assert out.splitlines()[2:] == [
        f"1 empty file(s) skipped (0 bytes or 0 rows): {empty}",
        "2 file(s), 500 records, 0 with problems",
    ], kept
    assert f"skipped 1 empty file(s) (0 bytes or 0 rows): {empty}" in caplog.text
    (data / "part-3.parquet").symlink_to(tmp_path / "unmounted" / "part-3.parquet")
    code, out, err = run_cli(capsys, "check", data)
    assert code == 2 and out == ""
    assert f"{data / 'part-3.parquet'}: a symbolic link to " in err
    assert "which does not exist" in err


def test_check_counts_the_records_before_a_cut_inside_a_record(
    small_tfrecord, small_schema, tmp_path, capsys
):
    """A file cut inside a record's data (its first 100 records whole): check counts
    those 100 records, not 0, and names the byte where the cut record starts. (Read
    with two features: a file with a problem is read again once per feature.)"""
    schema_file = str(tmp_path / "schema.json")
    small_schema.replace(features=small_schema.features[:2], tables=()).to_json(schema_file)
    with open(small_tfrecord[0], "rb") as f:
        data = f.read()
    at, size = 0, 0
    for i, record in enumerate(tf.data.TFRecordDataset(small_tfrecord[0]).as_numpy_iterator()):
        if i == 100:
            break
        at += 16 + len(record)
        size = len(record)
    assert size > 30
    cut = tmp_path / "part-0.tfrecord"
    cut.write_bytes(data[: at + 30])
    code, out, _ = run_cli(capsys, "check", cut, "--schema", schema_file)
    assert code == 1
    assert " ".join(out.split()) == (
        f"{cut}: 100 records truncated record at byte {at:,}: the file ends inside this "
        "record (a partial copy?) 1 file(s), 100 records, 1 with problems"
    )
    assert cli.main(["check", str(cut), "--schema", schema_file, "--json"]) == 1
    (found,) = json.loads(capsys.readouterr().out)["files"]
    assert found["records"] == 100 and found["error"].startswith(f"truncated record at byte {at:,}")


def test_check_json_on_good_data(small_parquet, schema_file, capsys):
    files = small_parquet[:2]
    code, out, _ = run_cli(capsys, "check", *files, "--schema", schema_file, "--json")
    assert code == 0
    report = json.loads(out)
    assert report == {
        "ok": True,
        "records": 500,
        "empty_files": [],
        "files": [{"path": p, "records": 250, "error": None, "folded": {}} for p in files],
        "folded_ids": {},
    }


def test_check_counts_the_ids_modulo_folds(
    tmp_path, small_tfrecord, small_schema, small_columns, capsys
):
    # Tables too small for the data, with out_of_range "modulo": the check passes (the
    # pipeline folds the ids, as asked) and says per feature how many it folded.
    data = small_schema.to_dict()
    for table in data["tables"]:
        if table["name"] in ("user", "items"):
            table["vocabulary_size"] = 100
    for feature in data["features"]:
        if feature["name"] in ("user_id", "last_item", "history"):
            feature["out_of_range"] = "modulo"
    schema = tmp_path / "folding.json"
    schema.write_text(json.dumps(data))
    # Two of the four files (rows 0-499): every file is read twice, once for its ids.
    argv = ["check", *small_tfrecord[:2], "--schema", schema, "--batch-size", "100"]
    code, out, _ = run_cli(capsys, *argv, "--json")
    assert code == 0
    folded = json.loads(out)["folded_ids"]
    columns = small_columns.row_slice(0, 500)
    for name in ("user_id", "last_item"):
        ids = columns.values[name]
        assert folded[name] == {
            "ids": int((ids >= 100).sum() + (ids < 0).sum()),
            "negative": int((ids < 0).sum()),
            "largest": int(ids.max()),
            "vocabulary_size": 100,
        }, name
    history = columns.values["history"]
    assert 0 < folded["history"]["ids"] <= int((history >= 100).sum())
    assert folded["history"]["largest"] <= int(history.max())
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    ids = columns.values["user_id"]
    assert (
        f"feature user_id: {int((ids >= 100).sum()):,} id(s) outside its table [0, 100), "
        f'folded onto other ids by out_of_range: "modulo"; largest id {int(ids.max()):,}'
    ) in out.replace("\n", " ")
    assert "raise the tables' vocabulary_size to keep them apart" in out.replace("\n", " ")


def test_check_names_the_feature_and_what_was_expected(
    tmp_path, small_tfrecord, small_schema, capsys
):
    # a schema whose 'user' table is too small for the ids in the data (two features:
    # a file with a problem is read again once per feature, to name each that fails)
    data = small_schema.replace(
        features=small_schema.features[:4:3], tables=small_schema.tables[1:2]
    ).to_dict()
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


# ------------------------------------------------------------- --resume
RESUMED = re.compile(
    r"resume: saved after 3 batch\(es\) of (?:32|64): state [0-9,]+ bytes, save [0-9,]+ ms, "
    r"restore [0-9,]+ ms"
)


def test_resume_is_exact_on_tfrecord(small_tfrecord, schema_file, capsys):
    # --batch-size sets the resume check's batch size too. Two of the four files: the
    # data checks read each file.
    files = small_tfrecord[:2]
    code, out, err = run_cli(
        capsys, "check", *files, "--schema", schema_file, "--resume", "--batch-size", "32"
    )
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[2:] == [
        "2 file(s), 500 records, 0 with problems",
        "resume: note: the config does not shuffle: checked with shuffle_buffer=1000",
        lines[4],
        "resume: exact (3 batch(es) after the restore identical to the uninterrupted run, "
        "element by element)",
    ]
    assert RESUMED.fullmatch(lines[4]) and " batch(es) of 32: " in lines[4]


def test_resume_with_a_tuned_config_on_columnar_json(small_schema, tmp_path, capsys):
    # a saved tuned config, as `tfinput tune` writes it (extra keys next to "config")
    tuned = PipelineConfig(
        batch_size=50,
        deterministic=False,
        map_parallelism=2,
        interleave_parallelism=2,
        prefetch=2,
        shuffle_buffer=300,
        shuffle_seed=3,
    )
    path = tmp_path / "best_config.json"
    tuned.to_json(path, resume={"exact": False})
    # Two files of 200 rows (each file checked costs a build of its own).
    directory = tmp_path / "data"
    testing.write_columnar(directory, small_schema, rows=400, files=2, chunk_rows=100)
    argv = ["check", directory, "--resume", "--config", path, "--resume-after", "4", "--json"]
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    report = json.loads(out)
    assert report["ok"] is True and report["records"] == 400
    resume = report["resume"]
    assert resume["ok"] is resume["exact"] is True and resume["error"] is None
    assert (resume["after"], resume["compared"], resume["batch_size"]) == (4, 3, 50)
    assert resume["state_bytes"] > 0 and resume["save_ms"] >= 0 and resume["restore_ms"] >= 0
    # checked with the tuned knobs, order made reproducible (and said so)
    assert resume["config"] == tuned.replace(deterministic=True).to_dict()
    (note,) = resume["notes"]
    assert note.startswith("the config has deterministic=False: tf.data saves and restores")


def test_resume_on_parquet_reports_what_it_finds(small_parquet, schema_file, capsys):
    files = small_parquet[:2]  # two of the four: the data checks read each file
    code, out, _ = run_cli(capsys, "check", *files, "--schema", schema_file, "--resume")
    last = out.splitlines()[-1]
    if code == 0:  # Parquet checkpoints natively
        assert last.startswith("resume: exact (3 batch(es)")
    else:  # it cannot be saved: the message names the source and the remedy
        assert code == 1
        assert last.startswith("resume: FAILED: cannot save the input position of this parquet")
        assert "tfinput convert" in last


def test_resume_fails_on_a_dataset_tf_data_cannot_save(small_columns, small_schema):
    # A user's Dataset.from_generator wrapped with tfinput.wrap (PATHS cannot name one;
    # the command's verification, on its own): the save fails, naming source and remedy.
    from tests.helpers import wrapped_dataset
    from tfinput._src.applications.cli.commands.check import _resume_lines
    from tfinput.resume import verify

    rows = wrapped_dataset(small_columns).ragged_batch(50, drop_remainder=True)

    def dataset():
        return tf.data.Dataset.from_generator(
            lambda: iter(rows), output_signature=rows.element_spec
        )

    pipeline = tfinput.wrap(dataset, small_schema, batched=True)
    resume = verify(pipeline, PipelineConfig(batch_size=50))
    assert resume["ok"] is False and resume["exact"] is None and "state_bytes" not in resume
    assert resume["error"].startswith("cannot save the input position of this dataset pipeline")
    assert "tfinput convert DATA --to columnar" in resume["error"]
    assert _resume_lines(resume) == [f"resume: FAILED: {resume['error']}"]


def test_resume_needs_enough_batches(small_tfrecord, schema_file, capsys):
    argv = ["check", small_tfrecord[0], "--schema", schema_file, "--resume"]
    code, out, _ = run_cli(capsys, *argv, "--resume-after", "10")
    assert code == 1
    assert out.splitlines()[-1] == (
        "resume: FAILED: the data hold only 3 batch(es) of 64: lower --resume-after or use "
        "a config with a smaller batch size"
    )


def test_first_difference_names_the_feature(pipeline_of):
    from tfinput._src.core.resume import _first_difference

    it = pipeline_of("tfrecord").iterator(PipelineConfig(batch_size=20, **SEQUENTIAL))
    first, second = next(it), next(it)
    assert _first_difference(first, first) is None
    assert _first_difference(first, second) == "dense/embedding"  # the first path in order
    features, label = first
    changed = {**features, "dense": {**features["dense"], "row_id": features["dense"]["row_id"]}}
    assert _first_difference(first, (changed, label + 1)) == "label"


def test_resume_is_skipped_when_the_data_checks_fail(small_tfrecord, schema_file, tmp_path, capsys):
    bad = tmp_path / "bad.tfrecord"
    with open(small_tfrecord[0], "rb") as f:
        data = bytearray(f.read())
    data[200] ^= 0xFF
    bad.write_bytes(bytes(data))
    code, out, _ = run_cli(capsys, "check", bad, "--schema", schema_file, "--resume", "--json")
    assert code == 1
    resume = json.loads(out)["resume"]
    assert resume["ok"] is False and resume["error"] == "skipped: the data checks failed"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--config", "naive"], "--config is the config of the resume check: add --resume"),
        (["--resume", "--resume-after", "0"], "--resume-after and --resume-compare must be >= 1"),
        (["--resume", "--config", "nope.json"], "config 'nope.json' is neither a preset"),
    ],
    ids=["config-without-resume", "zero-after", "missing-config"],
)
def test_resume_usage_errors_exit_2(small_tfrecord, schema_file, capsys, extra, message):
    code, out, err = run_cli(capsys, "check", small_tfrecord[0], "--schema", schema_file, *extra)
    assert (code, out) == (2, "")
    assert message in err


@pytest.mark.parametrize("kind", ["parquet", "columnar"])
def test_folded_ids_are_counted_on_every_source(
    kind, small_parquet, small_columnar, small_schema, small_columns
):
    """`Pipeline.check` counts the ids ``modulo`` folds from each source's raw ids (the
    CLI test above reads TFRecord), over the first two files (each file is read twice)."""
    import dataclasses

    from tfinput.schema import Schema

    make, files = {
        "parquet": (tfinput.parquet, small_parquet),  # files of 250 rows
        "columnar": (tfinput.columnar, small_columnar),  # 300, 300, 300, 100
    }[kind]
    rows = 500 if kind == "parquet" else 600

    tables = tuple(
        dataclasses.replace(t, vocabulary_size=100) if t.name == "user" else t
        for t in small_schema.tables
    )
    features = tuple(
        dataclasses.replace(f, out_of_range="modulo") if f.name == "user_id" else f
        for f in small_schema.features
    )
    schema = Schema(features=features, tables=tables, labels=small_schema.labels)
    report = make(files[:2], schema).check(batch_size=300)
    ids = small_columns.values["user_id"][:rows]
    assert report.ok and report.records == rows
    assert report.folded == {
        "user_id": {
            "ids": int((ids >= 100).sum() + (ids < 0).sum()),
            "negative": int((ids < 0).sum()),
            "largest": int(ids.max()),
            "vocabulary_size": 100,
        }
    }
