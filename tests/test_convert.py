"""`tfinput convert`: CSV/TSV to Parquet or TFRecord, line numbers for bad rows."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import SHARED_DATA
from tests.helpers import cli_main as _cli
from tfinput.convert import convert, preset_schema
from tfinput.errors import ConfigError, DataError, SchemaError, SourceError
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema, Table

DATA = SHARED_DATA
CRITEO = DATA / "criteo_sample.txt"
MOVIELENS = DATA / "movielens_sample.txt"
needs_samples = pytest.mark.skipif(
    not (CRITEO.exists() and MOVIELENS.exists()),
    reason=f"sample data not found in {DATA} (set TFINPUT_SHARED_DATA)",
)


def _write(tmp_path: Path, text: str, name: str = "in.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _table(result) -> dict[str, list]:
    return pq.read_table(list(result.paths)).to_pydict()


def _examples(result) -> list[tf.train.Example]:
    ds = tf.data.TFRecordDataset(list(result.paths))
    return [tf.train.Example.FromString(r.numpy()) for r in ds]


# ------------------------------------------------------------------ samples
@pytest.mark.parametrize("to", ["parquet", "tfrecord"])
@needs_samples
def test_criteo_sample_converts_and_builds(tmp_path, to):
    result = convert(CRITEO, tmp_path / "out", to=to, preset="criteo", rows_per_file=64)
    assert (result.rows, result.skipped, result.header, result.delimiter) == (200, 0, True, ",")
    assert [Path(p).name for p in result.paths] == [f"part-0000{i}-of-00004.{to}" for i in range(4)]
    assert Schema.from_json(result.schema_path) == result.schema == preset_schema("criteo")
    reader = tfinput.parquet if to == "parquet" else tfinput.tfrecord
    pipeline = reader(str(tmp_path / "out"), result.schema)
    features, labels = next(iter(pipeline.build(tfinput.PipelineConfig.naive(batch_size=50))))
    assert features["dense"]["I1"].shape == (50,) and features["ids"]["C26"].shape == (50,)
    assert set(np.unique(labels.numpy())) <= {0.0, 1.0}
    assert float(tf.reduce_min(features["dense"]["I2"])) >= 0.0  # -1 clipped, then log1p


@needs_samples
def test_criteo_raw_tsv_layout_matches_csv(tmp_path):
    lines = CRITEO.read_text().splitlines()
    raw = _write(tmp_path, "\n".join(ln.replace(",", "\t") for ln in lines[1:]) + "\n", "d.tsv")
    from_tsv = convert(raw, tmp_path / "tsv", preset="criteo")
    from_csv = convert(CRITEO, tmp_path / "csv", preset="criteo")
    assert (from_tsv.header, from_tsv.delimiter, from_tsv.rows) == (False, "\t", 200)
    assert _table(from_tsv) == _table(from_csv)
    table = _table(from_csv)
    assert table["I1"][0] is None and table["I3"][0] == 260  # empty field; "260.0"
    assert table["C19"][0] is None and table["C1"][0] == "05db9164"


@needs_samples
def test_movielens_sample(tmp_path):
    result = convert(MOVIELENS, tmp_path / "out", preset="movielens")
    table = _table(result)
    assert result.rows == 200 and result.dropped_columns == ("timestamp",)
    assert table["genres"][0] == ["Comedy", "Drama"]
    assert table["title"][2] == "Bridges of Madison County, The (1995)"  # quoted comma
    genres = result.schema.feature("genres")
    assert isinstance(genres, MultiHot) and genres.dtype == "string"
    pipeline = tfinput.parquet(result.paths, result.schema)
    features, _ = next(iter(pipeline.build(tfinput.PipelineConfig.naive(batch_size=20))))
    assert features["ids"]["genres"].shape == (20, 6)
    np.testing.assert_array_equal(features["weights"]["genres"].numpy()[0], [1, 1, 0, 0, 0, 0])


@needs_samples
def test_movielens_tfrecord_lists(tmp_path):
    result = convert(MOVIELENS, tmp_path / "out", preset="movielens", to="tfrecord")
    first = _examples(result)[0].features.feature
    assert list(first["genres"].bytes_list.value) == [b"Comedy", b"Drama"]
    assert first["user_id"].int64_list.value[0] == 3299
    assert "timestamp" not in first


# ------------------------------------------------------------- edge cases
def test_quoted_fields(tmp_path):
    text = 'name,score,label\n"Smith, J.",1.5,1\n"say ""hi""",2,0\n\'single\',3,1\n'
    result = convert(_write(tmp_path, text), tmp_path / "out")
    assert _table(result)["name"] == ["Smith, J.", 'say "hi"', "'single'"]


