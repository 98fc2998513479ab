"""`ConvertOptions`: the objects convert as the keywords do, and the CLI maps onto them."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from tfinput.convert import (
    ColumnOptions,
    ConvertOptions,
    ReadOptions,
    WriteOptions,
    convert,
)
from tfinput.options import with_keywords


def write_csv(path):
    path.write_text("label,user,items\n1,a,x|y\n0,b,z\n1,a,\n")
    return path


def test_an_options_object_converts_as_the_same_keywords_do(tmp_path):
    csv = write_csv(tmp_path / "in.csv")
    options = ConvertOptions(
        read=ReadOptions(list_columns={"items": "|"}),
        columns=ColumnOptions(label="label"),
        write=WriteOptions(to="parquet", rows_per_file=2),
    )
    by_object = convert([str(csv)], tmp_path / "a", options=options)
    by_keywords = convert(
        [str(csv)],
        tmp_path / "b",
        list_columns={"items": "|"},
        label="label",
        to="parquet",
        rows_per_file=2,
    )
    assert by_object.rows == by_keywords.rows == 3
    assert len(by_object.paths) == len(by_keywords.paths) == 2
    assert by_object.schema == by_keywords.schema
    for a, b in zip(by_object.paths, by_keywords.paths):
        assert pq.read_table(a).equals(pq.read_table(b))


def test_a_keyword_overrides_the_same_field_of_the_object(tmp_path):
    csv = write_csv(tmp_path / "in.csv")
    options = ConvertOptions(write=WriteOptions(to="tfrecord"))
    result = convert([str(csv)], tmp_path / "out", options=options, to="columnar")
    assert result.format == "columnar" and result.manifest_path is not None
    assert options.write.to == "tfrecord"


def test_every_convert_keyword_belongs_to_one_group():
    options = with_keywords(
        ConvertOptions(), {"delimiter": "\t", "preset": "criteo", "overwrite": True}, what="convert"
    )
    assert options.read.delimiter == "\t"
    assert options.columns.preset == "criteo"
    assert options.write.overwrite is True
    with pytest.raises(TypeError, match="unexpected keyword argument 'engine'"):
        convert(["x.csv"], "out", engine="ray")
