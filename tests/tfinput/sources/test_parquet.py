"""`tfinput.sources.parquet` (`ParquetSource`) and its pyarrow side
(`tfinput.sources._arrow`): column checks, exact batches, nulls, list columns."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tfinput
from tests.helpers import collect
from tfinput.config import PipelineConfig
from tfinput.errors import DataError, SchemaError, SourceError
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema, Table
from tfinput.sources import ParquetSource
from tfinput.sources.parquet import LIST_LENGTHS, LIST_VALUES

#: A three-column schema for hand-written Parquet files.
TINY = Schema(
    features=(
        Dense(name="x", default=-1.0),
        Categorical(name="c", table="t"),
        MultiHot(name="ids", table="t", max_len=3),
    ),
    tables=(Table(name="t", vocabulary_size=100, dim=2),),
    labels=(Label(name="y"),),
)


def _write(path, **columns) -> str:
    pq.write_table(pa.table(columns), path)
    return str(path)


def _tiny(path, *, c=(1, 2, 3), c_type=None) -> str:
    """Three rows of `TINY`, column ``c`` as ``c_type`` (default int64)."""
    return _write(
        path,
        x=pa.array([1.0, 2.0, 3.0]),
        c=pa.array(c, c_type or pa.int64()),
        ids=pa.array([[1], [], [2, 3]], pa.list_(pa.int64())),
        y=pa.array([0.0, 1.0, 0.0]),
    )


def test_parquet_reads_the_fixture_rows_in_file_order(
    small_parquet, small_schema, assert_reads_fixture_rows
):
    assert_reads_fixture_rows(tfinput.parquet(small_parquet, small_schema))


def test_parquet_declares_what_each_engine_does(read_request):
    pyarrow = ParquetSource(paths=("x",))
    assert (pyarrow.kind, pyarrow.batches_itself, pyarrow.resume) == ("parquet", True, "none")
    tfio = ParquetSource(paths=("x",), engine="tensorflow-io")
    assert tfio.batches_itself is False
    assert tfio.unhonoured(read_request([], interleave_block_length=7)) == {}
    assert pyarrow.unhonoured(read_request([], interleave_block_length=1)) == {}
    with pytest.raises(SourceError, match="Parquet engine 'arrow' unknown"):
        ParquetSource(paths=("x",), engine="arrow")


def test_parquet_names_the_interleave_block_length_it_cannot_honour(
    small_parquet, small_schema, warnings_logged
):
    pipeline = tfinput.parquet(small_parquet, small_schema)
    pipeline.build(PipelineConfig(batch_size=50, interleave_block_length=7))
    assert any(
        "interleave_block_length=7 has no effect on the parquet source" in m
        for m in warnings_logged()
    )


def test_parquet_list_columns_travel_as_values_and_lengths(small_parquet, small_schema):
    from tfinput.sources import ReadRequest

    source = ParquetSource(paths=tuple(small_parquet))
    request = ReadRequest(
        files=source.files(),
        schema=small_schema,
        config=PipelineConfig(batch_size=10),
        batch_size=10,
    )
    element = next(iter(source.read(request)))
    for f in small_schema.multi_hot:
        assert f.source + LIST_VALUES in element and f.source + LIST_LENGTHS in element
        assert element[f.source + LIST_LENGTHS].shape == (10,)


def test_exact_batches_across_file_boundaries(tmp_path):
    files = [_tiny(tmp_path / f"{i}.parquet") for i in range(3)]  # 3 files of 3 rows
    config = PipelineConfig(batch_size=4, drop_remainder=False)
    got = collect(tfinput.parquet(files, TINY).build(config))
    assert got["dense"]["x"].tolist() == [1.0, 2.0, 3.0] * 3
    batches = tfinput.parquet(files, TINY).build(PipelineConfig(batch_size=4, drop_remainder=True))
    assert [int(labels.shape[0]) for _, labels in batches] == [4, 4]


def test_count_records_from_the_footer(small_parquet, tmp_path):
    source = ParquetSource(paths=tuple(small_parquet))
    assert [source.count_records(p) for p in small_parquet] == [250, 250, 250, 250]
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    assert source.count_records(str(tmp_path / "bad.parquet")) is None


def test_a_missing_column_is_named_with_a_suggestion(tmp_path):
    path = _write(tmp_path / "a.parquet", x=[1.0], cc=[1], ids=[[1]], y=[0.0])
    with pytest.raises(SchemaError) as e:
        tfinput.parquet(path, TINY).build(PipelineConfig(batch_size=1))
    assert str(e.value) == (
        f"{path}: feature 'c': column 'c' is missing; columns: ['x', 'cc', 'ids', 'y']; "
        "did you mean ['cc']?"
    )


def test_a_column_of_another_kind_is_named(tmp_path):
    path = _tiny(tmp_path / "a.parquet", c=("a", "b", "c"), c_type=pa.string())
    with pytest.raises(SchemaError) as e:
        tfinput.parquet(path, TINY).build(PipelineConfig(batch_size=1))
    assert str(e.value) == (
        f"{path}: feature 'c': column 'c' has type string (string); the schema expects int"
    )


def test_a_column_wider_in_a_later_file_is_refused_naming_both_files(tmp_path):
    first = _tiny(tmp_path / "0.parquet", c_type=pa.int32())
    later = _tiny(tmp_path / "1.parquet")  # int64
    source = ParquetSource(paths=(first, later))
    with pytest.raises(SchemaError) as e:
        source.validate([first, later], TINY)
    message = str(e.value)
    assert message.startswith(
        f"{later}: feature 'c': column 'c' has type int64 but {first} has int32"
    )
    assert source.problems_across_files([first, later], TINY) == {later: message[len(later) + 2 :]}
    source.validate([later, first], TINY)  # narrower in the later file: read exactly


def test_nulls_take_defaults_and_a_null_list_is_empty(tmp_path):
    path = _write(
        tmp_path / "a.parquet",
        x=pa.array([1.0, None]),
        c=pa.array([5, 6]),
        ids=pa.array([None, [4]], pa.list_(pa.int64())),
        y=pa.array([1.0, 0.0]),
    )
    got = collect(tfinput.parquet(path, TINY).build(PipelineConfig(batch_size=2)))
    assert got["dense"]["x"].tolist() == [1.0, -1.0]
    assert got["ids"]["ids"].tolist() == [[0, 0, 0], [4, 0, 0]]
    assert got["weights"]["ids"].tolist() == [[0, 0, 0], [1, 0, 0]]


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (
            dict(c=pa.array([5, None]), ids=pa.array([[1], [2]])),
            "column 'c': 1 null value(s) but the schema gives no default for it",
        ),
        (
            dict(c=pa.array([5, 6]), ids=pa.array([[1, None], [2]])),
            "column 'ids': 1 null value(s) inside lists; nulls inside a list have no default",
        ),
    ],
    ids=["required-column", "inside-a-list"],
)
def test_a_null_without_default_is_a_data_error_naming_file_and_column(tmp_path, columns, message):
    path = _write(tmp_path / "a.parquet", x=[1.0, 2.0], y=[0.0, 1.0], **columns)
    pipeline = tfinput.parquet(path, TINY)
    with pytest.raises(DataError) as e:
        list(pipeline.iterate(PipelineConfig(batch_size=2), diagnose=False))
    assert f"{path}: {message}" in str(e.value)


def test_roofline_counts_rows_of_both_stages(small_parquet, small_schema):
    stages = ParquetSource(paths=tuple(small_parquet)).roofline_stages(
        small_parquet, small_schema, 100
    )
    read = next(iter(stages.factories["read"]()))
    assert stages.counters["read"](read) == read.num_rows == 100  # one row group
    parse = next(iter(stages.factories["parse"]()))
    assert stages.counters["parse"](parse) == 100
    np.testing.assert_array_equal(parse["row_id"], np.arange(100))
    size = sum(os.path.getsize(p) for p in small_parquet)
    assert stages.bytes_per_example == pytest.approx(size / 1000)