@pytest.mark.parametrize("to", ["parquet", "tfrecord"])
def test_empty_fields_are_missing(tmp_path, to):
    text = "label,x,city,tags\n1,,,\n0,2.5,paris,a|b\n"
    result = convert(_write(tmp_path, text), tmp_path / "out", to=to, list_columns={"tags": "|"})
    if to == "parquet":
        table = _table(result)
        assert table["x"] == [None, 2.5] and table["city"] == [None, "paris"]
        assert table["tags"] == [[], ["a", "b"]]
    else:
        first, second = (e.features.feature for e in _examples(result))
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


@pytest.mark.parametrize(
    ("text", "line", "found"),
    [
        ("a,b,label\n1,2\n3,4,1\n", 2, "expected 3 fields (as in the header on line 1), found 2"),
        ("a,b,label\n1,2,0\n3,4,1,9\n", 3, "found 4"),
        ("a,b\n1,2,3\n4,5,6\n", 2, "expected 2 fields (as in the header on line 1), found 3"),
        ("a,b,label\n1,2,0\n3,4,1\n5,6", 4, "found 2: '5,6'"),
    ],
    ids=["row-too-short", "row-too-long", "header-too-short", "truncated-last-line"],
)
def test_wrong_field_count_names_the_line(tmp_path, text, line, found):
    path = _write(tmp_path, text)
    with pytest.raises(DataError) as err:
        convert(path, tmp_path / "out")
    assert f"{path}:{line}: " in str(err.value) and found in str(err.value)
    assert not list((tmp_path / "out").glob("part-*"))  # nothing half-written is left


def test_skip_policy_counts_bad_rows_with_line_numbers(tmp_path):
    text = "a,b,label\n1,2,0\n3,4\n\n5,x,1\n6,7,1,1\n8,9,0\n10,11"
    schema = Schema.of([Dense(name="a", dtype="int64"), Dense(name="b")], labels=["label"])
    result = convert(_write(tmp_path, text), tmp_path / "out", schema=schema, on_bad_rows="skip")
    assert (result.rows, result.skipped, result.blank_lines) == (2, 4, 1)
    assert [b.line for b in result.bad_rows] == [3, 5, 6, 8]
    assert "value 'x' is not a valid float32" in result.bad_rows[1].reason
    assert _table(result)["a"] == [1, 8]


def test_line_numbers_stay_exact_across_blocks(tmp_path):
    good = [f"{i},{i % 7},{i % 2}" for i in range(3000)]
    bad_at = {17: "x,1,0", 1500: "1,2", 2999: "3.5,1,1"}
    lines = ["id,v,label"] + [bad_at.get(i, ln) for i, ln in enumerate(good)]
    schema = Schema.of([Dense(name="id", dtype="int64"), Dense(name="v")], labels=["label"])
    path = _write(tmp_path, "\n".join(lines) + "\n")
    result = convert(path, tmp_path / "out", schema=schema, on_bad_rows="skip", block_size=1 << 12)
    assert [b.line for b in result.bad_rows] == [i + 2 for i in sorted(bad_at)]
    assert result.rows == 2997
    ids = _table(result)["id"]
    assert ids[:3] == [0, 1, 2] and 17 not in ids and 1500 not in ids


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
def test_bad_values_name_line_and_column(tmp_path, text, message):
    x_is_float = "nan" in text
    feature = Dense(name="x") if x_is_float else Categorical(name="x", table="t")
    tables = () if x_is_float else (Table(name="t", vocabulary_size=100, dim=4),)
    schema = Schema(features=(feature,), tables=tables, labels=(Label(name="label"),))
    path = _write(tmp_path, text)
    with pytest.raises(DataError, match="on_bad_rows='skip'") as err:
        convert(path, tmp_path / "out", schema=schema)
    assert str(err.value).startswith(f"{path}:2: {message}")


