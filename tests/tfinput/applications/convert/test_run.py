"""`tfinput._src.applications.convert.run`: `convert` from its arguments to the written shards (argument
checks, schema inference, progress, nothing left behind on failure)."""

from __future__ import annotations

import os

import pytest

from tfinput.convert import convert
from tfinput.errors import ConfigError, DataError, SchemaError
from tfinput.schema import Categorical, Dense, Schema


def test_inferred_schema(tmp_path, write_text):
    text = "user_id,price,count,city,tags,nums,click\n" + "".join(
        f"{i},{i / 2},{i * 3},c{i % 3},a|b{'|c' * (i % 3)},{i}|{i + 1},{i % 2}\n" for i in range(20)
    )
    result = convert(write_text(text), tmp_path / "out", list_columns={"tags": "|", "nums": "|"})
    s = result.schema
    assert isinstance(s.feature("user_id"), Categorical) and s.feature("user_id").dtype == "int64"
    assert isinstance(s.feature("price"), Dense) and s.feature("price").dtype == "float32"
    assert s.feature("count").dtype == "int64" and isinstance(s.feature("count"), Dense)
    assert s.feature("city").dtype == "string"
    assert (s.feature("tags").dtype, s.feature("tags").max_len) == ("string", 4)
    assert s.feature("nums").dtype == "int64"
    assert [lab.name for lab in s.labels] == ["click"]


def test_label_argument_picks_the_label_column(tmp_path, write_text):
    path = write_text("score,v\n1,2\n0,3\n")
    result = convert(path, tmp_path / "a", label="score")
    assert [lab.name for lab in result.schema.labels] == ["score"]
    with pytest.raises(SchemaError, match=r"label column 'rating' not in columns \['score', 'v'\]"):
        convert(path, tmp_path / "b", label="rating")


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
def test_bad_arguments(tmp_path, write_text, kwargs, error):
    with pytest.raises(error):
        convert(write_text("a\n1\n"), tmp_path / "out", **kwargs)


def test_typed_input_schema_is_inferred(tmp_path, small_parquet, output):
    result = convert(small_parquet, tmp_path / "out", to="columnar")
    assert result.schema.feature("history").dtype == "int64"
    assert [lab.name for lab in result.schema.labels] == ["label"]
    assert next(iter(output.pipeline(result).build(output.config)))[1].shape == (100,)


def test_input_format_errors(tmp_path, write_text, small_parquet):
    csv_path = write_text("a,label\n1,0\n")
    with pytest.raises(ConfigError, match=r"inputs mix formats \['csv', 'parquet'\]"):
        convert([small_parquet[0], csv_path], tmp_path / "a")
    with pytest.raises(ConfigError, match="delimiter apply to CSV/TSV inputs only"):
        convert(small_parquet, tmp_path / "b", delimiter=";")
    with pytest.raises(ConfigError, match="chunk_rows must be an int >= 1"):
        convert(csv_path, tmp_path / "c", to="columnar", chunk_rows=0)


def test_progress_reports_every_byte_read(tmp_path, write_text):
    path = write_text("label,v\n" + "".join(f"{i % 2},{i}\n" for i in range(5000)))
    calls = []
    convert(path, tmp_path / "out", block_size=1 << 12, progress=lambda d, t: calls.append((d, t)))
    size = os.path.getsize(path)
    assert calls and calls[-1] == (size, size)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_no_valid_row_is_an_error_naming_the_first_bad_row(tmp_path, write_text):
    schema = Schema.of([Dense(name="v", dtype="int64")], labels=["label"])
    bad = write_text("label,v\n1,x\n0,y\n", "bad.csv")
    with pytest.raises(DataError) as err:
        convert(bad, tmp_path / "out", schema=schema, on_bad_rows="skip")
    assert str(err.value) == (
        f"convert: no valid rows in [{str(bad)!r}]; first bad row: "
        f"{bad}:2: column 'v': value 'x' is not a valid int64"
    )
    assert not list((tmp_path / "out").glob("part-*"))
