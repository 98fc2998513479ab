"""`tfinput._src.core.sources.tfrecord` (`TFRecordSource`) and its build-time checks
(`tfinput._src.core.sources._tfrecord_checks`): whole last record, first records against the
schema, a shuffle buffer the files can hold."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tfinput import testing
from tfinput._src.core.sources.tfrecord import TFRecordSource
from tfinput.config import PipelineConfig
from tfinput.errors import DataError, SchemaError, SourceError
from tfinput.schema import Schema


def _with(schema: Schema, name: str, **changes) -> Schema:
    """``schema`` with feature ``name`` changed."""
    features = tuple(
        dataclasses.replace(f, **changes) if f.name == name else f for f in schema.features
    )
    return dataclasses.replace(schema, features=features)


def test_tfrecord_reads_the_fixture_rows_in_file_order(
    small_tfrecord, small_schema, assert_reads_fixture_rows
):
    assert_reads_fixture_rows(tfinput.tfrecord(small_tfrecord, small_schema))


def test_tfrecord_declares_native_iterator_checkpointing_and_honours_every_knob(
    small_tfrecord, read_request
):
    source = TFRecordSource(paths=tuple(small_tfrecord))
    assert (source.kind, source.batches_itself, source.resume) == ("tfrecord", False, "iterator")
    request = read_request(
        small_tfrecord,
        shuffle_files=True,
        interleave_cycle_length=4,
        interleave_block_length=3,
        interleave_parallelism=2,
        shuffle_buffer=100,
        cache=True,
    )
    assert source.unhonoured(request) == {}


def test_honoured_knobs_do_not_warn(small_tfrecord, small_schema, warnings_logged):
    config = PipelineConfig(batch_size=50, interleave_block_length=3, cache=True, shuffle_buffer=10)
    tfinput.tfrecord(small_tfrecord, small_schema).build(config)
    assert not [m for m in warnings_logged() if "has no effect" in m]


def test_compression_by_extension_or_as_given():
    auto = TFRecordSource(paths=("x",))
    assert [auto.compression_of(p) for p in ("a.tfrecord", "a.GZ", "a.gzip", "a.zz", "a.zlib")] == [
        "",
        "GZIP",
        "GZIP",
        "ZLIB",
        "ZLIB",
    ]
    assert TFRecordSource(paths=("x",), compression="gzip").compression_of("a.tfrecord") == "GZIP"
    assert TFRecordSource(paths=("x",), compression=None).compression_of("a.gz") == ""
    with pytest.raises(SourceError, match="TFRecord compression 'lz4' unknown; expected one of"):
        TFRecordSource(paths=("x",), compression="lz4")
    with pytest.raises(SourceError, match="empty_files: expected 'skip' or 'error'"):
        TFRecordSource(paths=("x",), empty_files="keep")


def test_gzip_files_are_read_and_mixed_compressions_refused(tmp_path, small_schema, small_tfrecord):
    gz = testing.write_tfrecord(tmp_path, small_schema, rows=60, files=2, compression="GZIP")
    assert all(p.endswith(".gz") for p in gz)
    got = tfinput.tfrecord(gz, small_schema).build(PipelineConfig(batch_size=20))
    assert sum(int(labels.shape[0]) for _, labels in got) == 60
    mixed = tfinput.tfrecord([*gz, small_tfrecord[0]], small_schema)
    with pytest.raises(SourceError, match=r"TFRecord files mix compressions \['', 'GZIP'\]"):
        mixed.build(PipelineConfig(batch_size=20))


def test_count_records_per_file(small_tfrecord, tmp_path):
    source = TFRecordSource(paths=tuple(small_tfrecord))
    assert [source.count_records(p) for p in small_tfrecord] == [250, 250, 250, 250]
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes(Path(small_tfrecord[0]).read_bytes()[:-3])  # inside the last record's data
    assert source.count_records(str(cut)) is None


def test_count_readable_stops_at_the_damage(small_tfrecord, tmp_path):
    """A cut or damaged file: the records that read whole before the damage, counted
    past a native batch of 4096 too; a whole file: all of them."""
    source = TFRecordSource(paths=tuple(small_tfrecord))
    assert source.count_readable(small_tfrecord[0]) == 250
    data = Path(small_tfrecord[0]).read_bytes()
    at = _record_offsets(small_tfrecord[0])[100]
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes(data[: at + 30])  # inside record 100's data
    assert source.count_readable(str(cut)) == 100
    damaged = bytearray(data)
    damaged[at + 20] ^= 0xFF  # record 100's data no longer matches its checksum
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(damaged))
    assert source.count_readable(str(bad)) == 100
    many = tmp_path / "many.tfrecord"
    many.write_bytes(data * 20 + data[: at + 30])  # 5,000 whole records, then the cut
    assert source.count_readable(str(many)) == 5100
    assert source.count_readable(str(tmp_path / "absent.tfrecord")) is None


def _record_offsets(path: str) -> list[int]:
    offsets, at = [], 0
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        offsets.append(at)
        at += 16 + len(record)
    return offsets


def test_a_file_cut_inside_a_record_header_is_refused_at_build(
    tmp_path, small_tfrecord, small_schema
):
    path = tmp_path / "part-0.tfrecord"
    shutil.copy(small_tfrecord[0], path)
    last = _record_offsets(str(path))[-1]
    with open(path, "r+b") as fh:
        fh.truncate(last + 5)
    with pytest.raises(DataError) as e:
        tfinput.tfrecord(path, small_schema).build(PipelineConfig(batch_size=10))
    assert str(e.value).startswith(
        f"{path}: truncated TFRecord: the file ends 5 byte(s) into a record header at offset {last}"
    )


def test_a_file_shorter_than_one_header(tmp_path, small_schema):
    path = tmp_path / "tiny.tfrecord"
    path.write_bytes(b"\x01\x02\x03")
    with pytest.raises(DataError, match=r"tiny.tfrecord: truncated TFRecord: 3 byte\(s\)"):
        tfinput.tfrecord(path, small_schema).build(PipelineConfig(batch_size=10))


def test_a_key_absent_from_the_first_records_is_named_with_a_suggestion(
    small_tfrecord, small_schema
):
    schema = _with(small_schema, "price", column="prize")
    with pytest.raises(SchemaError) as e:
        tfinput.tfrecord(small_tfrecord, schema).build(PipelineConfig(batch_size=10))
    message = str(e.value)
    assert message.startswith(
        f"{small_tfrecord[0]}: feature 'price': key 'prize' is absent from all of the first "
        "250 record(s)"
    )
    assert "did you mean ['price']" in message and "allow_absent" in message
    pipeline = tfinput.tfrecord(small_tfrecord, schema, allow_absent=["prize"])
    features, _ = next(iter(pipeline.build(PipelineConfig(batch_size=10))))
    assert features["dense"]["price"].shape == (10,)  # the default, log1p(0) = 0
    np.testing.assert_array_equal(features["dense"]["price"].numpy(), np.zeros(10))


def test_first_records_are_checked_every_time_where_a_file_has_no_local_version(
    small_tfrecord, small_schema
):
    """A path os.stat cannot see (gs://..., here TensorFlow's ram://) has no version to
    remember a passed check by: the check reads its first records on every build."""
    from tfinput._src.core.sources import _tfrecord_checks as checks

    path = "ram://tfinput-first-records/part-0.tfrecord"
    tf.io.gfile.makedirs("ram://tfinput-first-records")
    tf.io.gfile.copy(small_tfrecord[0], path, overwrite=True)
    with pytest.raises(OSError):
        os.stat(path)
    wrong = _with(small_schema, "price", column="prize")
    for _ in range(2):  # refused both times: nothing was remembered
        with pytest.raises(SchemaError, match=r"^ram://.*key 'prize' is absent"):
            checks.check_first_examples_once(path, "", wrong)
    checks.check_first_examples_once(path, "", small_schema)
    assert not any(key[0] == path for key in checks._SAMPLES_OK)


def test_a_key_of_the_wrong_kind_is_named(small_tfrecord, small_schema):
    schema = _with(small_schema, "country", dtype="int64", default=None)
    with pytest.raises(SchemaError) as e:
        tfinput.tfrecord(small_tfrecord, schema).build(PipelineConfig(batch_size=10))
    assert str(e.value) == (
        f"{small_tfrecord[0]}: feature 'country': the schema expects int64_list (dtype int64) "
        "but the file holds bytes_list; set dtype='string' or fix the data"
    )


def test_a_shuffle_buffer_larger_than_the_files_can_hold_is_capped(
    small_tfrecord, small_schema, warnings_logged
):
    total = sum(os.path.getsize(p) for p in small_tfrecord)
    config = PipelineConfig(batch_size=50, shuffle_buffer=10**9)
    tfinput.tfrecord(small_tfrecord, small_schema).build(config)
    assert (
        f"tfinput: shuffle_buffer 1000000000 is larger than the {total // 16} record(s) the 4 "
        f"file(s) can hold ({total} bytes, at least 16 bytes per record); using {total // 16}"
    ) in warnings_logged()


def test_roofline_reads_in_file_order_and_measures_record_size(small_tfrecord, small_schema):
    stages = TFRecordSource(paths=tuple(small_tfrecord)).roofline_stages(
        small_tfrecord, small_schema, 100
    )
    first = list(tf.data.TFRecordDataset(small_tfrecord[0]).as_numpy_iterator())
    assert stages.bytes_per_example == pytest.approx(np.mean([len(r) for r in first]))
    read = next(iter(stages.factories["read"]()))
    assert read.shape == (100,) and read[0].numpy() == first[0]
    parsed = next(iter(stages.factories["parse"]()))
    assert parsed["row_id"].numpy().ravel().tolist() == list(range(100))


def _ops(ds):
    """Op types of a dataset's graph: (top level, inside its functions)."""
    graph = tf.compat.v1.GraphDef.FromString(ds._as_serialized_graph().numpy())
    inner = {n.op for f in graph.library.function for n in f.node_def}
    return {n.op for n in graph.node}, inner


def test_read_batch_hands_mini_batches_from_the_file_branches(small_tfrecord, small_schema):
    """With ``read_batch`` the records are batched inside the parallel interleave's
    branches and the consumer side re-cuts mini-batches: no ``batch`` of single records
    outside the branches."""
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    config = PipelineConfig(batch_size=100, read_batch=32, shuffle_buffer=256, shuffle_seed=1)
    top, inner = _ops(pipeline.build(config))
    assert "RebatchDatasetV2" in top and "BatchDatasetV2" in inner
    assert "BatchDatasetV2" not in top
    # Their records are permuted a window at a time and shuffled in groups of
    # group_size(100) = 2, not the mini-batches one by one.
    graph = tf.compat.v1.GraphDef.FromString(pipeline.build(config)._as_serialized_graph().numpy())
    shuffles = [n for n in graph.node if n.op.startswith("ShuffleDataset")]
    assert len(shuffles) == 1
    (upstream,) = (n for n in graph.node if n.name == shuffles[0].input[0].split(":")[0])
    assert upstream.op == "UnbatchDataset"  # the groups: rows of the permuted windows
    assert [d.size for d in upstream.attr["output_shapes"].list.shape[0].dim] == [-1]
    top, inner = _ops(pipeline.build(config.replace(read_batch=0)))  # today's plan
    assert "BatchDatasetV2" in top and "RebatchDatasetV2" not in top


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_read_batch_keeps_batch_sizes_rows_and_determinism(
    small_tfrecord, small_schema, drop_remainder
):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema).with_file_shuffling()
    config = PipelineConfig(
        batch_size=96,
        drop_remainder=drop_remainder,
        read_batch=40,
        shuffle_buffer=300,
        shuffle_seed=7,
        interleave_cycle_length=2,
        interleave_parallelism=2,
        deterministic=True,
    )
    runs = []
    for _ in range(2):
        sizes, rows = [], []
        for features, _ in pipeline.build(config):
            ids = features["dense"]["row_id"].numpy().astype(int)
            sizes.append(len(ids))
            rows.extend(ids.tolist())
        runs.append(rows)
        full = 1000 // 96
        assert sizes[:full] == [96] * full
        assert sizes[full:] == ([] if drop_remainder else [1000 - 96 * full])
        assert len(set(rows)) == len(rows) == (96 * full if drop_remainder else 1000)
    assert runs[0] == runs[1]  # deterministic=True with a seed: the same order
    assert runs[0] != sorted(runs[0])  # and shuffled


