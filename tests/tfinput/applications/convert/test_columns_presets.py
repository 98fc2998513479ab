"""`tfinput._src.applications.convert.columns`: the Criteo and MovieLens schemas and column names, and
the project's samples converted with them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tfinput._src.applications.convert.columns import (
    PRESET_COLUMNS,
    PRESET_LISTS,
    PRESETS,
    preset_schema,
)
from tfinput.convert import convert
from tfinput.errors import ConfigError
from tfinput.schema import Categorical, Dense, MultiHot, Schema


# ------------------------------------------------------------------ schemas
def test_criteo_schema_counts_clipped_then_log1p_and_hashed_strings():
    s = preset_schema("criteo", hash_buckets=1000, dim=8)
    dense = [f for f in s.features if isinstance(f, Dense)]
    cats = [f for f in s.features if isinstance(f, Categorical)]
    assert [f.name for f in dense] == [f"I{i}" for i in range(1, 14)]
    assert {(f.dtype, f.clip, f.log1p) for f in dense} == {("int64", (0.0, None), True)}
    assert [f.name for f in cats] == [f"C{i}" for i in range(1, 27)]
    assert {(f.dtype, f.default) for f in cats} == {("string", "")}
    assert {(t.vocabulary_size, t.dim) for t in s.tables} == {(1000, 8)}
    assert [(lab.name, lab.dtype) for lab in s.labels] == [("label", "int64")]


def test_movielens_schema_tables_and_genres():
    s = preset_schema("movielens", hash_buckets=500)
    sizes = {t.name: t.vocabulary_size for t in s.tables}
    assert sizes == {
        "user_id": 300_000,
        "movie_id": 300_000,
        "title": 500,
        "genres": 16_384,
        "gender": 1_024,
        "age": 100,
        "occupation": 21,
        "zip": 500,
    }
    genres = s.feature("genres")
    assert isinstance(genres, MultiHot) and (genres.dtype, genres.max_len) == ("string", 6)
    assert s.feature("user_id").default is None  # an id is required
    assert [lab.name for lab in s.labels] == ["rating"]


@pytest.mark.parametrize("name", PRESETS)
def test_preset_columns_hold_every_schema_column(name):
    columns = set(PRESET_COLUMNS[name])
    assert set(preset_schema(name).columns()) <= columns
    assert set(PRESET_LISTS[name]) <= columns


def test_unknown_preset_names_the_choices():
    with pytest.raises(ConfigError, match=r"unknown preset 'imdb'; expected one of \['criteo'"):
        preset_schema("imdb")


# ------------------------------------------------------------------ samples
@pytest.mark.parametrize("to", ["parquet", "tfrecord"])
def test_criteo_sample_converts_and_builds(tmp_path, to, criteo):
    result = convert(criteo, tmp_path / "out", to=to, preset="criteo", rows_per_file=64)
    assert (result.rows, result.skipped, result.header, result.delimiter) == (200, 0, True, ",")
    assert [Path(p).name for p in result.paths] == [f"part-0000{i}-of-00004.{to}" for i in range(4)]
    assert Schema.from_json(result.schema_path) == result.schema == preset_schema("criteo")
    reader = tfinput.parquet if to == "parquet" else tfinput.tfrecord
    pipeline = reader(str(tmp_path / "out"), result.schema)
    features, labels = next(iter(pipeline.build(tfinput.PipelineConfig.naive(batch_size=50))))
    assert features["dense"]["I1"].shape == (50,) and features["ids"]["C26"].shape == (50,)
    assert set(np.unique(labels.numpy())) <= {0.0, 1.0}
    assert float(tf.reduce_min(features["dense"]["I2"])) >= 0.0  # -1 clipped, then log1p


def test_criteo_raw_tsv_layout_matches_csv(tmp_path, criteo, write_text, output):
    lines = criteo.read_text().splitlines()
    raw = write_text("\n".join(ln.replace(",", "\t") for ln in lines[1:]) + "\n", "d.tsv")
    from_tsv = convert(raw, tmp_path / "tsv", preset="criteo")
    from_csv = convert(criteo, tmp_path / "csv", preset="criteo")
    assert (from_tsv.header, from_tsv.delimiter, from_tsv.rows) == (False, "\t", 200)
    assert output.table(from_tsv) == output.table(from_csv)
    table = output.table(from_csv)
    assert table["I1"][0] is None and table["I3"][0] == 260  # empty field; "260.0"
    assert table["C19"][0] is None and table["C1"][0] == "05db9164"


def test_movielens_sample(tmp_path, movielens, output):
    result = convert(movielens, tmp_path / "out", preset="movielens")
    table = output.table(result)
    assert result.rows == 200 and result.dropped_columns == ("timestamp",)
    assert table["genres"][0] == ["Comedy", "Drama"]
    assert table["title"][2] == "Bridges of Madison County, The (1995)"  # quoted comma
    genres = result.schema.feature("genres")
    assert isinstance(genres, MultiHot) and genres.dtype == "string"
    pipeline = tfinput.parquet(result.paths, result.schema)
    features, _ = next(iter(pipeline.build(tfinput.PipelineConfig.naive(batch_size=20))))
    assert features["ids"]["genres"].shape == (20, 6)
    np.testing.assert_array_equal(features["weights"]["genres"].numpy()[0], [1, 1, 0, 0, 0, 0])


def test_movielens_tfrecord_lists(tmp_path, movielens, output):
    result = convert(movielens, tmp_path / "out", preset="movielens", to="tfrecord")
    first = output.examples(result)[0].features.feature
    assert list(first["genres"].bytes_list.value) == [b"Comedy", b"Drama"]
    assert first["user_id"].int64_list.value[0] == 3299
    assert "timestamp" not in first
