"""`tfinput.inference` (`infer_schema`): schemas inferred from Parquet, TFRecord and CSV
files, including files written by other tools, and the notes that explain each choice."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import cli_main
from tfinput.config import PipelineConfig
from tfinput.errors import DataError, SchemaError, SourceError
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


def test_sample_rows_labels_and_the_json_summary(foreign_parquet):
    result = infer_schema(foreign_parquet, sample_rows=100, labels=["visits"])
    assert result.sampled_rows == 100 and result.files == (foreign_parquet,)
    assert [lab.name for lab in result.schema.labels] == ["visits"]
    assert "clicked" in {f.name for f in result.schema.features}  # no longer a label
    data = json.loads(json.dumps(result.to_dict()))
    assert (data["files"], data["sampled_rows"]) == ([foreign_parquet], 100)
    assert [c["name"] for c in data["columns"]] == [c.name for c in result.columns]
    assert tfinput.Schema.from_dict(data["schema"]) == result.schema


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
    out = tmp_path / "nodir" / "x" / "schema.json"  # its folders created
    assert cli_main(["schema", "infer", foreign_parquet, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "genres" in printed and "multi_hot" in printed and "p99" in printed
    schema = tfinput.Schema.from_json(out)
    assert schema.feature("genres").max_len == 5
    assert cli_main(["schema", "infer", foreign_parquet, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sampled_rows"] == 500 and data["schema"]["format"] == "tfinput.schema/1"


def test_cli_schema_infer_on_missing_files(tmp_path, capsys):
    assert cli_main(["schema", "infer", str(tmp_path / "none-*.parquet")]) == 2
    assert "matches no files" in capsys.readouterr().err


# ------------------------------------------------ data nobody prepared for
def _csv(tmp_path, header, rows, name="x.csv"):
    path = tmp_path / name
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("base", "dtype"),
    [(2**62, "int64"), (18_446_744_073_709_551_000, "string")],
    ids=["beyond-2**53", "beyond-int64"],
)
def test_huge_integer_ids_never_become_floats(tmp_path, base, dtype):
    ids = [base + 7 * i for i in range(100)]
    path = _csv(tmp_path, ["event", "label"], [(v, i % 2) for i, v in enumerate(ids)])
    result = infer_schema(str(path))
    event = result.schema.feature("event")
    assert isinstance(event, Categorical) and event.dtype == dtype
    stats = {c.name: c for c in result.columns}
    assert stats["event"].distinct == 100
    assert ("beyond int64" if dtype == "string" else "beyond 2**53") in stats["event"].note
    from tfinput.convert import convert

    out = convert(path, tmp_path / "out")
    values = pq.read_table(out.paths[0]).column("event").to_pylist()
    assert [int(v) for v in values] == ids  # exact, 100 distinct


def test_one_non_numeric_value_is_counted_not_silent(tmp_path):
    rows = [(i % 2, i * 3) for i in range(10_000)]
    rows[4321] = (1, "abc")
    path = _csv(tmp_path, ["label", "count"], rows)
    result = infer_schema(str(path))
    count = result.schema.feature("count")
    assert isinstance(count, Dense) and count.dtype == "int64"
    note = {c.name: c for c in result.columns}["count"].note
    assert f"1 of 10,000 values non-numeric, e.g. 'abc' at {path}:4323" in note
    from tfinput.convert import convert

    out = convert(path, tmp_path / "out", on_bad_rows="skip")
    assert (out.rows, out.skipped, [b.line for b in out.bad_rows]) == (9_999, 1, [4323])
    many = [(i % 2, "abc" if i % 100 == 0 else i) for i in range(10_000)]  # 1%: text
    result = infer_schema(str(_csv(tmp_path, ["label", "count"], many, "many.csv")))
    assert result.schema.feature("count").dtype == "string"
    assert "100 of 10,000 values non-numeric" in result.columns[1].note


def test_tfrecord_inference_is_deterministic(tmp_path):
    records = [
        {"zeta": [1.0], "label": [1.0]},
        {"mid_id": [3], "alpha": [2.0], "zeta": [0.5], "label": [0.0]},
        {"beta": [b"x", b"y"], "alpha": [1.0], "label": [1.0]},
    ]
    outputs = []
    for name, order in (("a", records), ("b", records[::-1])):
        path = tmp_path / f"{name}.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as w:
            for r in order:
                w.write(_example(r))
        outputs.append(infer_schema(str(path)).schema.to_json())
    assert outputs[0] == outputs[1]
    names = [f["name"] for f in json.loads(outputs[0])["features"]]
    assert names == sorted(names) == ["alpha", "beta", "mid_id", "zeta"]


def _mixed_csv(tmp_path):
    rng = np.random.default_rng(3)
    rows = [
        (
            int(rng.integers(0, 500)),
            int(rng.integers(0, 50_000)),
            round(float(rng.random()), 3),
            ["paris", "lyon", "", "nice"][i % 4],
            "|".join(f"g{k}" for k in range(i % 4)),
            -1 if i % 9 == 0 else int(rng.integers(0, 30)),
            i % 2,
        )
        for i in range(3000)
    ]
    header = ["user_id", "visits", "price", "city", "genres", "shop_id", "click"]
    return _csv(tmp_path, header, rows)


def test_schema_infer_and_convert_give_the_same_schema(tmp_path, capsys):
    path = _mixed_csv(tmp_path)
    out = tmp_path / "inferred.json"
    argv = ["schema", "infer", str(path), "--list-column", "genres", "--out", str(out)]
    assert cli_main(argv) == 0
    argv = ["convert", str(path), "--out", str(tmp_path / "c"), "--list-column", "genres"]
    assert cli_main(argv) == 0
    capsys.readouterr()
    assert out.read_bytes() == (tmp_path / "c" / "schema.json").read_bytes()
    s = tfinput.Schema.from_json(out)
    assert isinstance(s.feature("visits"), Dense) and s.feature("visits").log1p
    assert s.table("city").vocabulary_size == 1024  # 4 x distinct, as for Parquet


def test_inferred_schema_passes_check_on_negative_ids(tmp_path, capsys):
    """A -1 missing marker is folded into a reserved id (never a schema that check
    rejects); other negative ids: hashed strings (CSV) or left out with a note."""
    n = 1000
    table = pa.table(
        {
            "shop_id": pa.array([-1 if i % 9 == 0 else i % 30 for i in range(n)], pa.int64()),
            "other_id": pa.array([-5 if i % 7 == 0 else i % 40 for i in range(n)], pa.int64()),
            "item_id": pa.array([i % 50 for i in range(n)], pa.int64()),
            "label": pa.array([i % 2 for i in range(n)], pa.int64()),
        }
    )
    path = tmp_path / "neg.parquet"
    pq.write_table(table, path)
    schema_path = tmp_path / "schema.json"
    assert cli_main(["schema", "infer", str(path), "-o", str(schema_path), "--json"]) == 0
    notes = {c["name"]: c["note"] for c in json.loads(capsys.readouterr().out)["columns"]}
    assert "-1 seen 112 times, taken as a missing marker" in notes["shop_id"]
    assert "reserved" in notes["shop_id"]
    assert "negative ids seen (min -5" in notes["other_id"]
    schema = tfinput.Schema.from_json(schema_path)
    shop = schema.feature("shop_id")
    assert (shop.dtype, shop.out_of_range) == ("int64", "modulo")
    assert schema.table("shop_id").vocabulary_size == 31  # ids 0..29, and 30 for -1
    assert "other_id" not in {f.name for f in schema.features}
    assert cli_main(["check", str(path), "--schema", str(schema_path)]) == 0
    features, _ = next(
        iter(tfinput.parquet([str(path)], schema).build(PipelineConfig(batch_size=n)))
    )
    ids = features["ids"]["shop_id"].numpy()
    np.testing.assert_array_equal(ids[::9], 30)  # every -1 on the reserved id
    assert (np.delete(ids, np.s_[::9]) < 30).all()
    # CSV: the converter writes the data; the -1 marker folds the same way.
    csv_path = _mixed_csv(tmp_path)
    assert cli_main(["convert", str(csv_path), "--out", str(tmp_path / "c")]) == 0
    converted = tfinput.Schema.from_json(tmp_path / "c" / "schema.json")
    assert converted.feature("shop_id").out_of_range == "modulo"
    capsys.readouterr()
    assert cli_main(["check", str(tmp_path / "c")]) == 0


@pytest.mark.slow
def test_converted_raw_magnitudes_train_with_finite_loss(tmp_path):
    from tfinput import models
    from tfinput.convert import convert

    rng = np.random.default_rng(5)
    rows = [
        (
            f"{rng.uniform(1e18, 1e19):.6e}",
            int(rng.integers(14_000_000, 14_010_000)),
            round(float(rng.normal(0, 1e9)), 1),
            int(rng.integers(0, 20)),
            i % 2,
        )
        for i in range(640)
    ]
    path = _csv(tmp_path, ["big", "hour", "delta", "cat_id", "label"], rows)
    result = convert(path, tmp_path / "out")
    hour = result.schema.feature("hour")
    assert (hour.clip, hour.log1p) == ((0.0, None), True)
    ds = tfinput.parquet(result.paths, result.schema).build(PipelineConfig(batch_size=64))
    model = models.ranking_model(result.schema, jit_compile=True)
    losses = [float(model.train_on_batch(f, y)[0]) for f, y in ds]
    assert len(losses) == 10 and all(np.isfinite(losses)), losses


# ------------------------------------------------ the remaining rules and refusals
def _write_tfrecord(path, records):
    with tf.io.TFRecordWriter(str(path)) as w:
        for r in records:
            w.write(r if isinstance(r, bytes) else _example(r))
    return str(path)


def test_dense_transforms_and_notes_from_observed_values(tmp_path):
    n = 1000
    rng = np.random.default_rng(7)
    lengths = np.arange(n) % 3
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    table = pa.table(
        {
            "label": pa.array(np.arange(n) % 2),
            "counts": pa.array(np.where(np.arange(n) == 5, -3.0, rng.uniform(0, 5e4, n))),
            "delta": pa.array(rng.normal(0, 1e5, n)),
            "ratio": pa.array(np.where(np.arange(n) % 100 == 0, np.nan, rng.random(n))),
            "scores": pa.ListArray.from_arrays(
                pa.array(offsets), pa.array(rng.random(offsets[-1]))
            ),
        }
    )
    path = tmp_path / "dense.parquet"
    pq.write_table(table, path)
    result = infer_schema(str(path))
    s, stats = result.schema, {c.name: c for c in result.columns}
    counts = s.feature("counts")
    assert (counts.clip, counts.log1p) == ((0.0, None), True)
    assert "clip at 0 then log1p (1 negative values, min -3, clipped to 0)" in stats["counts"].note
    delta = s.feature("delta")
    assert (delta.clip, delta.log1p) == (None, False)
    assert "with negative values: left unscaled" in stats["delta"].note
    assert stats["ratio"].note == "10 NaN/inf values: the pipeline rejects them (write nulls)"
    assert stats["scores"].kind == "skipped"
    assert stats["scores"].note == "variable-length float list: not a feature kind"
    assert "scores" not in {f.name for f in s.features}


def test_csv_negative_ids_hash_and_table_sizes(tmp_path):
    rows = [(i % 2, (i % 13) - 4, 10**9 + 17 * i, f"c{i % 5}") for i in range(2000)]
    path = _csv(tmp_path, ["label", "shop_id", "ad_id", "city"], rows)
    result = infer_schema(str(path))
    s, stats = result.schema, {c.name: c for c in result.columns}
    shop = s.feature("shop_id")
    assert (shop.dtype, shop.default) == ("string", "")
    assert "negative ids seen (min -4, 616 of 2,000 values): hashed as strings" in (
        stats["shop_id"].note
    )
    assert s.table("shop_id").vocabulary_size == 1024  # 13 distinct: at least 1,024 buckets
    ad = s.feature("ad_id")
    assert (ad.dtype, ad.out_of_range) == ("int64", "modulo")
    assert s.table("ad_id").vocabulary_size == 8192  # 4 x 2,000 distinct, a power of two
    assert "too sparse for a row per id: folded into 8192 rows" in stats["ad_id"].note
    sized = infer_schema(str(path), hash_buckets=500).schema
    assert [sized.table(n).vocabulary_size for n in ("shop_id", "ad_id", "city")] == [500] * 3


def test_files_without_extension_are_sniffed(tmp_path):
    text = tmp_path / "events"
    text.write_text("label,price\n1,0.5\n0,0.25\n")
    assert infer_schema(str(text)).schema.feature("price") == Dense(name="price")
    binary = _write_tfrecord(tmp_path / "events-00000", [{"price": [0.5], "label": [1.0]}] * 3)
    assert infer_schema(binary).schema.feature("price") == Dense(name="price")


@pytest.mark.parametrize(
    ("case", "error", "message"),
    [
        ("csv-option-on-parquet", SourceError, "delimiter: CSV inputs only; .* is read as parquet"),
        (
            "unknown-format",
            SourceError,
            "format: expected 'parquet', 'tfrecord' or 'csv', got 'orc'",
        ),
        ("csv-columns-differ", SchemaError, r"b\.csv: columns \['x', 'z'\] differ from those of"),
        ("csv-no-valid-row", DataError, r"bad\.csv:2: unbalanced quote.*no valid row to infer"),
        ("header-only", SchemaError, "no records found in 1 file"),
        ("no-feature-column", SchemaError, "no usable feature columns found in"),
        ("tfrecord-kind-changes", DataError, "feature 'x' is float_list in record 1 but int64"),
        ("not-an-example", DataError, r"record 0 is not a tf\.train\.Example"),
    ],
)
def test_inputs_that_cannot_give_a_schema(tmp_path, case, error, message):
    paths, kwargs = [str(tmp_path / "in.parquet")], {}
    pq.write_table(pa.table({"label": [1, 0], "ts": pa.array([0, 1], pa.timestamp("s"))}), paths[0])
    if case == "csv-option-on-parquet":
        kwargs = {"delimiter": ","}
    elif case == "unknown-format":
        kwargs = {"format": "orc"}
    elif case == "csv-columns-differ":
        paths = [str(_csv(tmp_path, ["x", "y"], [(1, 2)], "a.csv"))]
        paths.append(str(_csv(tmp_path, ["x", "z"], [(1, 2)], "b.csv")))
    elif case == "csv-no-valid-row":
        (tmp_path / "bad.csv").write_text('x,y\n"1,2\n')
        paths = [str(tmp_path / "bad.csv")]
    elif case == "header-only":
        paths = [str(_csv(tmp_path, ["x", "y"], []))]
    elif case == "tfrecord-kind-changes":
        paths = [_write_tfrecord(tmp_path / "k.tfrecord", [{"x": [1]}, {"x": [1.5]}])]
    elif case == "not-an-example":
        paths = [_write_tfrecord(tmp_path / "n.tfrecord", [b"\xff\xff not a proto"])]
    with pytest.raises(error, match=message):
        infer_schema(paths, **kwargs)


@pytest.mark.parametrize("arrow_type", ["binary", "string"])
def test_bytes_that_are_not_utf8_are_inferred_as_string_ids(tmp_path, capsys, arrow_type):
    """Ids written as raw bytes (a binary column, or a string column another writer
    filled with bytes that are not UTF-8): inferred like any string column, each
    distinct value counted, and the pipeline reads the file with the inferred schema
    (it hashes the bytes as they are)."""
    raw = [b"\xff\xfe", b"\xff\xfd", b"ok", b"\x80", b"ok", b"\xff\xfe"] * 5
    column = pa.array(raw, pa.binary())
    if arrow_type == "string":
        column = column.view(pa.string())  # as a writer that does not check UTF-8 does
    path = tmp_path / "bytes.parquet"
    pq.write_table(pa.table({"c": column, "label": [0.0, 1.0] * 15}), path)
    assert pq.read_schema(path).field("c").type == getattr(pa, arrow_type)()
    assert cli_main(["schema", "infer", str(path), "-o", str(tmp_path / "s.json")]) == 0
    assert "schema written to" in capsys.readouterr().out
    result = infer_schema([str(path)])
    (c,) = result.schema.features
    assert isinstance(c, Categorical) and c.dtype == "string"
    assert {c.name: c.distinct for c in result.columns}["c"] == 4
    ds = tfinput.parquet([str(path)], result.schema).build(PipelineConfig(batch_size=10))
    assert sum(int(y.shape[0]) for _, y in ds) == 30