# ------------------------------------------------ mixing with the default read_batch
def _epoch(pipeline, config) -> list[np.ndarray]:
    return [f["dense"]["row_id"].numpy().astype(int).ravel() for f, _ in pipeline.build(config)]


def _runs_and_files(batches: list[np.ndarray], per_file: int = 250) -> tuple[float, float]:
    """Mean runs of consecutive rows among a full batch's rows, and mean distinct files."""
    full = [b for b in batches if len(b) == len(batches[0])]
    runs = [1 + int(np.count_nonzero(np.diff(np.sort(b)) != 1)) for b in full]
    return float(np.mean(runs)), float(np.mean([len(set(b // per_file)) for b in full]))


MIXING = PipelineConfig(
    batch_size=32,
    shuffle_buffer=100,
    shuffle_seed=1,
    deterministic=True,
    drop_remainder=False,
    interleave_cycle_length=4,
)


def test_the_default_read_batch_shuffles_records_not_runs(small_tfrecord, small_schema):
    """Batch 32 and ``shuffle_buffer=100`` with the default ``read_batch`` (4 files of
    250 consecutive rows): the batches are shuffled record by record, as with single
    records at the same buffer, every row once, the same order for the same seed."""
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    assert MIXING.read_batch == 64
    batches = _epoch(pipeline, MIXING)
    rows = np.concatenate(batches)
    assert sorted(rows.tolist()) == list(range(1000))  # every row exactly once
    assert [len(b) for b in batches] == [32] * 31 + [8]
    runs, files = _runs_and_files(batches)
    assert runs > 25 and files > 3  # not one run of one file (that was 1.0 and 1.0)
    single_runs, single_files = _runs_and_files(_epoch(pipeline, MIXING.replace(read_batch=0)))
    assert runs >= 0.95 * single_runs and files >= single_files - 0.1
    again = _epoch(pipeline, MIXING)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again, strict=True))
    other = np.concatenate(_epoch(pipeline, MIXING.replace(shuffle_seed=2)))
    assert not np.array_equal(rows, other) and sorted(other.tolist()) == list(range(1000))


def test_the_shuffle_says_once_how_it_differs_from_single_records(
    small_tfrecord, small_schema, caplog
):
    """The build logs once (per process and sizes) what the grouped shuffle holds and
    the setting that gives tf.data's own record shuffle; ``read_batch=0`` logs nothing."""
    import logging

    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    config = MIXING.replace(shuffle_buffer=77)  # sizes no other test logs first
    with caplog.at_level(logging.INFO, logger="tfinput"):
        pipeline.build(config)
        pipeline.build(config)
        pipeline.build(config.replace(read_batch=0))
    lines = [r.getMessage() for r in caplog.records if "a window" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "shuffle_buffer=77 with read_batch=64" in lines[0]
    assert "holds up to 333 records, not 77" in lines[0]  # window max(77 // 2, 256)
    assert "read_batch=0 gives tf.data's record shuffle" in lines[0]


@pytest.mark.parametrize("buffer", [1, 10])
def test_a_tiny_shuffle_buffer_is_not_a_no_op(small_tfrecord, small_schema, buffer):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    config = MIXING.replace(shuffle_buffer=buffer)
    unshuffled = np.concatenate(_epoch(pipeline, config.replace(shuffle_buffer=0)))
    batches = _epoch(pipeline, config)
    rows = np.concatenate(batches)
    assert sorted(rows.tolist()) == list(range(1000))
    assert np.count_nonzero(rows != unshuffled) > 900
    assert _runs_and_files(batches)[0] > 16


def test_derived_sizes_come_from_config_knobs_alone():
    """Mini-batches shrink for small shuffle buffers (the pool of buffer and window
    holds at least 32 of them); windows are half the buffer, at least 256 records."""
    from tfinput._src.core.sources.tfrecord import group_size, mini_batch, window_size

    sizes = {s: mini_batch(PipelineConfig(shuffle_buffer=s)) for s in (0, 100, 1000, 10_000)}
    assert sizes == {0: 64, 100: 11, 1000: 46, 10_000: 64}
    assert mini_batch(PipelineConfig(read_batch=1024, shuffle_buffer=10_000)) == 468
    assert mini_batch(PipelineConfig(read_batch=0, shuffle_buffer=100)) == 0
    assert [window_size(s) for s in (1, 100, 1000, 10_000)] == [256, 256, 500, 5000]
    # A batch draws on, and the buffer holds, at least 256 groups of 2 to 16 records.
    groups = [group_size(b, 10_000) for b in (1, 32, 512, 1024, 4096, 65_536)]
    assert groups == [2, 2, 2, 4, 16, 16]
    assert [group_size(4096, s) for s in (1, 100, 1000, 3000, 100_000)] == [2, 2, 5, 16, 16]


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_a_restore_mid_epoch_gives_exactly_the_rest(
    small_tfrecord, small_schema, tmp_path, drop_remainder
):
    """Saved after 5 batches (the shuffle buffer full), through `InputIterator` states
    and ``tf.train.Checkpoint``: a fresh build continues with the same batches, and
    delivered plus restored is every row once."""
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    config = MIXING.replace(drop_remainder=drop_remainder)
    it = pipeline.iterator(config)
    head = [next(it)[0]["dense"]["row_id"].numpy().astype(int).ravel() for _ in range(5)]
    state = it.get_state()
    rest = [f["dense"]["row_id"].numpy().astype(int).ravel() for f, _ in it]
    restored = tfinput.tfrecord(small_tfrecord, small_schema).iterator(config)
    restored.set_state(state)
    again = [f["dense"]["row_id"].numpy().astype(int).ravel() for f, _ in restored]
    assert len(again) == len(rest) and all(map(np.array_equal, again, rest))
    rows = np.concatenate(head + rest).tolist()
    assert len(rows) == len(set(rows)) == (992 if drop_remainder else 1000)  # 8 dropped
    assert set(rows) <= set(range(1000))

    built = iter(pipeline.build(config))
    for _ in range(5):
        next(built)
    prefix = tf.train.Checkpoint(iterator=built).write(str(tmp_path / "ckpt"))
    want = [f["dense"]["row_id"].numpy().tolist() for f, _ in built]
    fresh = iter(tfinput.tfrecord(small_tfrecord, small_schema).build(config))
    tf.train.Checkpoint(iterator=fresh).read(prefix).assert_consumed()
    assert [f["dense"]["row_id"].numpy().tolist() for f, _ in fresh] == want


@pytest.mark.parametrize(("records", "group"), [(1_003, 16), (1_024, 16), (5, 2), (0, 4)])
def test_the_grouped_shuffle_hands_every_record_once_in_groups(records, group):
    """Windows of whole groups are cut into groups of ``group`` records; the input's
    last window, when it is not a whole number of groups, goes out record by record."""
    from tfinput._src.core.sources.tfrecord import grouped_shuffle

    ids = tf.data.Dataset.range(records).map(tf.strings.as_string).batch(7)
    groups = list(grouped_shuffle(ids, hold=100, window=256, group=group, seed=3))
    got = [int(x) for g in groups for x in g.numpy()]
    assert sorted(got) == list(range(records))
    assert {len(g) for g in groups} <= {group, 1}
    assert sum(len(g) == group for g in groups) == records // 256 * 256 // group + (
        records % 256 // group if records % 256 % group == 0 else 0
    )