def test_inferred_schema(tmp_path):
    text = "user_id,price,count,city,tags,nums,click\n" + "".join(
        f"{i},{i / 2},{i * 3},c{i % 3},a|b{'|c' * (i % 3)},{i}|{i + 1},{i % 2}\n" for i in range(20)
    )
    result = convert(
        _write(tmp_path, text), tmp_path / "out", list_columns={"tags": "|", "nums": "|"}
    )
    s = result.schema
    assert isinstance(s.feature("user_id"), Categorical) and s.feature("user_id").dtype == "int64"
    assert isinstance(s.feature("price"), Dense) and s.feature("price").dtype == "float32"
    assert s.feature("count").dtype == "int64" and isinstance(s.feature("count"), Dense)
    assert s.feature("city").dtype == "string"
    assert (s.feature("tags").dtype, s.feature("tags").max_len) == ("string", 4)
    assert s.feature("nums").dtype == "int64"
    assert [lab.name for lab in s.labels] == ["click"]


def test_header_and_column_names(tmp_path):
    path = _write(tmp_path, "1\t2.5\tx\n0\t1.0\ty\n", "n.tsv")
    result = convert(path, tmp_path / "a", column_names=["label", "v", "s"])
    assert (result.header, _table(result)["s"]) == (False, ["x", "y"])
    with pytest.raises(SchemaError, match="did you mean 'labels'"):
        convert(
            path,
            tmp_path / "b",
            column_names=["labels", "v", "s"],
            schema=Schema.of([Dense(name="v")], labels=["label"]),
        )


@pytest.mark.parametrize(
    ("text", "header"),
    [
        ("city,country\nparis,france\nlyon,france\n", True),
        ("paris,france\nlyon,france\nparis,spain\n", False),
        ("label,v\n1,2\n", True),
        ("0,a\n1,b\n", False),
    ],
    ids=["text-header", "text-no-header", "numeric-below", "numbers-first"],
)
def test_header_sniffing(tmp_path, text, header):
    result = convert(_write(tmp_path, text), tmp_path / "out")
    assert result.header is header


def test_gzip_input_and_sharding(tmp_path):
    path = tmp_path / "in.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("label,v\n" + "".join(f"{i % 2},{i}\n" for i in range(10)))
    result = convert(path, tmp_path / "out", rows_per_file=3, to="tfrecord")
    assert result.rows == 10 and len(result.paths) == 4
    assert [len(list(tf.data.TFRecordDataset(p))) for p in result.paths] == [3, 3, 3, 1]


def test_output_directory_must_be_empty(tmp_path):
    path = _write(tmp_path, "label,v\n1,2\n")
    convert(path, tmp_path / "out")
    with pytest.raises(SourceError, match="is not empty"):
        convert(path, tmp_path / "out")
    assert convert(path, tmp_path / "out", overwrite=True).rows == 1


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        (dict(to="csv"), ConfigError),
        (dict(on_bad_rows="ignore"), ConfigError),
        (dict(preset="imdb"), ConfigError),
        (dict(delimiter="::"), ConfigError),
    ],
    ids=["format", "policy", "preset", "delimiter"],
)
def test_bad_arguments(tmp_path, kwargs, error):
    with pytest.raises(error):
        convert(_write(tmp_path, "a\n1\n"), tmp_path / "out", **kwargs)


