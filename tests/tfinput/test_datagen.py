"""`tfinput.datagen`: deterministic synthetic data sets, and the vectorized tf.Example
encoder (`tfinput._example_wire`) that writes its TFRecord files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfinput import datagen, testing
from tfinput._example_wire import WireColumn, bytes_column, encode_examples
from tfinput.errors import ConfigError
from tfinput.transforms import parse_spec


def _parse(records: list[bytes], spec: dict) -> dict[str, np.ndarray | tuple]:
    out = {}
    for key, value in tf.io.parse_example(tf.constant(records), spec).items():
        if isinstance(value, tf.RaggedTensor):
            out[key] = (value.values.numpy(), value.row_splits.numpy())
        else:
            out[key] = value.numpy()
    return out


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], tuple):
            for x, y in zip(a[key], b[key], strict=True):
                np.testing.assert_array_equal(x, y, err_msg=key)
        else:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


SCHEMAS = {
    "criteo-like": lambda: testing.criteo_like_schema(),
    "small": lambda: testing.small_schema(),
    "strings+weights+row_id": lambda: testing.criteo_like_schema(
        n_dense=2, n_categorical=2, n_multi_hot=2, n_string=3, weights=True, row_id=True
    ),
}


@pytest.mark.parametrize("make_schema", SCHEMAS.values(), ids=SCHEMAS.keys())
def test_fast_encoder_parses_like_protobuf(make_schema):
    schema = make_schema()
    cols = testing.generate(schema, 700, seed=3)
    fast = testing.to_examples(cols)
    reference = testing._to_examples_protobuf(cols)
    assert len(fast) == len(reference) == 700
    spec = parse_spec(schema)
    _assert_same(_parse(fast, spec), _parse(reference, spec))
    for i in (0, 1, 350, 699):  # the same message, field for field
        assert tf.train.Example.FromString(fast[i]) == tf.train.Example.FromString(reference[i])


def test_fast_encoder_edge_values():
    rows = 4
    big = np.array([0, 127, 128, 2**62], dtype=np.int64)
    long_text = b"x" * 300  # a length that needs a two-byte varint
    columns = [
        WireColumn(key="ints", kind="int64", values=np.array([-1, -(2**63), 2**63 - 1, 5])),
        WireColumn(key="big", kind="int64", values=big),
        WireColumn(key="f", kind="float", values=np.array([0.5, -1.25, np.inf, 3e38])),
        WireColumn(key="vec", kind="float", values=np.arange(8, dtype=np.float32).reshape(4, 2)),
        WireColumn(
            key="ids",
            kind="int64",
            values=np.array([1, 2, 3, 300000], dtype=np.int64),
            row_lengths=np.array([0, 3, 0, 1]),
        ),
        bytes_column("s", [b"", long_text, "é".encode(), b"a"]),
        bytes_column("toks", [b"a", b"", long_text], row_lengths=np.array([2, 0, 0, 1])),
        WireColumn(
            key="maybe",
            kind="int64",
            values=np.array([7, 0, 9, 0]),
            present=np.array([True, False, True, False]),
        ),
    ]
    records = encode_examples(columns, rows, chunk_rows=3)  # two chunks
    examples = [tf.train.Example.FromString(r) for r in records]
    feats = [e.features.feature for e in examples]
    assert [f["ints"].int64_list.value[0] for f in feats] == [-1, -(2**63), 2**63 - 1, 5]
    assert [f["big"].int64_list.value[0] for f in feats] == big.tolist()
    assert list(feats[1]["f"].float_list.value) == [-1.25]
    assert list(feats[3]["vec"].float_list.value) == [6.0, 7.0]
    assert [list(f["ids"].int64_list.value) for f in feats] == [[], [1, 2, 3], [], [300000]]
    assert feats[1]["s"].bytes_list.value[0] == long_text
    assert feats[2]["s"].bytes_list.value[0] == "é".encode()
    assert [list(f["toks"].bytes_list.value) for f in feats] == [[b"a", b""], [], [], [long_text]]
    assert ["maybe" in f for f in feats] == [True, False, True, False]
    parsed = tf.io.parse_example(
        tf.constant(records), {"maybe": tf.io.FixedLenFeature([], tf.int64, default_value=-5)}
    )
    assert parsed["maybe"].numpy().tolist() == [7, -5, 9, -5]


def _digest(paths) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _all_rows(result) -> dict[str, np.ndarray]:
    schema = result.schema
    if result.format == "tfrecord":
        records = [r.numpy() for r in tf.data.TFRecordDataset(list(result.paths))]
        parsed = _parse(records, parse_spec(schema))
        return {k: (v[0] if isinstance(v, tuple) else v) for k, v in parsed.items()}
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(list(result.paths))
    out = {}
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        if hasattr(col, "flatten") and str(col.type).startswith("list"):
            col = pc.list_flatten(col)
        out[name] = col.to_numpy(zero_copy_only=False)
    return out


def test_datagen_is_deterministic_and_independent_of_file_count(tmp_path):
    kw = dict(preset="small", rows=1300, seed=5, chunk_rows=500)
    a = datagen.generate_files(tmp_path / "a", files=1, **kw)
    b = datagen.generate_files(tmp_path / "b", files=1, **kw)
    c = datagen.generate_files(tmp_path / "c", files=3, **kw)
    other = datagen.generate_files(tmp_path / "d", files=1, **{**kw, "seed": 6})
    assert _digest(a.paths) == _digest(b.paths)
    assert len(c.paths) == 3 and c.rows == 1300
    rows_a, rows_c = _all_rows(a), _all_rows(c)
    for key in rows_a:
        np.testing.assert_array_equal(rows_a[key], rows_c[key], err_msg=key)
    np.testing.assert_array_equal(rows_a["row_id"], np.arange(1300))
    assert not np.array_equal(rows_a["user_id"], _all_rows(other)["user_id"])


def test_datagen_parquet_holds_the_same_rows_as_tfrecord(tmp_path):
    kw = dict(preset="criteo-like", rows=900, files=2, seed=1, chunk_rows=400)
    tfr = datagen.generate_files(tmp_path / "tfr", format="tfrecord", **kw)
    pq = datagen.generate_files(tmp_path / "pq", format="parquet", **kw)
    rows_t, rows_p = _all_rows(tfr), _all_rows(pq)
    for key in ("label", "I1", "C1", "C26", "M1", "M4"):
        np.testing.assert_allclose(rows_t[key], rows_p[key], err_msg=key)
    assert json.loads(Path(pq.schema_path).read_text())["format"] == "tfinput.schema/1"


def test_criteo_like_preset_shape(tmp_path):
    schema = datagen.preset_schema("criteo-like")
    assert (len(schema.dense), len(schema.categorical), len(schema.multi_hot)) == (13, 30, 4)
    assert {f.max_len for f in schema.multi_hot} == {20}  # lists of 0-19 ids


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(preset="nope", rows=10), "unknown preset"),
        (dict(rows=0), "rows must be"),
        (dict(rows=10, files=20), "leaves files empty"),
        (dict(rows=10, format="csv"), "format must be"),
    ],
    ids=["unknown-preset", "zero-rows", "more-files-than-rows", "bad-format"],
)
def test_datagen_rejects_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        datagen.generate_files(tmp_path, **kwargs)
