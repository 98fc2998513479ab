"""`tfinput._src.applications.convert.writers`: the output directory, and shards of Parquet, tf.Example
TFRecord or columnar records."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

import tfinput
from tfinput._src.applications.convert.columns import plan_columns
from tfinput._src.applications.convert.writers import (
    ColumnarShards,
    Shards,
    open_shards,
    prepare_out_dir,
)
from tfinput.convert import convert
from tfinput.errors import SourceError
from tfinput.schema import Dense, Schema

SCHEMA = Schema.of([Dense(name="v")], labels=["label"])
ROWS = pa.table(
    {
        "v": pa.array([0.5, 1.5, 2.5, 3.5, 4.5], pa.float32()),
        "label": pa.array([1.0] * 5, pa.float32()),
    }
)


# -------------------------------------------------------- output directory
def test_output_directory_must_be_empty(tmp_path, write_text):
    path = write_text("label,v\n1,2\n")
    convert(path, tmp_path / "out")
    with pytest.raises(SourceError, match="is not empty"):
        convert(path, tmp_path / "out")
    assert convert(path, tmp_path / "out", overwrite=True).rows == 1


def test_overwrite_replaces_only_a_conversion_s_files(tmp_path, write_text):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("part-00000-of-00003.parquet", "schema.json", "manifest.json", "notes.txt"):
        (out / name).write_text("x")
    with pytest.raises(SourceError, match="is not empty; choose a new directory"):
        prepare_out_dir(out, overwrite=False)  # a file of someone else's is there
    result = convert(write_text("label,v\n1,2\n"), out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == [
        "notes.txt",
        "part-00000-of-00001.parquet",
        "schema.json",
    ]
    assert result.rows == 1 and pq.read_table(result.paths[0]).num_rows == 1


def test_a_failed_overwrite_keeps_the_previous_output_whole(tmp_path, write_text):
    out = tmp_path / "out"
    first = convert(write_text("label,v\n1,2\n0,3\n"), out, to="tfrecord")
    with pytest.raises(tfinput.errors.DataError, match="expected 2 fields"):
        convert(write_text("label,v\n1,2\n1,2,3\n"), out, to="tfrecord", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "in.csv") == ["out"]
    assert sorted(str(p) for p in out.iterdir()) == sorted([*first.paths, first.schema_path])
    assert sum(1 for _ in tf.data.TFRecordDataset(first.paths)) == 2


def test_output_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "out").write_text("x")
    with pytest.raises(SourceError, match="exists and is not a directory"):
        prepare_out_dir(tmp_path / "out", overwrite=True)


# ------------------------------------------------------------------ shards
@pytest.mark.parametrize("fmt", ["parquet", "tfrecord"])
def test_shards_hold_rows_per_file_and_are_named_of_n(tmp_path, fmt):
    shards = Shards(tmp_path, fmt, rows_per_file=2, plan=plan_columns(SCHEMA, {}))
    shards.write(ROWS.slice(0, 3))
    shards.write(ROWS.slice(3))
    paths = shards.close()
    assert [Path(p).name for p in paths] == [f"part-0000{i}-of-00003.{fmt}" for i in range(3)]
    if fmt == "parquet":
        assert [pq.read_table(p).column("v").to_pylist() for p in paths] == [
            [0.5, 1.5],
            [2.5, 3.5],
            [4.5],
        ]
    else:
        assert [sum(1 for _ in tf.data.TFRecordDataset(p)) for p in paths] == [2, 2, 1]


def test_abort_deletes_what_was_written(tmp_path):
    shards = Shards(tmp_path, "parquet", rows_per_file=2, plan=plan_columns(SCHEMA, {}))
    shards.write(ROWS)
    assert list(tmp_path.glob("part-*"))
    shards.abort()
    assert not list(tmp_path.iterdir())


def test_columnar_shards_write_a_manifest(tmp_path):
    shards = open_shards(
        tmp_path, to="columnar", schema=SCHEMA, plan={}, rows_per_file=4, chunk_rows=2
    )
    assert isinstance(shards, ColumnarShards)
    shards.write(ROWS)
    paths = shards.close()
    assert [Path(p).name for p in paths] == [
        "part-00000-of-00002.tfcol",
        "part-00001-of-00002.tfcol",
    ]
    config = tfinput.PipelineConfig(batch_size=5, drop_remainder=False)
    features, _ = next(iter(tfinput.columnar(tmp_path).build(config)))
    assert features["dense"]["v"].numpy().tolist() == [0.5, 1.5, 2.5, 3.5, 4.5]


# ----------------------------------------------------------- conversions
@pytest.mark.parametrize("to", ["parquet", "tfrecord"])
def test_empty_fields_are_missing(tmp_path, write_text, output, to):
    text = "label,x,city,tags\n1,,,\n0,2.5,paris,a|b\n"
    result = convert(write_text(text), tmp_path / "out", to=to, list_columns={"tags": "|"})
    if to == "parquet":
        table = output.table(result)
        assert table["x"] == [None, 2.5] and table["city"] == [None, "paris"]
        assert table["tags"] == [[], ["a", "b"]]
    else:
        first, second = (e.features.feature for e in output.examples(result))
        assert "x" not in first and "city" not in first and len(first["tags"].bytes_list.value) == 0
        assert second["x"].float_list.value[0] == 2.5
    features, _ = next(
        iter(
            (tfinput.parquet if to == "parquet" else tfinput.tfrecord)(
                result.paths, result.schema
            ).build(tfinput.PipelineConfig.naive(batch_size=2))
        )
    )
    assert features["dense"]["x"].numpy().tolist() == [0.0, 2.5]  # the default fills in


def test_gzip_input_and_sharding(tmp_path):
    path = tmp_path / "in.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("label,v\n" + "".join(f"{i % 2},{i}\n" for i in range(10)))
    result = convert(path, tmp_path / "out", rows_per_file=3, to="tfrecord")
    assert result.rows == 10 and len(result.paths) == 4
    assert [len(list(tf.data.TFRecordDataset(p))) for p in result.paths] == [3, 3, 3, 1]


@pytest.mark.parametrize("block_rows", [2, 16 * 1024], ids=["blocks-of-2", "one-block"])
def test_a_string_list_empty_throughout_a_block_converts(tmp_path, write_text, block_rows):
    text = "label,tags,ids\n" + "1,,\n0,,\n1,a|b,7\n0,,\n"
    result = convert(
        write_text(text),
        tmp_path / "out",
        to="tfrecord",
        list_columns={"tags": "|", "ids": "|"},
        rows_per_file=block_rows,
    )
    assert result.rows == 4
    examples = [
        tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(result.paths)
    ]
    tags = [list(e.features.feature["tags"].bytes_list.value) for e in examples]
    ids = [list(e.features.feature["ids"].int64_list.value) for e in examples]
    assert tags == [[], [], [b"a", b"b"], []] and ids == [[], [], [7], []]
    assert [e.features.feature["label"].int64_list.value[0] for e in examples] == [1, 0, 1, 0]


@pytest.mark.parametrize("preset", ["criteo", "movielens"])
def test_csv_to_columnar_reads_like_parquet(tmp_path, request, output, preset):
    sample = request.getfixturevalue(preset)
    col = convert(
        sample, tmp_path / "col", to="columnar", preset=preset, chunk_rows=50, rows_per_file=120
    )
    pq_ = convert(sample, tmp_path / "pq", preset=preset)
    assert col.rows == pq_.rows == 200 and col.format == "columnar"
    assert [Path(p).name for p in col.paths] == [f"part-0000{i}-of-00002.tfcol" for i in range(2)]
    assert Path(col.manifest_path).is_file() and Path(col.schema_path).is_file()
    output.assert_same_rows(output.pipeline(col), output.pipeline(pq_))
