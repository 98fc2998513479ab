"""`tfinput.testing`: the synthetic schemas, `generate` (deterministic, follows the
schema) and the TFRecord / Parquet / columnar writers, which hold the generated rows."""

from __future__ import annotations

import os

import numpy as np
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import collect
from tfinput import testing
from tfinput._src.applications.testing import _to_examples_protobuf
from tfinput.config import PipelineConfig
from tfinput.schema import Categorical, Dense, MultiHot
from tfinput.transforms import parse_spec


def _assert_same_columns(a: testing.Columns, b: testing.Columns) -> None:
    assert a.rows == b.rows and list(a.values) == list(b.values)
    assert list(a.lengths) == list(b.lengths)
    for col in a.values:
        np.testing.assert_array_equal(a.values[col], b.values[col], err_msg=col)
    for col in a.lengths:
        np.testing.assert_array_equal(a.lengths[col], b.lengths[col], err_msg=col)


def test_small_schema_has_every_feature_kind():
    schema = testing.small_schema()
    kinds = {(type(f).__name__, getattr(f, "dtype", None)) for f in schema.features}
    assert kinds >= {
        ("Dense", "int64"),
        ("Dense", "float32"),
        ("Categorical", "int64"),
        ("Categorical", "string"),
        ("MultiHot", "int64"),
        ("MultiHot", "string"),
    }
    assert schema.feature("embedding").length == 3 and schema.feature("history").weights
    assert [f.name for f in schema.features if getattr(f, "table", None) == "items"] == [
        "last_item",
        "history",
    ]
    assert "row_id" not in testing.small_schema(row_id=False).columns()


def test_criteo_like_schema_counts_and_options():
    schema = testing.criteo_like_schema()
    assert (len(schema.dense), len(schema.categorical), len(schema.multi_hot)) == (13, 30, 4)
    assert schema.feature("I1").clip == (0.0, None) and schema.feature("I1").log1p
    assert schema.table("C1").vocabulary_size == 100_000 and schema.feature("M4").max_len == 20
    other = testing.criteo_like_schema(
        n_dense=1, n_categorical=1, n_multi_hot=1, n_string=2, weights=True, row_id=True
    )
    assert other.columns() == ["row_id", "I1", "C1", "S1", "S2", "M1", "M1_w", "label"]
    assert other.feature("S2").dtype == "string" and other.table("M1").combiner == "sum"


def test_generate_is_deterministic_per_seed(small_schema):
    a = testing.generate(small_schema, 200, seed=1)
    _assert_same_columns(a, testing.generate(small_schema, 200, seed=1))
    other = testing.generate(small_schema, 200, seed=2)
    assert not np.array_equal(a.values["user_id"], other.values["user_id"])


def test_generate_follows_the_schema(small_schema):
    cols = testing.generate(small_schema, 500, seed=3)
    tables = {t.name: t.vocabulary_size for t in small_schema.tables}
    np.testing.assert_array_equal(cols.values["row_id"], np.arange(500))
    for f in small_schema.features:
        v = cols.values[f.source]
        if isinstance(f, Dense) and f.name != "row_id":
            assert v.shape == ((500,) if f.length is None else (500, f.length)), f.name
            assert v.dtype == np.float32 and (v >= 0).all(), f.name
        elif isinstance(f, MultiHot):
            lengths = cols.lengths[f.source]
            assert lengths.min() == 0 and lengths.max() == f.max_len - 1, f.name
            assert v.shape == (lengths.sum(),), f.name
        if isinstance(f, (Categorical, MultiHot)) and f.dtype == "int64":
            assert v.min() >= 0 and v.max() < tables[f.table], f.name
        elif isinstance(f, (Categorical, MultiHot)):
            assert all(len(x) == 8 and int(x, 16) >= 0 for x in v), f.name
    w = cols.values["history_w"]
    np.testing.assert_array_equal(cols.lengths["history_w"], cols.lengths["history"])
    assert (w >= 0.1).all() and (w < 1.0).all()
    assert set(np.unique(cols.values["label"])) == {0.0, 1.0}
    longer = testing.generate(small_schema, 500, seed=3, max_list_len=8)
    assert longer.lengths["history"].max() == 7  # longer than max_len 5: to be truncated


