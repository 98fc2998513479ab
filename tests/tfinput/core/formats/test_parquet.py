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


def test_a_file_opened_with_a_pool_reads_into_it_what_the_default_read_gives(tmp_path):
    """The Parquet source decodes row groups into `parquet.read_pool` (jemalloc where
    pyarrow has it): the same table as a plain open, its bytes allocated from that pool."""
    path = str(tmp_path / "a.parquet")
    parquet.write_table(_table(20_000), path, row_group_size=5_000)
    pool = parquet.read_pool()
    before = pool.bytes_allocated()
    table = parquet.open_file(path, memory_pool=pool).read_row_group(2)
    assert pool.bytes_allocated() - before >= table.nbytes // 2 > 0
    assert table.equals(parquet.open_file(path).read_row_group(2))


def test_a_pyarrow_whose_private_reader_differs_reads_into_the_default_pool(
    tmp_path, monkeypatch, caplog
):
    """The pool goes through pyarrow's private ``ParquetReader``; where that reader is
    not as expected (another pyarrow: here its constructor refuses the pool), the file
    still opens and reads the same table, and a line is logged."""
    import logging

    import pyarrow._parquet

    def refuses(*args, **kwargs):
        raise TypeError("__init__() got an unexpected keyword argument 'memory_pool'")

    path = str(tmp_path / "a.parquet")
    parquet.write_table(_table(20_000), path, row_group_size=5_000)
    want = parquet.open_file(path).read_row_group(1)
    monkeypatch.setattr(pyarrow._parquet, "ParquetReader", refuses)
    monkeypatch.setattr(parquet, "_POOL_LOGGED", [])
    with caplog.at_level(logging.INFO, logger="tfinput"):
        got = parquet.open_file(path, memory_pool=parquet.read_pool()).read_row_group(1)
    assert got.equals(want)
    assert "decode into pyarrow's default memory pool" in caplog.text


@pytest.mark.parametrize("chosen", [None, "system"])
def test_the_read_pool_is_jemalloc_unless_the_environment_chooses_one(chosen):
    """``ARROW_DEFAULT_MEMORY_POOL`` set: the user's choice, pyarrow's default pool."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if chosen:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    code = (
        "import pyarrow as pa; from tfinput._src.core.formats import parquet; "
        "print(parquet.read_pool().backend_name, pa.default_memory_pool().backend_name)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    try:
        jemalloc = pa.jemalloc_memory_pool().backend_name
    except NotImplementedError:  # a build without jemalloc: the default pool
        jemalloc = out[1]
    assert out[0] == (out[1] if chosen else jemalloc)
    if chosen:
        assert out[1] == chosen
