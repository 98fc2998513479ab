"""`tfinput.datagen`: deterministic synthetic data sets."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import parse_records
from tfinput import datagen
from tfinput.errors import ConfigError
from tfinput.transforms import parse_spec


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
        parsed = parse_records(records, parse_spec(schema))
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
    ("preset", "counts"),
    [("wide", (100, 700, 200, 100)), ("wide-3000", (300, 2100, 600, 300))],
    ids=["wide", "wide-3000"],
)
def test_wide_presets_have_the_production_mix(preset, counts):
    schema = datagen.preset_schema(preset)
    singles = [f for f in schema.categorical if f not in schema.multi_hot]
    got = (len(schema.dense), len(singles), len(schema.multi_hot), len(schema.tables))
    assert got == counts
    assert {f.max_len for f in schema.multi_hot} == {10}  # lists of 0-9 ids
    used = {f.table for f in schema.categorical}
    assert used == {t.name for t in schema.tables}  # every table read, each by several


def test_wide_preset_writes_every_feature(tmp_path):
    result = datagen.generate_files(tmp_path, preset="wide", rows=40, files=2, format="parquet")
    rows = _all_rows(result)
    assert len(rows) == 1_001  # 1,000 features and the label
    assert max(len(v) for k, v in rows.items() if k.startswith("M")) <= 40 * 9
    assert all(v.min() >= 0 and v.max() < 100_000 for k, v in rows.items() if k[0] in "CM")


@pytest.mark.parametrize("features", [0, 15, True], ids=["zero", "not-a-multiple-of-10", "bool"])
def test_wide_schema_rejects_bad_widths(features):
    from tfinput._src.applications.datagen import wide_schema

    with pytest.raises(ConfigError, match="wide schema"):
        wide_schema(features)


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
