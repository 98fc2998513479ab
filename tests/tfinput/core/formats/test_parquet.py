"""`tfinput._src.core.formats.parquet`: opening, cached footers, reading and writing."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from tfinput._src.core.formats import parquet
from tfinput.errors import DataError


def _table(rows: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "ids": pa.array([[i, i + 1][: i % 3] for i in range(rows)], pa.list_(pa.int64())),
        }
    )


def test_written_files_read_back_by_batch_and_row_group(tmp_path):
    path = tmp_path / "a.parquet"
    parquet.write_table(_table(1000), path, row_group_size=300)
    assert parquet.num_rows(str(path)) == 1000
    assert parquet.footer(str(path)).num_row_groups == 4
    assert parquet.read_schema(str(path)).field("ids").type == pa.list_(pa.int64())
    sizes = [b.num_rows for b in parquet.iter_batches(str(path), batch_size=256)]
    assert sizes == [256, 256, 256, 232]
    groups = list(parquet.row_groups(str(path), columns=["ids"]))
    assert [g.num_rows for g in groups] == [300, 300, 300, 100]
    assert groups[0].column_names == ["ids"]
    assert pa.concat_tables(groups).column("ids").to_pylist() == _table(1000)["ids"].to_pylist()


def test_a_writer_writes_row_groups(tmp_path):
    path = tmp_path / "b.parquet"
    table = _table(10)
    with parquet.writer(path, table.schema) as w:
        w.write_table(table, row_group_size=10)
        w.write_table(table, row_group_size=10)
    assert parquet.footer(str(path)).num_row_groups == 2
    assert parquet.open_file(str(path)).read().num_rows == 20


def test_the_footer_cache_sees_a_rewritten_file(tmp_path):
    path = tmp_path / "c.parquet"
    parquet.write_table(_table(10), path, row_group_size=10)
    assert parquet.num_rows(str(path)) == 10
    parquet.write_table(_table(25), path, row_group_size=10)
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert parquet.num_rows(str(path)) == 25


def test_a_file_that_is_not_parquet_is_a_data_error_naming_it(tmp_path):
    path = tmp_path / "not.parquet"
    path.write_bytes(b"PAR1 this is no footer")
    for read in (parquet.num_rows, parquet.read_schema, parquet.open_file):
        with pytest.raises(DataError, match=r"not\.parquet: not a readable Parquet file"):
            read(str(path))
    with pytest.raises(DataError, match=r"missing\.parquet"):
        parquet.open_file(str(tmp_path / "missing.parquet"))
