"""`tfinput._src.core.formats.tfrecord`: file names and compression, reading and writing
records, and the vectorized tf.Example encoder (the wire format written with numpy)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import parse_records
from tfinput import testing
from tfinput._src.applications.testing import _to_examples_protobuf
from tfinput._src.core.formats import tfrecord
from tfinput._src.core.formats.tfrecord import WireColumn, bytes_column, encode_examples
from tfinput.errors import DataError, SourceError
from tfinput.transforms import parse_spec


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
    reference = _to_examples_protobuf(cols)
    assert len(fast) == len(reference) == 700
    spec = parse_spec(schema)
    _assert_same(parse_records(fast, spec), parse_records(reference, spec))
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


@pytest.mark.parametrize(
    ("name", "compression", "is_tfrecord"),
    [
        ("part-0.tfrecord", "", True),
        ("x/part-0.TFRecords.gz", "GZIP", True),
        ("a.tfrecord.GZ", "GZIP", True),
        ("part.tfr.zlib", "ZLIB", True),
        ("part.zz", "ZLIB", False),
        ("part.csv.gzip", "GZIP", False),
        ("part.parquet", "", False),
    ],
)
def test_names_say_format_and_compression(name, compression, is_tfrecord):
    assert tfrecord.is_tfrecord_name(name) is is_tfrecord
    assert tfrecord.compression_from_name(name) == compression
    assert tfrecord.compression_of("auto", name) == compression
    assert tfrecord.compression_of("gzip", name) == "GZIP"
    assert tfrecord.compression_of(None, name) == ""


def test_an_unknown_compression_is_refused():
    tfrecord.check_compression("auto")
    tfrecord.check_compression("ZLIB")
    with pytest.raises(SourceError, match="compression 'lz4' unknown"):
        tfrecord.check_compression("lz4")


@pytest.mark.parametrize("compression", ["", "GZIP", "ZLIB"])
def test_written_records_read_back_and_count(tmp_path, compression):
    path = tmp_path / "part.tfrecord"
    written = [f"record {i}".encode() * (i % 7) for i in range(5000)]
    tfrecord.write_records(path, written, compression)
    assert [r.numpy() for r in tfrecord.records(str(path), compression)] == written
    assert tfrecord.count_records([str(path)] * 2, compression) == 10000
    assert tfrecord.count_records(str(path), compression, limit=4097) == 4097


@pytest.mark.parametrize("compression", ["", "GZIP"])
def test_count_each_counts_every_file_in_one_pass_and_names_none_that_fail(tmp_path, compression):
    """Files of 1, 5 and 9,000 records (empty records among them) counted, with their
    first records; a file damaged after its first 4,096 records, one damaged at its
    first record and one missing are None, and the files after each are still counted."""
    sizes = {"one": 1, "five": 5, "big": 9000, "late": 5000, "early": 3, "after": 2}
    paths = []
    for name, n in sizes.items():
        path = str(tmp_path / f"{name}.tfrecord")
        tfrecord.write_records(
            path, [f"{name} {i}".encode() * (i % 3) for i in range(n)], compression
        )
        paths.append(path)
    for name, at in (("late", -20), ("early", 20)):  # damage one byte
        path = tmp_path / f"{name}.tfrecord"
        data = bytearray(path.read_bytes())
        data[at] ^= 0xFF
        path.write_bytes(bytes(data))
    paths.insert(4, str(tmp_path / "missing.tfrecord"))
    got = tfrecord.count_each(paths * 3, compression, sample=4)
    want = [
        (n, [f"{name} {i}".encode() * (i % 3) for i in range(min(n, 4))])
        for name, n in sizes.items()
    ]
    want[3] = want[4] = None  # damaged
    want.insert(4, None)  # missing
    assert got == want * 3


def test_a_record_that_is_no_example_names_the_file_and_record():
    example = tfrecord.parse_example(
        testing.to_examples(testing.generate(testing.small_schema(), 1, seed=0))[0],
        path="f.tfrecord",
        index=0,
    )
    assert example.features.feature
    with pytest.raises(DataError, match=r"f\.tfrecord: record 7 is not a tf\.train\.Example"):
        tfrecord.parse_example(b"\xff\xff\xff", path="f.tfrecord", index=7)