def test_row_slice_keeps_list_values_with_their_rows(small_columns):
    part = small_columns.row_slice(10, 20)
    assert part.rows == 10
    np.testing.assert_array_equal(part.values["row_id"], np.arange(10, 20))
    offsets = small_columns.offsets("history")
    np.testing.assert_array_equal(
        part.values["history"], small_columns.values["history"][offsets[10] : offsets[20]]
    )
    np.testing.assert_array_equal(part.offsets("history"), offsets[10:21] - offsets[10])


def test_to_examples_parse_back_to_the_columns(small_schema, small_columns):
    cols = small_columns.row_slice(0, 50)
    parsed = tf.io.parse_example(tf.constant(testing.to_examples(cols)), parse_spec(small_schema))
    for col, values in cols.values.items():
        got = parsed[col]
        if col in cols.lengths:
            np.testing.assert_array_equal(got.row_lengths(), cols.lengths[col], err_msg=col)
            got = got.values
        np.testing.assert_array_equal(got.numpy(), values, err_msg=col)


def test_wire_columns_and_arrow_types_follow_the_numpy_types(small_columns):
    kinds = {w.key: w.kind for w in testing.wire_columns(small_columns)}
    assert kinds == {
        "row_id": "int64",
        "price": "float",
        "embedding": "float",
        "user_id": "int64",
        "country": "bytes",
        "last_item": "int64",
        "history": "int64",
        "history_w": "float",
        "tags": "bytes",
        "label": "float",
    }
    types = {f.name: str(f.type) for f in testing.to_arrow(small_columns).schema}
    assert types["embedding"] == "fixed_size_list<item: float>[3]"
    assert types["history"] == "list<item: int64>" and types["tags"] == "list<item: string>"
    assert types["country"] == "string" and types["label"] == "float"


@pytest.mark.parametrize(
    "compression, ext", [(None, ".tfrecord"), ("GZIP", ".tfrecord.gz"), ("ZLIB", ".tfrecord.zz")]
)
def test_write_tfrecord_splits_rows_evenly_over_named_files(tmp_path, compression, ext):
    schema = testing.small_schema()
    paths = testing.write_tfrecord(
        tmp_path, schema, rows=10, files=3, compression=compression, prefix="train"
    )
    assert [os.path.basename(p) for p in paths] == [
        f"train-0000{i}-of-00003{ext}" for i in range(3)
    ]
    counts = [
        sum(1 for _ in tf.data.TFRecordDataset(p, compression_type=compression or ""))
        for p in paths
    ]
    assert counts == [3, 3, 4]


def test_write_parquet_holds_the_generated_rows_in_row_groups(tmp_path, small_schema):
    paths = testing.write_parquet(tmp_path, small_schema, rows=300, files=2, row_group_size=40)
    files = [pq.ParquetFile(p) for p in paths]
    assert [f.metadata.num_rows for f in files] == [150, 150]
    assert files[0].metadata.num_row_groups == 4  # 40 + 40 + 40 + 30
    table = pq.read_table(paths)
    assert table.equals(testing.to_arrow(testing.generate(small_schema, 300)))


def test_write_columnar_holds_whole_chunks_per_file(tmp_path, small_schema):
    paths = testing.write_columnar(tmp_path, small_schema, rows=10, files=3, chunk_rows=8)
    # 4 rows a file rounds up to one chunk of 8: two files, not three
    assert [os.path.basename(p) for p in paths] == [
        "part-00000-of-00002.tfcol",
        "part-00001-of-00002.tfcol",
    ]
    assert (tmp_path / "manifest.json").is_file()
    config = PipelineConfig(batch_size=5, drop_remainder=False)
    got = collect(tfinput.columnar(paths, small_schema).build(config))
    assert sorted(got["dense"]["row_id"].tolist()) == list(range(10))


@pytest.mark.parametrize("rows", [0, 3], ids=["no-rows", "3-rows"])
def test_to_examples_of_a_string_list_empty_in_every_row(rows):
    cols = testing.Columns(
        rows=rows,
        values={"tags": np.array([], dtype=object), "label": np.arange(rows, dtype=np.int64)},
        lengths={"tags": np.zeros(rows, np.int64)},
    )
    records = testing.to_examples(cols)
    assert [tf.train.Example.FromString(r) for r in records] == [
        tf.train.Example.FromString(r) for r in _to_examples_protobuf(cols)
    ]
    spec = {"tags": tf.io.RaggedFeature(tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    parsed = tf.io.parse_example(tf.constant(records, tf.string), spec)
    assert parsed["tags"].row_lengths().numpy().tolist() == [0] * rows
    assert parsed["label"].numpy().tolist() == list(range(rows))
