"""`tfinput._src.applications.convert.columns`: text and typed columns converted to their output types, bad
rows found with their reasons."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

import tfinput
from tfinput._src.applications.convert.columns import (
    Column,
    convert_batch,
    convert_typed,
    is_list_type,
)
from tfinput.convert import convert
from tfinput.errors import DataError
from tfinput.schema import Categorical, Dense, Label, Schema, Table


def _text_batch(**columns: list[str | None]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({k: pa.array(v, pa.string()) for k, v in columns.items()})


def test_convert_batch_types_lists_blanks_and_bad_rows():
    batch = _text_batch(
        n=["260.0", None, "7", "x", "3"],
        tags=["a||b", None, "", "c", "d"],
        label=["1", None, "0", "1", None],
    )
    plan = {
        "n": Column(name="n", kind="int64"),
        "tags": Column(name="tags", kind="string", is_list=True),
        "label": Column(name="label", kind="float32", required=True, feature="label"),
    }
    table, bad, blank = convert_batch(batch, plan)
    assert blank == 1  # row 1: every field empty
    assert bad == {
        3: "column 'n': value 'x' is not a valid int64",
        4: "column 'label': missing value, and feature 'label' has no default",
    }
    assert table.to_pydict() == {
        "n": [260, 7],  # an integral float is an int
        "tags": [["a", "b"], []],  # empty items dropped; an empty field is an empty list
        "label": [1.0, 0.0],
    }
    assert table.schema.field("tags").type == pa.list_(pa.string())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("label,x\n,1\n", "column 'label': missing value, and feature 'label' has no default"),
        ("label,x\n1,nan\n", "column 'x': value 'nan' is not a finite number"),
        ("label,x\n1,12.5\n", "column 'x': value '12.5' is not a valid int64"),
        ("label,x\n1,-3\n", "column 'x': value -3 is a negative id"),
        ("label,x\n1,100\n", "column 'x': value 100 is out of range: feature 'x' expects"),
    ],
    ids=["missing-label", "nan-dense", "fractional-id", "negative-id", "id-out-of-range"],
)
def test_bad_values_name_line_and_column(tmp_path, write_text, text, message):
    x_is_float = "nan" in text
    feature = Dense(name="x") if x_is_float else Categorical(name="x", table="t")
    tables = () if x_is_float else (Table(name="t", vocabulary_size=100, dim=4),)
    schema = Schema(features=(feature,), tables=tables, labels=(Label(name="label"),))
    path = write_text(text)
    with pytest.raises(DataError, match="on_bad_rows='skip'") as err:
        convert(path, tmp_path / "out", schema=schema)
    assert str(err.value).startswith(f"{path}:2: {message}")


def test_convert_typed_decodes_dictionaries_and_checks_vector_lengths():
    raw = pa.table(
        {
            "city": pa.array(["de", "fr", "de"]).dictionary_encode(),
            "vec": pa.array([[1.0, 2.0], [3.0], None], pa.list_(pa.float64())),
        }
    )
    plan = {
        "city": Column(name="city", kind="string"),
        "vec": Column(name="vec", kind="float32", is_list=True, fixed_len=2, finite=True),
    }
    table, bad = convert_typed(raw, plan, "in.parquet")
    assert bad == {1: "column 'vec': expected 2 values, found 1"}
    assert table.to_pydict() == {"city": ["de", "de"], "vec": [[1.0, 2.0], None]}  # null: default


def test_convert_typed_refuses_binary_that_is_not_text():
    raw = pa.table({"s": pa.array([b"ok", b"\xff\xfe"], pa.binary())})
    with pytest.raises(DataError, match=r"in\.parquet: column 's': values of type binary cannot"):
        convert_typed(raw, {"s": Column(name="s", kind="string")}, "in.parquet")


@pytest.mark.parametrize(
    ("arrow", "is_list"),
    [
        (pa.list_(pa.int64()), True),
        (pa.large_list(pa.string()), True),
        (pa.list_(pa.float32(), 4), True),
        (pa.int64(), False),
        (pa.string(), False),
    ],
    ids=["list", "large-list", "fixed-size-list", "int", "string"],
)
def test_is_list_type(arrow, is_list):
    assert is_list_type(arrow) is is_list


def test_parquet_bad_rows_name_the_row(tmp_path):
    schema = Schema(
        features=(Dense(name="x"), Categorical(name="c", table="t")),
        tables=(Table(name="t", vocabulary_size=10, dim=4),),
        labels=(Label(name="label"),),
    )
    table = pa.table(
        {
            "x": pa.array([1.0, float("nan"), 3.0, 4.0], pa.float64()),
            "c": pa.array([1, 2, -3, None], pa.int32()),
            "label": pa.array([0, 1, 0, 1], pa.int64()),
        }
    )
    path = tmp_path / "in.parquet"
    pq.write_table(table, path)
    with pytest.raises(DataError) as err:
        convert(path, tmp_path / "a", schema=schema, to="columnar")
    assert str(err.value).startswith(f"{path}: row 2: column 'x': value nan is not a finite")
    result = convert(path, tmp_path / "b", schema=schema, to="columnar", on_bad_rows="skip")
    assert (result.rows, result.skipped) == (1, 3)
    assert [str(b) for b in result.bad_rows] == [
        f"{path}: row 2: column 'x': value nan is not a finite number",
        f"{path}: row 3: column 'c': value -3 is a negative id",
        f"{path}: row 4: column 'c': missing value, and feature 'c' has no default",
    ]


def test_tfrecord_scalar_with_several_values_is_a_bad_row(tmp_path, output):
    schema = Schema.of([Dense(name="x")], labels=["label"])
    path = tmp_path / "in.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        for xs in ([1.0], [2.0, 3.0], []):
            ex = tf.train.Example()
            ex.features.feature["x"].float_list.value.extend(xs)
            ex.features.feature["label"].float_list.value.append(1.0)
            w.write(ex.SerializeToString())
    result = convert(path, tmp_path / "out", schema=schema, to="columnar", on_bad_rows="skip")
    assert [str(b) for b in result.bad_rows] == [
        f"{path}: row 2: column 'x': expected one value, found 2"
    ]
    pipeline = output.pipeline(result)
    features, _ = next(iter(pipeline.build(tfinput.PipelineConfig.naive(batch_size=2))))
    assert features["dense"]["x"].numpy().tolist() == [1.0, 0.0]  # missing: the default