def test_missing_input(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        convert(tmp_path / "nope.csv", tmp_path / "out")


# ---------------------------------------------------------------------- CLI
@needs_samples
def test_cli_convert_json(tmp_path, capsys):
    code = _cli(
        [
            "convert",
            str(MOVIELENS),
            "--out",
            str(tmp_path / "o"),
            "--preset",
            "movielens",
            "--to",
            "tfrecord",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["rows"], out["files"], out["skipped"]) == (200, 1, 0)
    assert Path(out["schema_path"]).is_file()


def test_cli_convert_skip_reports_lines(tmp_path, capsys):
    path = _write(tmp_path, "a,label\n1,0\n2\n3,1\n")
    code = _cli(
        [
            "convert",
            str(path),
            "--out",
            str(tmp_path / "o"),
            "--on-bad-rows",
            "skip",
            "--list-column",
            "x=;",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "1 bad row(s) skipped" in out and f"{path}:3: expected 2" in out


def test_cli_convert_error_is_one_line_exit_2(tmp_path, capsys):
    path = _write(tmp_path, "a,label\n1,0\n2\n")
    assert _cli(["convert", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tfinput: error: {path}:3: expected 2 fields") and err.count("\n") == 1


# ------------------------------------- columnar output; Parquet/TFRecord input
SEQUENTIAL = tfinput.PipelineConfig.naive(batch_size=100)


def _reader(fmt):
    return {"parquet": tfinput.parquet, "tfrecord": tfinput.tfrecord}.get(fmt)


def _pipeline(result):
    if result.format == "columnar":
        return tfinput.columnar(str(Path(result.paths[0]).parent))
    return _reader(result.format)(result.paths, result.schema)


def _batches(pipeline, config=SEQUENTIAL):
    out = []
    for features, labels in pipeline.build(config):
        flat = {f"{g}/{n}": t.numpy() for g, d in features.items() for n, t in d.items()}
        flat["label"] = np.asarray(labels)
        out.append(flat)
    return out


def _assert_same(got, want):
    assert len(got) == len(want) and len(got) > 0
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@needs_samples
@pytest.mark.parametrize(("sample", "preset"), [(CRITEO, "criteo"), (MOVIELENS, "movielens")])
def test_csv_to_columnar_reads_like_parquet(tmp_path, sample, preset):
    col = convert(
        sample, tmp_path / "col", to="columnar", preset=preset, chunk_rows=50, rows_per_file=120
    )
    pq_ = convert(sample, tmp_path / "pq", preset=preset)
    assert col.rows == pq_.rows == 200 and col.format == "columnar"
    assert [Path(p).name for p in col.paths] == [f"part-0000{i}-of-00002.tfcol" for i in range(2)]
    assert Path(col.manifest_path).is_file() and Path(col.schema_path).is_file()
    _assert_same(_batches(_pipeline(col)), _batches(_pipeline(pq_)))


@pytest.mark.parametrize("to", ["columnar", "parquet", "tfrecord"])
@pytest.mark.parametrize("source", ["parquet", "tfrecord"])
def test_parquet_and_tfrecord_inputs(
    tmp_path, source, to, small_schema, small_parquet, small_tfrecord
):
    inputs = small_parquet if source == "parquet" else small_tfrecord
    result = convert(inputs, tmp_path / "out", to=to, schema=small_schema, chunk_rows=100)
    assert (result.rows, result.input_format, result.skipped) == (1000, source, 0)
    want = _batches(_reader(source)(inputs, small_schema))
    _assert_same(_batches(_pipeline(result)), want)


def test_typed_input_schema_is_inferred(tmp_path, small_parquet):
    result = convert(small_parquet, tmp_path / "out", to="columnar")
    assert result.schema.feature("history").dtype == "int64"
    assert [lab.name for lab in result.schema.labels] == ["label"]
    assert next(iter(_pipeline(result).build(SEQUENTIAL)))[1].shape == (100,)


def test_parquet_bad_rows_name_the_row(tmp_path):
    import pyarrow as pa

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


def test_tfrecord_scalar_with_several_values_is_a_bad_row(tmp_path):
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
    features, _ = next(iter(_pipeline(result).build(tfinput.PipelineConfig.naive(batch_size=2))))
    assert features["dense"]["x"].numpy().tolist() == [1.0, 0.0]  # missing: the default


def test_input_format_errors(tmp_path, small_parquet):
    csv_path = _write(tmp_path, "a,label\n1,0\n")
    with pytest.raises(ConfigError, match=r"inputs mix formats \['csv', 'parquet'\]"):
        convert([small_parquet[0], csv_path], tmp_path / "a")
    with pytest.raises(ConfigError, match="delimiter apply to CSV/TSV inputs only"):
        convert(small_parquet, tmp_path / "b", delimiter=";")
    with pytest.raises(ConfigError, match="chunk_rows must be an int >= 1"):
        convert(csv_path, tmp_path / "c", to="columnar", chunk_rows=0)


def test_cli_convert_parquet_to_columnar(tmp_path, small_parquet, capsys):
    out = tmp_path / "col"
    argv = ["--out", str(out), "--to", "columnar", "--chunk-rows", "200", "--json"]
    code = _cli(["convert", *small_parquet, *argv])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["rows"], data["input_format"], data["format"]) == (1000, "parquet", "columnar")
    assert data["manifest_path"] == str(out / "manifest.json")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["chunk_rows"] == 200 and manifest["rows"] == 1000
    code = _cli(["convert", *small_parquet, "--out", str(out), "--to", "columnar", "--overwrite"])
    assert code == 0 and "manifest:" in capsys.readouterr().out


# ------------------------------------------------ data nobody prepared for
def _id_csv(tmp_path, lines_by_index, rows=5000, name="q.csv"):
    lines = ["id,name,label"] + [f"{i},n{i},{i % 2}" for i in range(rows)]
    for i, text in lines_by_index.items():
        lines[i + 1] = text
    return _write(tmp_path, "\n".join(lines) + "\n", name)


@pytest.mark.parametrize(
    "later",
    [{}, {300: '300,"quoted, closed",0', 4000: '4000,"n""4000",0'}],
    ids=["no-later-quote", "later-quotes-close-it"],
)
def test_unbalanced_quote_loses_only_its_line(tmp_path, later):
    path = _id_csv(tmp_path, {100: '100,"oops,0', **later})
    schema = Schema.of([Dense(name="id", dtype="int64")], labels=["label"])
    result = convert(path, tmp_path / "out", schema=schema, on_bad_rows="skip", block_size=1 << 14)
    assert (result.rows, result.skipped) == (4999, 1)
    assert [b.line for b in result.bad_rows] == [102]
    assert "unbalanced quote" in result.bad_rows[0].reason
    ids = _table(result)["id"]
    assert 100 not in ids and ids[100:102] == [101, 102] and ids[-1] == 4999
    with pytest.raises(DataError, match=rf"{path}:102: unbalanced quote"):
        convert(path, tmp_path / "err", schema=schema)


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        ('"a""b",1', False),
        ('a"b,1', False),
        ('"ab"c,1', False),
        ('1,"x', True),
        ('"a""b,1', True),
        ('1,2,"', True),
        ('"a"",b",1', False),
        ('ab",",', True),
    ],
    ids=[
        "doubled-quote",
        "quote-inside-field",
        "text-after-quote",
        "open",
        "open-doubled",
        "last",
        "escaped-then-closed",
        "literal-quote-then-open",
    ],
)
def test_quote_balance_follows_the_csv_parser(tmp_path, line, bad):
    path = _write(tmp_path, f"a,label\n{line}\n1,0\n")
    result = convert(path, tmp_path / "out", on_bad_rows="skip", header=True)
    assert [b.line for b in result.bad_rows] == ([2] if bad else [])
    assert result.rows == (1 if bad else 2)


def test_truncated_gzip_is_a_clean_error(tmp_path, capsys):
    data = gzip.compress(("label,v\n" + "".join(f"{i % 2},{i}\n" for i in range(300_000))).encode())
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(data[: len(data) * 3 // 4])
    with pytest.raises(DataError, match=rf"{path}: cannot read .*truncated or corrupt"):
        convert(path, tmp_path / "out", block_size=1 << 16)
    assert not list((tmp_path / "out").glob("part-*"))
    assert _cli(["convert", str(path), "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tfinput: error: {path}: cannot read") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (bytes(range(256)) * 40, "NUL byte at offset 0"),
        (b"label,v\n1,\xff\xfe\x80\n" * 100, "byte 0xff at offset 10 is not valid UTF-8"),
    ],
    ids=["binary", "not-utf8"],
)
def test_binary_input_is_a_clean_error(tmp_path, capsys, content, message):
    path = tmp_path / "blob.csv"
    path.write_bytes(content)
    with pytest.raises(DataError, match=rf"{path}: not a (UTF-8 )?text CSV/TSV file"):
        convert(path, tmp_path / "out")
    assert _cli(["convert", str(path), "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err
