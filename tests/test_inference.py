"""Schema inference from Parquet and TFRecord files, including files written by other
tools (plain pyarrow types, hand-built tf.train.Example protos)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

import tfinput
from tfinput import cli
from tfinput.config import PipelineConfig
from tfinput.errors import SourceError
from tfinput.inference import infer_schema
from tfinput.schema import Categorical, Dense, Label, MultiHot


@pytest.fixture
def foreign_parquet(tmp_path):
    """A Parquet file as another tool might write it: int32, dictionary strings,
    large_list, nulls, a weights list, a fixed vector."""
    rng = np.random.default_rng(0)
    n = 500
    lengths = rng.integers(0, 6, n)
    lengths[:10] = 0
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    genres = pa.LargeListArray.from_arrays(
        pa.array(offsets), pa.array(rng.integers(0, 50, offsets[-1]))
    )
    weights = pa.LargeListArray.from_arrays(
        pa.array(offsets), pa.array(rng.random(offsets[-1]), pa.float32())
    )
    table = pa.table(
        {
            "clicked": pa.array(rng.integers(0, 2, n), pa.int8()),
            "user_id": pa.array(rng.integers(0, 1000, n), pa.int32()),
            "country": pa.array(rng.choice(["de", "fr", "us"], n)).dictionary_encode(),
            "age": pa.array([None if i % 7 == 0 else float(i % 90) for i in range(n)]),
            "visits": pa.array(rng.integers(0, 100_000, n), pa.int64()),
            "genres": genres,
            "genres_w": weights,
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 4), pa.float32()), 4),
            "ts": pa.array(np.arange(n).astype("datetime64[s]")),
        }
    )
    path = tmp_path / "foreign.parquet"
    pq.write_table(table, path)
    return str(path)


def test_infer_parquet(foreign_parquet):
    result = infer_schema(foreign_parquet)
    s = result.schema
    assert [lab.name for lab in s.labels] == ["clicked"]
    assert isinstance(s.feature("user_id"), Categorical) and s.feature("user_id").dtype == "int64"
    assert s.table("user_id").vocabulary_size <= 1000
    country = s.feature("country")
    assert isinstance(country, Categorical) and country.dtype == "string"
    age = s.feature("age")
    assert isinstance(age, Dense) and not age.log1p
    visits = s.feature("visits")
    assert isinstance(visits, Dense) and visits.log1p and visits.dtype == "int64"
    genres = s.feature("genres")
    assert isinstance(genres, MultiHot) and genres.weights == "genres_w"
    assert genres.max_len == 5  # p99 of 0..5
    assert s.feature("vec").length == 4
    stats = {c.name: c for c in result.columns}
    assert stats["age"].missing == sum(1 for i in range(500) if i % 7 == 0)
    assert stats["genres"].length_max == 5 and stats["genres"].length_p99 == 5
    assert "ts" not in {c.name for c in result.columns}
    # The inferred schema reads the file it came from.
    ds = tfinput.parquet(foreign_parquet, s).build(PipelineConfig(batch_size=100))
    features, labels = next(iter(ds))
    assert features["ids"]["genres"].shape == (100, 5) and labels.shape == (100,)


def _example(feats):
    out = {}
    for key, value in feats.items():
        if isinstance(value[0], bytes):
            out[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=value))
        elif isinstance(value[0], float):
            out[key] = tf.train.Feature(float_list=tf.train.FloatList(value=value))
        else:
            out[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=value))
    return tf.train.Example(features=tf.train.Features(feature=out)).SerializeToString()


def test_infer_tfrecord_written_by_hand(tmp_path):
    path = tmp_path / "hand.tfrecord.gz"
    rng = np.random.default_rng(1)
    with tf.io.TFRecordWriter(str(path), "GZIP") as w:
        for i in range(300):
            feats = {
                "label": [float(i % 2)],
                "price": [float(rng.random())],
                "item_id": [int(rng.integers(0, 77))],
                "tags": [b"t%d" % k for k in range(i % 4)] or [b"x"],
                "hist": [int(x) for x in rng.integers(0, 9, i % 7)],
            }
            if not feats["hist"]:
                del feats["hist"]  # absent key = empty list
            w.write(_example(feats))
    result = infer_schema(str(path))
    s = result.schema
    assert isinstance(s.feature("price"), Dense)
    assert (
        isinstance(s.feature("item_id"), Categorical) and s.table("item_id").vocabulary_size <= 77
    )
    tags = s.feature("tags")
    assert isinstance(tags, MultiHot) and tags.dtype == "string" and tags.max_len == 3
    hist = s.feature("hist")
    assert isinstance(hist, MultiHot) and hist.max_len == 6
    assert s.labels == (Label(name="label"),)
    got = next(iter(tfinput.tfrecord(str(path), s).build(PipelineConfig(batch_size=300))))
    assert got[0]["ids"]["hist"].shape == (300, 6)


def test_infer_nothing_found(tmp_path):
    with pytest.raises(SourceError, match="matches no files"):
        infer_schema(str(tmp_path / "*.parquet"))


def test_cli_schema_infer_writes_json_and_prints_table(foreign_parquet, tmp_path, capsys):
    out = tmp_path / "schema.json"
    assert cli.main(["schema", "infer", foreign_parquet, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "genres" in printed and "multi_hot" in printed and "p99" in printed
    schema = tfinput.Schema.from_json(out)
    assert schema.feature("genres").max_len == 5
    assert cli.main(["schema", "infer", foreign_parquet, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sampled_rows"] == 500 and data["schema"]["format"] == "tfinput.schema/1"


def test_cli_schema_infer_on_missing_files(tmp_path, capsys):
    assert cli.main(["schema", "infer", str(tmp_path / "none-*.parquet")]) == 2
    assert "matches no files" in capsys.readouterr().err
