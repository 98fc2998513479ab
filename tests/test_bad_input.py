"""Bad input: every case gives a clear error naming the file and the feature, or follows
a documented policy whose counts are reported. Never a silent wrong batch."""

from __future__ import annotations

import gzip
import logging
import os
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

import tfinput
from tfinput import testing
from tfinput.config import PipelineConfig
from tfinput.errors import DataError, SchemaError, SourceError
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema, Table

CONFIG = PipelineConfig(batch_size=50, drop_remainder=False)


def drain(pipeline, config=CONFIG):
    n = 0
    for _ in pipeline.iterate(config):
        n += 1
    return n


@pytest.fixture
def tiny_schema():
    return Schema(
        features=(
            Dense(name="x"),
            Categorical(name="c", table="t"),
            MultiHot(name="m", table="t", max_len=3),
        ),
        tables=(Table(name="t", vocabulary_size=100, dim=4),),
        labels=(Label(name="label"),),
    )


def write_examples(path, rows):
    """rows: list of dicts key -> ("int"|"float"|"bytes", [values])."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for row in rows:
            feats = {}
            for key, (kind, values) in row.items():
                if kind == "int":
                    feats[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
                elif kind == "float":
                    feats[key] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
                else:
                    feats[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
            ex = tf.train.Example(features=tf.train.Features(feature=feats))
            w.write(ex.SerializeToString())
    return str(path)


def good_row(i=0, c=1, x=1.0, m=(1, 2)):
    return {
        "x": ("float", [x]),
        "c": ("int", [c]),
        "m": ("int", list(m)),
        "label": ("float", [0.0]),
    }


@pytest.fixture
def good_files(tmp_path):
    return [
        write_examples(tmp_path / f"good{i}.tfrecord", [good_row() for _ in range(100)])
        for i in range(2)
    ]


# --------------------------------------------------------------- corrupt bytes
@pytest.mark.parametrize("read_batch", [0, 32], ids=["records", "read-batch"])
@pytest.mark.parametrize("damage", ["corrupt", "truncated"])
def test_corrupt_or_truncated_tfrecord_names_the_file(
    tmp_path, tiny_schema, good_files, damage, read_batch
):
    bad = tmp_path / "bad.tfrecord"
    write_examples(bad, [good_row() for _ in range(100)])
    data = bytearray(bad.read_bytes())
    if damage == "corrupt":
        data[len(data) // 2] ^= 0xFF
    else:
        data = data[: len(data) - 7]
    bad.write_bytes(bytes(data))
    # One good file before it (the check that names the file reads each file before
    # the damaged one in full, and the report all of them).
    pipeline = tfinput.tfrecord([good_files[0], str(bad)], tiny_schema)
    with pytest.raises(DataError) as e:  # inside a file branch with read_batch
        drain(pipeline, CONFIG.replace(read_batch=read_batch))
    msg = str(e.value)
    if damage == "corrupt":
        assert re.fullmatch(
            rf"{re.escape(str(bad))}: corrupted record at byte [\d,]+: its length or checksum "
            "does not match: the bytes are damaged",
            msg,
        ), msg
    else:  # named by its offset, without a range of records the file does not hold
        assert re.fullmatch(
            rf"{re.escape(str(bad))}: truncated record at byte [\d,]+: the file ends inside "
            r"this record \(a partial copy\?\)",
            msg,
        ), msg
    report = pipeline.check()
    assert [p.path for p in report.problems] == [str(bad)]
    assert report.files[0].error is None and report.files[0].records == 100


def test_compressed_bytes_under_a_plain_name_get_the_compression_to_set(
    tmp_path, tiny_schema, good_files
):
    plain = tmp_path / "part-0.tfrecord"
    plain.write_bytes(gzip.compress(Path(good_files[0]).read_bytes()))
    with pytest.raises(DataError) as e:
        tfinput.tfrecord([str(plain)], tiny_schema).build(CONFIG)
    assert str(e.value) == (
        f"{plain}: not a readable TFRecord file (corrupted record at byte 0: the file does "
        "not start with a TFRecord record (another format?)); it starts like a GZIP stream: "
        "read it with compression='GZIP' (--compression GZIP), or name it with a .gz extension"
    )
    ds = tfinput.tfrecord([str(plain)], tiny_schema, compression="GZIP").build(CONFIG)
    assert sum(int(y.shape[0]) for _, y in ds) > 0


# ---------------------------------------------------------------- ids, values
def test_negative_id_names_feature_file_and_value(tmp_path, tiny_schema, good_files):
    bad = write_examples(
        tmp_path / "neg.tfrecord", [good_row()] * 5 + [good_row(c=-4)] + [good_row()] * 60
    )
    with pytest.raises(DataError) as e:
        drain(tfinput.tfrecord([good_files[0], bad], tiny_schema))  # one good file first
    msg = str(e.value)
    assert "neg.tfrecord" in msg and "'c'" in msg and "negative id" in msg and "-4" in msg


def test_negative_id_in_a_list(tmp_path, tiny_schema):
    bad = write_examples(tmp_path / "negm.tfrecord", [good_row(m=(3, -1))])
    with pytest.raises(DataError, match=r"negm.tfrecord.*feature 'm': negative id"):
        drain(tfinput.tfrecord([bad], tiny_schema))


def test_id_out_of_range_errors_or_folds_by_policy(tmp_path, tiny_schema):
    f = write_examples(tmp_path / "big.tfrecord", [good_row(c=150)] * 50)
    with pytest.raises(DataError, match=r"big.tfrecord.*'c': id out of range.*\[0, 100\).*150"):
        drain(tfinput.tfrecord([f], tiny_schema))
    folded = tiny_schema.replace(
        features=(
            tiny_schema.features[0],
            Categorical(name="c", table="t", out_of_range="modulo"),
            tiny_schema.features[2],
        )
    )
    ((features, _),) = tfinput.tfrecord([f], folded).build(CONFIG)
    assert (features["ids"]["c"].numpy() == 50).all()


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_nan_or_inf_in_dense_feature(tmp_path, tiny_schema, value):
    f = write_examples(tmp_path / "nan.tfrecord", [good_row()] * 10 + [good_row(x=value)])
    with pytest.raises(DataError, match=r"nan.tfrecord.*feature 'x': NaN or inf"):
        drain(tfinput.tfrecord([f], tiny_schema))


def test_nan_in_parquet_dense_feature(tmp_path, tiny_schema):
    path = tmp_path / "nan.parquet"
    pq.write_table(
        pa.table({"x": [1.0, float("nan")], "c": [1, 2], "m": [[1], []], "label": [0.0, 1.0]}), path
    )
    with pytest.raises(DataError, match=r"nan.parquet.*feature 'x': NaN or inf"):
        drain(tfinput.parquet([str(path)], tiny_schema), PipelineConfig(batch_size=2))


def test_log1p_of_negative_values_asks_for_clipping(tmp_path):
    schema = Schema(features=(Dense(name="x", log1p=True),), labels=(Label(name="label"),))
    f = write_examples(
        tmp_path / "neg.tfrecord", [{"x": ("float", [-3.0]), "label": ("float", [0.0])}]
    )
    with pytest.raises(
        DataError, match=r"feature 'x': log1p needs values > -1; set \"clip\": \[0, null\]"
    ):
        drain(tfinput.tfrecord([f], schema), PipelineConfig(batch_size=1))


# -------------------------------------------------------------- type mismatches
def test_strings_where_ints_were_declared_first_record(tmp_path, tiny_schema):
    row = good_row()
    row["c"] = ("bytes", [b"abc"])
    f = write_examples(tmp_path / "str.tfrecord", [row])
    with pytest.raises(SchemaError) as e:
        tfinput.tfrecord([f], tiny_schema).build(CONFIG)
    msg = str(e.value)
    assert "str.tfrecord" in msg and "'c'" in msg and "int64_list" in msg and "bytes_list" in msg
    assert "dtype='string'" in msg


def test_strings_where_ints_were_declared_later_in_the_file(tmp_path, tiny_schema):
    row = good_row()
    row["c"] = ("bytes", [b"abc"])
    f = write_examples(tmp_path / "later.tfrecord", [good_row()] * 60 + [row])
    with pytest.raises(DataError) as e:
        drain(tfinput.tfrecord([f], tiny_schema))
    msg = str(e.value)
    assert "later.tfrecord: record 60: key 'c': Data types don't match" in msg


def test_required_key_missing_from_records(tmp_path, tiny_schema):
    row = good_row()
    del row["c"]
    f = write_examples(tmp_path / "miss.tfrecord", [row])
    with pytest.raises(SchemaError, match=r"miss.tfrecord: feature 'c': key 'c' is missing"):
        tfinput.tfrecord([f], tiny_schema).build(CONFIG)


def test_schema_that_does_not_match_the_data(tmp_path, small_schema, small_tfrecord):
    wrong = Schema(
        features=(Dense(name="price"), Categorical(name="user", table="t")),
        tables=(Table(name="t", vocabulary_size=10, dim=2),),
    )
    with pytest.raises(SchemaError) as e:
        tfinput.tfrecord(small_tfrecord, wrong).build(CONFIG)
    assert "part-00000" in str(e.value) and "'user'" in str(e.value)
    assert "user_id" in str(e.value)  # did-you-mean


# --------------------------------------------------------------------- Parquet
def test_parquet_missing_or_renamed_column(tmp_path, small_schema, small_columns):
    table = testing.to_arrow(small_columns).rename_columns(
        ["user" if c == "user_id" else c for c in testing.to_arrow(small_columns).column_names]
    )
    path = tmp_path / "renamed.parquet"
    pq.write_table(table, path)
    with pytest.raises(SchemaError) as e:
        tfinput.parquet([str(path)], small_schema).build(CONFIG)
    msg = str(e.value)
    assert "renamed.parquet" in msg and "'user_id'" in msg and "missing" in msg and "'user'" in msg


def test_parquet_wrong_type(tmp_path, tiny_schema):
    path = tmp_path / "types.parquet"
    pq.write_table(pa.table({"x": [1.0], "c": ["abc"], "m": [[1]], "label": [0.0]}), path)
    with pytest.raises(SchemaError) as e:
        tfinput.parquet([str(path)], tiny_schema).build(CONFIG)
    msg = str(e.value)
    assert "types.parquet" in msg and "'c'" in msg and "string" in msg and "expects int" in msg


def test_parquet_null_in_required_column(tmp_path, tiny_schema):
    path = tmp_path / "nulls.parquet"
    pq.write_table(
        pa.table({"x": [1.0, None], "c": [1, None], "m": [[1], None], "label": [0.0, 1.0]}), path
    )
    expected = (
        f"{path}: column 'c': 1 null value(s) but the schema gives no default for it; add "
        "a default or fix the data"
    )
    pipeline = tfinput.parquet([str(path)], tiny_schema)
    with pytest.raises(DataError) as e:
        drain(pipeline, PipelineConfig(batch_size=2))
    assert str(e.value) == expected  # the reader's sentence, not its traceback
    with pytest.raises(DataError) as e:
        list(pipeline.iterator(PipelineConfig(batch_size=2)))
    assert str(e.value) == expected
    (problem,) = pipeline.check().problems
    assert f"{problem.path}: {problem.error}" == expected


def test_parquet_nulls_with_defaults_are_filled(tmp_path, tiny_schema):
    path = tmp_path / "nulls.parquet"
    schema = tiny_schema.replace(
        features=(
            Dense(name="x", default=-1.0),
            Categorical(name="c", table="t", default=7),
            tiny_schema.features[2],
        )
    )
    pq.write_table(
        pa.table({"x": [1.0, None], "c": [1, None], "m": [[1], None], "label": [0.0, 1.0]}), path
    )
    ((f, _),) = tfinput.parquet([str(path)], schema).build(PipelineConfig(batch_size=2))
    assert f["dense"]["x"].numpy().tolist() == [1.0, -1.0]
    assert f["ids"]["c"].numpy().tolist() == [1, 7]
    assert f["weights"]["m"].numpy().tolist() == [[1, 0, 0], [0, 0, 0]]


def test_not_a_parquet_file(tmp_path, tiny_schema):
    path = tmp_path / "junk.parquet"
    path.write_bytes(b"this is not parquet at all")
    with pytest.raises(DataError, match=r"junk.parquet: not a readable Parquet file"):
        tfinput.parquet([str(path)], tiny_schema).build(CONFIG)


def test_tensorflow_io_engine_names_tf_version_and_alternative(small_parquet, small_schema):
    try:
        import tensorflow_io  # noqa: F401

        pytest.skip("tensorflow-io is importable here; the error path is not reachable")
    except Exception:
        pass
    with pytest.raises(SourceError) as e:
        tfinput.parquet(small_parquet, small_schema, engine="tensorflow-io").build(CONFIG)
    assert tf.__version__ in str(e.value) and "engine='pyarrow'" in str(e.value)


# ----------------------------------------------------------- files and globs
def test_glob_that_matches_nothing(tmp_path, tiny_schema):
    with pytest.raises(SourceError, match=r"pattern '.*nothing-\*.tfrecord' matches no files"):
        tfinput.tfrecord(str(tmp_path / "nothing-*.tfrecord"), tiny_schema).build(CONFIG)


@pytest.mark.parametrize("kind", ["tfrecord", "parquet"])
def test_empty_files_are_logged_once(tmp_path, tiny_schema, kind, caplog):
    """A build lists its files twice (the read, the resume identity), bench and tune
    build many times: the skipped empty files are logged once for a given listing; a
    listing with another empty file is logged again."""
    if kind == "tfrecord":
        write_examples(tmp_path / "a.tfrecord", [good_row() for _ in range(10)])
    else:
        table = {"x": [1.0] * 10, "c": [1] * 10, "m": [[1, 2]] * 10, "label": [0.0] * 10}
        pq.write_table(pa.table(table), tmp_path / "a.parquet")
    (tmp_path / f"b.{kind}").write_bytes(b"")
    make = tfinput.tfrecord if kind == "tfrecord" else tfinput.parquet
    pipeline = make(str(tmp_path), tiny_schema)

    def logged() -> list[str]:
        return [r.getMessage() for r in caplog.records if "empty file(s)" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="tfinput"):
        ((_, labels),) = list(pipeline.build(CONFIG))
        assert labels.shape[0] == 10
        assert logged() == [
            f"tfinput: skipped 1 empty file(s) (0 bytes or 0 rows): {tmp_path / f'b.{kind}'}"
        ]
        list(pipeline.iterator(CONFIG))
        pipeline.build(CONFIG)
        assert len(logged()) == 1
        (tmp_path / f"c.{kind}").write_bytes(b"")
        pipeline.build(CONFIG)
    assert len(logged()) == 2 and logged()[1].startswith("tfinput: skipped 2 empty file(s)")


def test_missing_file(tmp_path, tiny_schema):
    with pytest.raises(SourceError, match=r"file '.*absent.tfrecord' does not exist"):
        tfinput.tfrecord(str(tmp_path / "absent.tfrecord"), tiny_schema).build(CONFIG)


def test_empty_files_are_skipped_and_counted(tmp_path, tiny_schema, good_files, caplog):
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    pipeline = tfinput.tfrecord([*good_files, str(empty)], tiny_schema)
    with caplog.at_level(logging.WARNING, logger="tfinput"):
        assert drain(pipeline) == 4
    assert "skipped 1 empty file(s)" in caplog.text and "empty.tfrecord" in caplog.text
    assert pipeline.check().empty_files == (str(empty),)
    strict = tfinput.tfrecord([*good_files, str(empty)], tiny_schema, empty_files="error")
    with pytest.raises(
        SourceError, match=r"1 empty file\(s\) \(0 bytes or 0 rows\), first '.*empty.tfrecord'"
    ):
        strict.build(CONFIG)


def test_only_empty_files(tmp_path, tiny_schema):
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    with pytest.raises(SourceError, match="all 1 input file"):
        tfinput.tfrecord([str(empty)], tiny_schema).build(CONFIG)


def test_wrapped_dataset_missing_key(tiny_schema):
    ds = tf.data.Dataset.from_tensor_slices({"x": [1.0], "label": [0.0], "m": [[1]]})
    with pytest.raises(SchemaError, match=r"wrapped dataset: feature 'c': key 'c' missing"):
        tfinput.wrap(ds, tiny_schema).build(CONFIG)


def test_weights_of_a_different_length_than_ids(tmp_path):
    schema = Schema(
        features=(MultiHot(name="m", table="t", max_len=3, weights="w"),),
        tables=(Table(name="t", vocabulary_size=10, dim=2),),
    )
    f = write_examples(tmp_path / "w.tfrecord", [{"m": ("int", [1, 2]), "w": ("float", [0.5])}])
    with pytest.raises(DataError, match=r"feature 'm': weights column 'w' has a different"):
        drain(tfinput.tfrecord([f], schema), PipelineConfig(batch_size=1))


def test_error_surfaces_without_hanging_under_parallelism(tmp_path, tiny_schema, good_files):
    bad = write_examples(tmp_path / "neg.tfrecord", [good_row(c=-1)] * 100)
    config = PipelineConfig(
        batch_size=10,
        interleave_cycle_length=3,
        interleave_parallelism=3,
        map_parallelism=4,
        prefetch=8,
        deterministic=False,
    )
    with pytest.raises(DataError, match="negative id"):
        drain(tfinput.tfrecord([*good_files, bad], tiny_schema).with_file_shuffling(), config)


# ------------------------------------------- data nobody prepared for (issue)
def _record_ends(path):
    """Byte offsets where each record of an uncompressed TFRecord file ends."""
    import struct

    with open(path, "rb") as fh:
        data, ends, pos = fh.read(), [], 0
    while pos < len(data):
        pos += 16 + struct.unpack("<Q", data[pos : pos + 8])[0]
        ends.append(pos)
    return ends


@pytest.mark.parametrize("into_header", [1, 8, 11], ids=["1-byte", "8-bytes", "11-bytes"])
def test_tfrecord_cut_inside_a_record_header(tmp_path, tiny_schema, good_files, into_header):
    bad = tmp_path / "cut.tfrecord"
    write_examples(bad, [good_row() for _ in range(200)])
    end = _record_ends(bad)[99]  # keep 100 whole records and part of the next header
    bad.write_bytes(bad.read_bytes()[: end + into_header])
    pipeline = tfinput.tfrecord([good_files[0], str(bad)], tiny_schema)  # one good file first
    with pytest.raises(DataError) as e:
        drain(pipeline)
    msg = str(e.value)
    assert "cut.tfrecord" in msg and f"offset {end}" in msg and "truncated" in msg
    report = pipeline.check()
    assert [p.path for p in report.problems] == [str(bad)]
    assert f"offset {end}" in report.problems[0].error


def test_tfrecord_shorter_than_one_header(tmp_path, tiny_schema):
    bad = tmp_path / "stub.tfrecord"
    bad.write_bytes(b"\x05\x00\x00")
    with pytest.raises(DataError, match=r"stub.tfrecord.*offset 0"):
        drain(tfinput.tfrecord([str(bad)], tiny_schema))


def test_tfrecord_whole_files_still_pass_the_tail_check(tmp_path, tiny_schema):
    big = write_examples(tmp_path / "big.tfrecord", [good_row()] * 3)
    # One record far larger than the first tail window still ends the file cleanly.
    schema = tiny_schema.replace(labels=(Label(name="label"),))
    row = good_row()
    row["pad"] = ("bytes", [b"p" * 300_000])
    write_examples(tmp_path / "huge.tfrecord", [good_row(), row])
    assert drain(tfinput.tfrecord([big, str(tmp_path / "huge.tfrecord")], schema)) == 1


def test_schema_key_absent_from_every_example_is_a_schema_error(tmp_path, tiny_schema):
    f = write_examples(tmp_path / "typo.tfrecord", [good_row() for _ in range(20)])
    schema = tiny_schema.replace(features=(Dense(name="xx"), *tiny_schema.features[1:]))
    with pytest.raises(SchemaError) as e:
        tfinput.tfrecord([f], schema).build(CONFIG)
    msg = str(e.value)
    assert "typo.tfrecord" in msg and "'xx'" in msg and "20 record" in msg and "'x'" in msg
    multi = tiny_schema.replace(
        features=(*tiny_schema.features[:2], MultiHot(name="mm", table="t", max_len=3))
    )
    with pytest.raises(SchemaError, match=r"typo.tfrecord.*feature 'mm'.*did you mean \['m'\]"):
        tfinput.tfrecord([f], multi).build(CONFIG)


def test_key_missing_from_some_examples_uses_its_default(tmp_path, tiny_schema):
    rows = [good_row() for _ in range(10)]
    for row in rows[:7]:  # absent from the first records, present later
        del row["x"]
        del row["m"]
    f = write_examples(tmp_path / "sparse.tfrecord", rows)
    schema = tiny_schema.replace(
        features=(Dense(name="x", default=-1.0), *tiny_schema.features[1:])
    )
    ((features, _),) = tfinput.tfrecord([f], schema).build(CONFIG)
    assert features["dense"]["x"].numpy().tolist() == [-1.0] * 7 + [1.0] * 3
    assert features["weights"]["m"].numpy()[:7].sum() == 0


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_nan_or_inf_label(tmp_path, tiny_schema, value):
    row = good_row()
    row["label"] = ("float", [value])
    f = write_examples(tmp_path / "lab.tfrecord", [good_row()] * 5 + [row])
    with pytest.raises(DataError, match=r"lab.tfrecord.*label 'label': NaN or inf"):
        drain(tfinput.tfrecord([f], tiny_schema))
    assert not tfinput.tfrecord([f], tiny_schema).check().ok


@pytest.mark.parametrize("fmt", ["dense", "sparse", "ragged"])
@pytest.mark.parametrize("value", [float("nan"), float("-inf")], ids=["nan", "inf"])
def test_nan_or_inf_multi_hot_weight(tmp_path, value, fmt):
    schema = Schema(
        features=(MultiHot(name="m", table="t", max_len=3, weights="w"),),
        tables=(Table(name="t", vocabulary_size=10, dim=2),),
    )
    f = write_examples(
        tmp_path / "w.tfrecord", [{"m": ("int", [1, 2]), "w": ("float", [0.5, value])}]
    )
    pipeline = tfinput.tfrecord([f], schema).with_multi_hot_format(fmt)
    with pytest.raises(
        DataError, match=r"w.tfrecord.*feature 'm': NaN or inf in weights column 'w'"
    ):
        drain(pipeline, PipelineConfig(batch_size=1))
    assert not pipeline.check().ok


def test_parquet_null_inside_a_weights_list(tmp_path):
    schema = Schema(
        features=(MultiHot(name="m", table="t", max_len=3, weights="w"),),
        tables=(Table(name="t", vocabulary_size=10, dim=2),),
    )
    path = tmp_path / "wnull.parquet"
    pq.write_table(pa.table({"m": [[1, 2], [3]], "w": [[0.5, None], [1.0]]}), path)
    with pytest.raises(DataError, match=r"wnull.parquet: column 'w': 1 null value\(s\) inside"):
        drain(tfinput.parquet([str(path)], schema), PipelineConfig(batch_size=2))


def test_parquet_null_inside_an_id_list_is_called_null(tmp_path, tiny_schema):
    path = tmp_path / "idnull.parquet"
    pq.write_table(
        pa.table({"x": [1.0, 2.0], "c": [1, 2], "m": [[1, None], [2]], "label": [0.0, 1.0]}), path
    )
    with pytest.raises(DataError) as e:
        drain(tfinput.parquet([str(path)], tiny_schema), PipelineConfig(batch_size=2))
    msg = str(e.value)
    assert "idnull.parquet" in msg and "column 'm'" in msg and "null" in msg
    assert "-9223372036854775808" not in msg


def test_parquet_null_dense_vector_takes_the_default(tmp_path):
    schema = Schema(features=(Dense(name="v", length=2, default=-1.0),), labels=(Label(name="y"),))
    path = tmp_path / "vnull.parquet"
    pq.write_table(pa.table({"v": [[1.0, 2.0], None], "y": [0.0, 1.0]}), path)
    ((f, _),) = tfinput.parquet([str(path)], schema).build(PipelineConfig(batch_size=2))
    assert f["dense"]["v"].numpy().tolist() == [[1.0, 2.0], [-1.0, -1.0]]


def test_parquet_type_drift_across_files(tmp_path, tiny_schema):
    first, later = tmp_path / "a.parquet", tmp_path / "b.parquet"
    cols = {"c": [1, 2], "m": [[1], [2]], "label": [0.0, 1.0]}
    pq.write_table(pa.table({"x": pa.array([1, 2], pa.int64()), **cols}), first)
    pq.write_table(pa.table({"x": pa.array([1.5, 2.5], pa.float64()), **cols}), later)
    pipeline = tfinput.parquet([str(first), str(later)], tiny_schema)
    with pytest.raises(SchemaError) as e:
        drain(pipeline, PipelineConfig(batch_size=2))
    msg = str(e.value)
    assert "b.parquet" in msg and "a.parquet" in msg and "'x'" in msg
    assert "int64" in msg and "double" in msg
    report = pipeline.check()
    assert not report.ok and "double" in report.problems[0].error


def test_unreadable_tfrecord_message_is_clean(tmp_path, tiny_schema):
    junk = tmp_path / "junk.tfrecord"
    junk.write_bytes(b"this is not a tfrecord file, not at all" * 10)
    with pytest.raises(DataError) as e:
        tfinput.tfrecord([str(junk)], tiny_schema).build(CONFIG)
    msg = str(e.value)
    assert msg.startswith(f"{junk}: not a readable TFRecord file")
    assert "function_node" not in msg and "[Op:" not in msg and msg.count(str(junk)) == 1


# --------------------------------------------------------------- huge buffers
def test_tfrecord_shuffle_buffer_is_capped_by_what_the_files_can_hold(
    tmp_path, tiny_schema, good_files, caplog
):
    config = PipelineConfig(batch_size=50, shuffle_buffer=10**9, shuffle_seed=1)
    pipeline = tfinput.tfrecord(good_files, tiny_schema)
    with caplog.at_level(logging.WARNING, logger="tfinput"):
        ds = pipeline.build(config)
    assert "shuffle_buffer 1000000000" in caplog.text
    total = sum(os.path.getsize(f) for f in good_files)
    assert f"using {total // 16}" in caplog.text
    assert sum(int(f["dense"]["x"].shape[0]) for f, _ in ds) == 200


# ------------------------------------------------------------- wrapped [1] shapes
@pytest.mark.parametrize("batched", [False, True], ids=["examples", "batches"])
def test_wrapped_dataset_of_one_element_vectors(tiny_schema, batched):
    def parsed():
        spec = {
            "x": tf.io.FixedLenFeature([1], tf.float32),
            "c": tf.io.FixedLenFeature([1], tf.int64),
            "m": tf.io.RaggedFeature(tf.int64),
            "label": tf.io.FixedLenFeature([1], tf.float32),
        }
        rows = []
        for i in range(8):
            ex = tf.train.Example()
            ex.features.feature["x"].float_list.value.append(float(i))
            ex.features.feature["c"].int64_list.value.append(i)
            ex.features.feature["m"].int64_list.value.extend([1, 2])
            ex.features.feature["label"].float_list.value.append(1.0)
            rows.append(ex.SerializeToString())
        ds = tf.data.Dataset.from_tensor_slices(rows)
        if batched:
            return ds.batch(4, drop_remainder=True).map(lambda s: tf.io.parse_example(s, spec))
        return ds.map(lambda s: tf.io.parse_single_example(s, spec))

    ds = tfinput.wrap(parsed, tiny_schema, batched=batched).build(PipelineConfig(batch_size=4))
    (f, y), _ = list(ds)
    assert f["dense"]["x"].shape == (4,) and f["dense"]["x"].numpy().tolist() == [0, 1, 2, 3]
    assert f["ids"]["c"].numpy().tolist() == [0, 1, 2, 3]
    assert y.shape == (4,)


def test_wrapped_dataset_of_longer_vectors_for_a_scalar_feature(tiny_schema):
    ds = tf.data.Dataset.from_tensor_slices(
        {"x": np.ones((4, 2), np.float32), "c": [1] * 4, "m": [[1]] * 4, "label": [0.0] * 4}
    )
    with pytest.raises(SchemaError, match=r"wrapped dataset: feature 'x'.*shape \[2\]"):
        tfinput.wrap(ds, tiny_schema).build(CONFIG)


# -------------------------------------------------------------------- check
def test_check_names_every_failing_feature_with_real_record_numbers(tmp_path):
    schema = Schema(
        features=(
            Dense(name="a"),
            Dense(name="b"),
            Categorical(name="c", table="t"),
        ),
        tables=(Table(name="t", vocabulary_size=10, dim=2),),
        labels=(Label(name="label"),),
    )
    rows = [
        {"a": ("float", [1.0]), "b": ("float", [1.0]), "c": ("int", [1]), "label": ("float", [0])}
        for _ in range(40)
    ]
    rows[3]["a"] = ("float", [float("nan")])
    rows[5]["b"] = ("float", [float("inf")])
    rows[7]["c"] = ("int", [12])
    f = write_examples(tmp_path / "many.tfrecord", rows)
    for _ in range(3):  # the same answer every run
        report = tfinput.tfrecord([f], schema).check()
        (problem,) = report.problems
        for name in ("'a'", "'b'", "'c'"):
            assert f"feature {name}" in problem.error
        assert "records 0-39" in problem.error and "1023" not in problem.error


def _schema_file(tmp_path, schema):
    path = tmp_path / "schema.json"
    schema.to_json(path)
    return str(path)


def test_cli_check_names_every_failing_feature_and_the_cut_file(tmp_path, tiny_schema, capsys):
    import json

    from tfinput import cli

    rows = [good_row() for _ in range(40)]
    rows[2] = good_row(x=float("nan"))
    rows[9] = good_row(c=500)
    bad = write_examples(tmp_path / "bad.tfrecord", rows)
    cut = tmp_path / "cut.tfrecord"
    write_examples(cut, [good_row() for _ in range(30)])
    end = _record_ends(cut)[19]
    cut.write_bytes(cut.read_bytes()[: end + 3])
    schema = _schema_file(tmp_path, tiny_schema)
    assert cli.main(["check", bad, str(cut), "--schema", schema, "--json"]) == 1
    files = {f["path"]: f for f in json.loads(capsys.readouterr().out)["files"]}
    assert files[bad]["records"] == 40
    error = files[bad]["error"]
    assert "feature 'x': NaN or inf" in error and "feature 'c': id out of range" in error
    assert "records 0-39" in error and "1023" not in error
    assert f"offset {end}" in files[str(cut)]["error"]
    assert files[str(cut)]["records"] == 20
    assert not files[str(cut)]["error"].startswith(str(cut))


def test_parquet_check_names_every_failing_feature_with_the_file_rows(tmp_path, tiny_schema):
    path = tmp_path / "two.parquet"
    pq.write_table(
        pa.table(
            {
                "x": [1.0, float("nan"), 2.0],
                "c": [1, 2, 300],
                "m": [[1], [], [2]],
                "label": [0.0, 1.0, float("inf")],
            }
        ),
        path,
    )
    (problem,) = tfinput.parquet([str(path)], tiny_schema).check().problems
    assert problem.records == 3
    for part in ("feature 'x': NaN", "feature 'c': id out of range", "label 'label': NaN"):
        assert part in problem.error
    assert "records 0-2:" in problem.error and "1023" not in problem.error


def test_wrapped_shuffle_buffer_is_capped_at_the_dataset_size(tiny_schema, caplog):
    ds = tf.data.Dataset.from_tensor_slices(
        {"x": [1.0] * 8, "c": [1] * 8, "m": tf.ragged.constant([[1]] * 8), "label": [0.0] * 8}
    )
    config = PipelineConfig(batch_size=4, shuffle_buffer=10**9, shuffle_seed=1)
    with caplog.at_level(logging.WARNING, logger="tfinput"):
        batches = list(tfinput.wrap(ds, tiny_schema).build(config))
    assert "shuffle_buffer 1000000000" in caplog.text and "using 8" in caplog.text
    assert sum(int(f["dense"]["x"].shape[0]) for f, _ in batches) == 8


def test_wrapped_int32_ids_are_read_as_int64(tiny_schema):
    ds = tf.data.Dataset.from_tensor_slices(
        {
            "x": [1.0] * 4,
            "c": np.array([1, 2, 3, 4], np.int32),
            "m": tf.ragged.constant([[1, 2], [], [3], [4]], dtype=tf.int32),
            "label": [0.0] * 4,
        }
    )
    ((f, _),) = tfinput.wrap(ds, tiny_schema).build(PipelineConfig(batch_size=4))
    assert f["ids"]["c"].numpy().tolist() == [1, 2, 3, 4]
    assert f["ids"]["m"].numpy().tolist() == [[1, 2, 0], [0, 0, 0], [3, 0, 0], [4, 0, 0]]
    bad = ds.map(lambda e: {**e, "c": e["c"] - 2})
    with pytest.raises(DataError, match=r"feature 'c': negative id"):
        drain(tfinput.wrap(bad, tiny_schema), PipelineConfig(batch_size=4))


@pytest.mark.parametrize(
    "first, later",
    [(pa.float64(), pa.int64()), (pa.int64(), pa.int32()), (pa.float64(), pa.float32())],
    ids=["ints-read-as-floats", "narrower-int", "narrower-float"],
)
def test_parquet_type_drift_that_reads_exactly_is_accepted(tmp_path, tiny_schema, first, later):
    cols = {"c": [1, 2], "m": [[1], [2]], "label": [0.0, 1.0]}
    paths = []
    for name, t in (("a", first), ("b", later)):
        paths.append(str(tmp_path / f"{name}.parquet"))
        pq.write_table(pa.table({"x": pa.array([1, 2], t), **cols}), paths[-1])
    pipeline = tfinput.parquet(paths, tiny_schema)
    got = [
        f["dense"]["x"].numpy().tolist() for f, _ in pipeline.build(PipelineConfig(batch_size=2))
    ]
    assert got == [[1.0, 2.0], [1.0, 2.0]]
    assert pipeline.check().ok


def _live_iterators() -> int:
    import gc

    return sum(isinstance(o, tf.data.Iterator) for o in gc.get_objects())


@pytest.mark.parametrize("kind", ["tfrecord", "parquet"])
def test_a_failed_pipeline_lets_go_of_its_iterators(tmp_path, tiny_schema, kind):
    """The error keeps no iterator of the failed pipeline (or of the checks that named
    the file) alive: they are deleted when the error is raised, not by a later garbage
    collection (deleting a tf.data iterator waits for its threads; inside a collection
    that blocked other work for seconds). Held here as a user's code would hold it."""
    import gc

    if kind == "tfrecord":
        path = write_examples(tmp_path / "nan.tfrecord", [good_row()] * 10 + [good_row(x=1e400)])
        pipeline = tfinput.tfrecord([path], tiny_schema)
    else:
        path = str(tmp_path / "nan.parquet")
        pq.write_table(
            pa.table({"x": [1.0, float("nan")], "c": [1, 2], "m": [[1], []], "label": [0.0, 1.0]}),
            path,
        )
        pipeline = tfinput.parquet([path], tiny_schema)
    gc.collect()
    before = _live_iterators()
    gc.disable()
    try:
        with pytest.raises(DataError, match="NaN or inf") as excinfo:
            drain(pipeline, PipelineConfig(batch_size=2, drop_remainder=False))
        assert _live_iterators() == before
        assert excinfo.value.__cause__ is not None  # the TensorFlow error is still chained
    finally:
        gc.enable()
