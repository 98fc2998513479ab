"""`tfinput._src.core.sources.parquet` (`ParquetSource`) and its pyarrow side
(`tfinput._src.core.sources._arrow`): column checks, exact batches, nulls, list columns, and
exact resume from a `tf.train.Checkpoint` of the iterator."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

import tests as tests_root
import tfinput
from tests.helpers import SEQUENTIAL, collect
from tfinput._src.core.sources._arrow import LIST_LENGTHS, LIST_VALUES
from tfinput._src.core.sources.parquet import ParquetSource
from tfinput.config import PipelineConfig
from tfinput.errors import DataError, ResumeError, SchemaError, SourceError
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema, Table

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
    assert (pyarrow.kind, pyarrow.batches_itself, pyarrow.resume) == ("parquet", True, "iterator")
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
    from tfinput._src.core.sources.protocol import ReadRequest

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


_ITERATE_NULLS = """
import sys
import tfinput
from tests.tfinput.core.sources.test_parquet import TINY
from tfinput.config import PipelineConfig
from tfinput.errors import DataError
try:
    for _ in tfinput.parquet(sys.argv[1], TINY).iterate(PipelineConfig(batch_size=64)):
        pass
except DataError as e:
    print(f"DataError: {e}")
"""


def test_a_null_in_a_required_column_is_one_error_without_tracebacks(tmp_path):
    """From Python (no CLI filter): one null among 5,000 rows in 10 row groups, read by
    parallel calls, gives the one `DataError` and no callback traceback on stderr."""
    rows = 5000
    path = _write(
        tmp_path / "nulls.parquet",
        x=pa.array(np.arange(rows, dtype=np.float64)),
        c=pa.array([None if i == 3000 else i % 100 for i in range(rows)], pa.int64()),
        ids=pa.array([[i % 100] for i in range(rows)], pa.list_(pa.int64())),
        y=pa.array(np.zeros(rows)),
    )
    pq.write_table(pq.read_table(path), path, row_group_size=500)
    root = os.path.dirname(os.path.dirname(os.path.abspath(tests_root.__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # TensorFlow's own logging, as a user has it
    out = subprocess.run(
        [sys.executable, "-c", _ITERATE_NULLS, path],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout == (
        f"DataError: {path}: column 'c': 1 null value(s) but the schema gives no default "
        "for it; add a default or fix the data\n"
    )
    assert "Traceback" not in out.stderr and 'File "' not in out.stderr, out.stderr[-3000:]


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


# ------------------------------------------------------------------------ resume
def _arrays(batch) -> list[np.ndarray]:
    return [np.asarray(t) for t in tf.nest.flatten(batch)]


def _assert_same_batches(got, want) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        for a, b in zip(_arrays(g), _arrays(w), strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"batch {i}")


def _row_ids(batches) -> list[int]:
    return [int(r) for features, _ in batches for r in features["dense"]["row_id"].numpy()]


#: A second input pipeline of two (files 1 and 3 of the four).
SECOND_OF_TWO = dict(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)


@pytest.mark.parametrize(
    ("config", "file_shuffling", "context"),
    [
        (dict(), False, None),
        (dict(shuffle_buffer=200, shuffle_seed=3), False, None),
        (dict(shuffle_seed=3), True, None),
        (
            dict(
                shuffle_buffer=300,
                shuffle_seed=5,
                interleave_cycle_length=2,
                interleave_parallelism=2,
                map_parallelism=2,
            ),
            True,
            None,
        ),
        (dict(shuffle_buffer=100, shuffle_seed=7), True, SECOND_OF_TWO),
        (dict(shuffle_buffer=150, shuffle_seed=1, drop_remainder=False), False, None),
    ],
    ids=["in-order", "row-shuffle", "file-shuffle", "both-interleave-knobs", "sharded", "partial"],
)
def test_a_restored_iterator_yields_exactly_the_rest_of_the_epoch(
    small_parquet, small_schema, tmp_path, config, file_shuffling, context
):
    pipeline = tfinput.parquet(small_parquet, small_schema).with_file_shuffling(file_shuffling)
    config = PipelineConfig(batch_size=64, deterministic=True, **config)
    ctx = context and tf.distribute.InputContext(**context)
    uninterrupted = list(pipeline.build(config, ctx))
    it = iter(pipeline.build(config, ctx))
    before = [next(it) for _ in range(3)]
    saved = tf.train.Checkpoint(iterator=it).write(str(tmp_path / "input"))
    del it
    fresh = iter(pipeline.build(config, ctx))  # as in a new process
    tf.train.Checkpoint(iterator=fresh).read(saved).assert_consumed()
    after = list(fresh)
    _assert_same_batches(before + after, uninterrupted)
    # The second pipeline reads two files of 250 rows, in per-replica batches of 32.
    rows, batch = (1000, 64) if ctx is None else (500, 32)
    ids = _row_ids(before + after)
    assert (
        len(ids) == len(set(ids)) == (rows if not config.drop_remainder else rows // batch * batch)
    )
    if not config.drop_remainder:
        assert int(after[-1][1].shape[0]) == rows % batch  # the partial last batch
    shuffled = config.shuffle_buffer or file_shuffling
    assert (ids != sorted(ids)) == bool(shuffled)


def test_each_iteration_reshuffles_and_reads_every_row(small_parquet, small_schema):
    pipeline = tfinput.parquet(small_parquet, small_schema).with_file_shuffling()
    dataset = pipeline.build(PipelineConfig(batch_size=100, shuffle_buffer=200, shuffle_seed=2))
    first, second = _row_ids(dataset), _row_ids(dataset)
    assert first != second and sorted(first) == sorted(second) == list(range(1000))
    again = _row_ids(
        pipeline.build(PipelineConfig(batch_size=100, shuffle_buffer=200, shuffle_seed=2))
    )
    assert again == first  # a fresh build starts with the same order (a seed is set)


def test_a_saved_iterator_keeps_its_order_across_epochs(small_parquet, small_schema, tmp_path):
    pipeline = tfinput.parquet(small_parquet, small_schema)
    config = PipelineConfig(batch_size=100, shuffle_buffer=300, shuffle_seed=4)
    it = iter(pipeline.build(config).repeat(2))
    before = [next(it) for _ in range(13)]  # into the second epoch
    saved = tf.train.Checkpoint(iterator=it).write(str(tmp_path / "input"))
    rest = list(it)
    fresh = iter(pipeline.build(config).repeat(2))
    tf.train.Checkpoint(iterator=fresh).read(saved)
    _assert_same_batches(list(fresh), rest)
    ids = _row_ids(before + rest)
    assert sorted(ids[:1000]) == sorted(ids[1000:]) == list(range(1000))


@pytest.mark.parametrize(
    ("change", "saved_after"),
    [
        (dict(files=slice(0, 3)), 2),
        (dict(files=slice(0, 3)), 80),  # past the end of the 75 batches of three files
        (dict(batch_size=20), 2),
    ],
    ids=["other-files", "other-files-past-their-end", "other-batch-size"],
)
def test_a_position_restored_into_another_build_is_refused(
    small_parquet, small_schema, tmp_path, change, saved_after
):
    # drop_remainder=False: no static batch shape, which would make tf.data refuse the
    # batches it had read ahead (saved with the position) before the reader's check.
    config = PipelineConfig(batch_size=10, drop_remainder=False, **SEQUENTIAL)
    it = iter(tfinput.parquet(small_parquet, small_schema).build(config))
    for _ in range(saved_after):
        next(it)
    saved = tf.train.Checkpoint(iterator=it).write(str(tmp_path / "input"))
    files = small_parquet[change.get("files", slice(None))]
    other = dataclasses.replace(config, batch_size=change.get("batch_size", 10))
    fresh = iter(tfinput.parquet(files, small_schema).build(other))
    # Refused at the restore, naming what differs (tfinput.resume.identified) ...
    expected = (
        f"files: 1 saved but not given now: {os.path.abspath(small_parquet[3])}"
        if "files" in change
        else "batch_size: saved 10, now 20"
    )
    with pytest.raises(ResumeError, match=re.escape(expected)):
        tf.train.Checkpoint(iterator=fresh).read(saved)
    # ... and, where the identity was not saved (a restore forced past it), by the reader
    # or, for a position past the end of these files, by the build's batch count.
    plain = iter(tfinput.parquet(files, small_schema).build(other)._input_dataset)
    tf.train.Checkpoint(iterator=plain).read(saved).expect_partial()
    refused = "saved by a build over other files|expected to contain 75 elements but contained"
    with pytest.raises(tf.errors.OpError, match=refused):
        list(plain)  # the batches tf.data had read ahead when saving come first


def test_reading_is_random_access_and_matches_the_sequential_read(small_parquet, small_schema):
    from tfinput._src.core.sources._arrow import ParquetBatches

    config = PipelineConfig(batch_size=70, shuffle_buffer=200, drop_remainder=False)
    reader = ParquetBatches(
        files=small_parquet, schema=small_schema, config=config, batch_size=70, shuffle_files=True
    )
    sequential = list(reader(seed=9))
    assert reader.num_batches == len(sequential) == 15  # 14 full and 20 rows
    fresh = ParquetBatches(
        files=small_parquet, schema=small_schema, config=config, batch_size=70, shuffle_files=True
    )
    for k in (11, 3, 14, 0):
        for key, value in fresh.batch(9, k).items():
            np.testing.assert_array_equal(value, sequential[k][key], err_msg=f"{k} {key}")
    ids = np.concatenate([b["row_id"] for b in sequential])
    assert sorted(ids.tolist()) == list(range(1000))


@pytest.mark.parametrize("shuffle_buffer", [0, 120], ids=["in-order", "shuffled"])
def test_batches_asked_out_of_order_read_each_row_group_once(
    small_parquet, small_schema, shuffle_buffer
):
    """tf.data runs the reader's stateless read in parallel, so batches are asked for
    slightly out of order (here: every pair swapped, a batch of the next row group
    before the last one of the group before it): each row group is still read once
    per epoch, the batches are those of the sequential read, and once the epoch is
    read the reader holds none of its rows."""
    from tfinput._src.core.sources._arrow import ParquetBatches

    config = PipelineConfig(
        batch_size=50, shuffle_buffer=shuffle_buffer, interleave_cycle_length=2
    )  # reads 4 batches ahead

    def reader() -> ParquetBatches:
        return ParquetBatches(
            files=small_parquet, schema=small_schema, config=config, batch_size=50,
            shuffle_files=False,
        )  # fmt: skip

    sequential = list(reader()(seed=5))
    swapped = reader()
    reads: dict[tuple[int, int], int] = {}
    read_group = swapped.read_group

    def counted(piece):
        reads[piece.file, piece.group] = reads.get((piece.file, piece.group), 0) + 1
        return read_group(piece)

    swapped.read_group = counted
    order = list(range(swapped.num_batches))
    for i in range(1, len(order) - 1, 2):
        order[i], order[i + 1] = order[i + 1], order[i]  # 0, 2, 1, 4, 3, ...
    got = {k: swapped.batch(5, k) for k in order}
    groups = {(f, g) for f in range(4) for g in range(3)}  # 250 rows per file, groups of 100
    assert reads == dict.fromkeys(groups, 1)
    for k, batch in enumerate(sequential):
        for key, value in batch.items():
            np.testing.assert_array_equal(got[k][key], value, err_msg=f"{k} {key}")
    plan = swapped._epochs[5]
    assert not plan.groups and not plan.windows and not plan.batches


@pytest.mark.parametrize(
    ("shuffle_buffer", "batch", "windows"),
    [
        (10, 70, [140] * 6 + [160]),  # a buffer under a batch: windows of two batches
        (70, 70, [140] * 6 + [160]),
        (250, 100, [300, 300, 400]),  # rounded up to whole batches; the last takes the rest
        (5000, 100, [1000]),  # one window: the whole epoch
    ],
    ids=["buffer-under-a-batch", "buffer-of-a-batch", "rounded-up", "whole-epoch"],
)
def test_shuffle_windows_span_two_batches_or_more_and_the_last_takes_the_rest(
    small_parquet, small_schema, shuffle_buffer, batch, windows
):
    from tfinput._src.core.sources._arrow import ParquetBatches

    config = PipelineConfig(batch_size=batch, shuffle_buffer=shuffle_buffer, drop_remainder=False)
    reader = ParquetBatches(
        files=small_parquet,
        schema=small_schema,
        config=config,
        batch_size=batch,
        shuffle_files=False,
    )
    got = [np.sort(b["row_id"]).astype(int) for b in reader(seed=3)]
    assert reader.windows == len(windows)
    ends = np.cumsum(windows)
    for k, rows in enumerate(got):
        plain = np.arange(k * batch, min((k + 1) * batch, 1000))
        j = reader.window_of(k)
        assert ends[j] - windows[j] <= rows.min() and rows.max() < ends[j], k  # its window's
        assert len(rows) == len(plain) and (rows != plain).any(), k  # rows from other batches
    assert np.concatenate(got).tolist() != list(range(1000))
    assert sorted(np.concatenate(got).tolist()) == list(range(1000))


def test_an_abandoned_reader_lets_its_threads_go_and_drops_its_read_ahead(
    small_parquet, small_schema, monkeypatch
):
    """TensorFlow keeps a dataset's Python functions (and so the reader) after the
    dataset and its iterators are gone: the reader itself must not keep threads and
    batches. Its read-ahead threads exit after `READER_IDLE_S` without work, the last one
    dropping what was read ahead; a later read is the same as before."""
    import threading
    import time

    from tfinput._src.core.sources import _arrow

    monkeypatch.setattr(_arrow, "READER_IDLE_S", 0.3)
    config = PipelineConfig(batch_size=50, shuffle_buffer=200, interleave_parallelism=3)
    reader = _arrow.ParquetBatches(
        files=small_parquet, schema=small_schema, config=config, batch_size=50, shuffle_files=True
    )
    first = [reader.batch(4, k) for k in range(3)]  # abandoned mid-epoch, read ahead
    assert 0 < reader._pool.threads <= 3
    assert any(t.name.startswith("tfinput-parquet") for t in threading.enumerate())
    assert reader._epochs[4].batches  # batches read ahead
    deadline = time.monotonic() + 30
    while (reader._pool.threads or reader._epochs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reader._pool.threads == 0 and not reader._epochs
    again = [reader.batch(4, k) for k in range(3)]  # read again: the same batches
    for a, b in zip(first, again, strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert reader._pool.threads > 0  # the pool starts threads again on demand


def test_the_idle_pool_runs_every_task_and_keeps_no_thread():
    import threading
    import time

    from tfinput._src.core.sources._idle_pool import IdlePool

    idle = threading.Event()
    pool = IdlePool(3, idle_s=0.2, name="test-pool", on_idle=idle.set)
    done, lock = [], threading.Lock()

    def task(i):
        time.sleep(0.01)
        with lock:
            done.append(i)

    for round_ in range(3):  # each round after the threads went idle and exited
        idle.clear()
        for i in range(40):
            pool.submit(lambda r=round_, i=i: task((r, i)))
        assert pool.threads <= 3
        assert idle.wait(30)
        assert pool.threads == 0
    assert sorted(done) == [(r, i) for r in range(3) for i in range(40)]


def test_a_build_knows_its_batch_count(small_parquet, small_schema):
    """From the footers: Keras's fit then knows its steps per epoch (it warns that the
    "input ran out of data" on a dataset of unknown length), and a shorter read fails."""
    pipeline = tfinput.parquet(small_parquet, small_schema)
    for config, batches in [
        (PipelineConfig(batch_size=64), 1000 // 64),
        (PipelineConfig(batch_size=64, drop_remainder=False, shuffle_buffer=200), 1000 // 64 + 1),
    ]:
        ds = pipeline.build(config)
        assert int(ds.cardinality()) == batches == sum(1 for _ in ds)
