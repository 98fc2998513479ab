"""The option groups `tfinput convert`'s flags map onto: `convert_options` with a
`ConvertOptions` converts as `convert` with the same keywords does, and `convert` takes
its settings as keywords only."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from tfinput._src.applications.convert.options import (
    ColumnOptions,
    ConvertOptions,
    ReadOptions,
    WriteOptions,
)
from tfinput._src.applications.convert.run import convert_options
from tfinput.convert import convert


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
    by_object = convert_options([str(csv)], tmp_path / "a", options)
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


@pytest.mark.parametrize("keyword", ["options", "engine"])
def test_convert_takes_its_settings_as_keywords_only(tmp_path, keyword):
    csv = write_csv(tmp_path / "in.csv")
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{keyword}'"):
        convert([str(csv)], tmp_path / "out", **{keyword: ConvertOptions()})
    assert not (tmp_path / "out").exists()
