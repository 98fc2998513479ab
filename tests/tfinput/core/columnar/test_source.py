"""`tfinput._src.core.columnar.source` (`ColumnarSource`): files from manifests, what the source
declares, reading, the chunk-sized shuffle buffer, error messages that name a chunk."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import tfinput
from tfinput import testing
from tfinput._src.core.columnar.format import read_manifest
from tfinput._src.core.columnar.source import ColumnarSource
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, SourceError

# The shared fixture: chunks of 100 rows, files of 300, 300, 300 and 100 rows.


def test_columnar_reads_the_fixture_rows_in_file_order(
    small_columnar, small_schema, assert_reads_fixture_rows
):
    assert_reads_fixture_rows(tfinput.columnar(small_columnar, small_schema))


def test_columnar_declares_native_iterator_checkpointing(small_columnar, read_request):
    source = ColumnarSource(paths=str(small_columnar[0]))
    assert source.paths == (str(small_columnar[0]),)
    assert (source.kind, source.batches_itself, source.resume) == ("columnar", False, "iterator")
    request = read_request(small_columnar, interleave_block_length=3, cache=True, shuffle_buffer=5)
    assert source.unhonoured(request) == {}


@pytest.mark.parametrize("flag", ["verify", "shuffle_rows"])
def test_flags_must_be_booleans(flag):
    with pytest.raises(ConfigError, match=f"columnar source: {flag} must be true or false, got 1"):
        ColumnarSource(paths=("x",), **{flag: 1})


def test_files_from_a_directory_its_manifest_or_the_data_files(small_columnar):
    directory = Path(small_columnar[0]).parent
    files = list(small_columnar)
    assert ColumnarSource(paths=(str(directory),)).files() == files
    assert ColumnarSource(paths=(str(directory / "manifest.json"),)).files() == files
    # Listed twice (a glob and a file): read once, in the order given.
    source = ColumnarSource(paths=(files[2], str(directory / "*.tfcol")))
    assert source.files() == [files[2], files[0], files[1], files[3]]
    assert source.manifest().chunk_rows == 100


def test_count_records_from_the_manifest(small_columnar, tmp_path):
    source = ColumnarSource(paths=tuple(small_columnar))
    assert [source.count_records(p) for p in small_columnar] == [300, 300, 300, 100]
    assert source.count_records(str(tmp_path / "elsewhere.tfcol")) is None


def test_shuffle_buffer_counts_chunks(small_columnar, read_request):
    source = ColumnarSource(paths=tuple(small_columnar))
    buffers = [
        source.shuffle_buffer(None, read_request(small_columnar, shuffle_buffer=rows))
        for rows in (1, 100, 101, 250)
    ]
    assert buffers == [2, 2, 2, 3]  # at least two: one chunk would hand each on as it comes


def test_whole_chunk_batches_from_a_small_buffer_are_said_once_with_what_mixes(
    small_columnar, small_schema, warnings_logged
):
    def batches(config, **source):
        pipeline = tfinput.columnar(small_columnar, small_schema, **source)
        return [np.sort(f["dense"]["row_id"].numpy()).tolist() for f, _ in pipeline.build(config)]

    config = PipelineConfig(batch_size=200, shuffle_buffer=100, shuffle_seed=2)
    for _ in range(2):  # the tuner builds one pipeline many times: said once
        whole = batches(config)
    assert all(len({r // 100 for r in b}) == 2 for b in whole)  # two whole chunks each
    assert warnings_logged() == [
        "tfinput: columnar shuffle_buffer=100 with batches of 200 rows: batches are cut from "
        "whole chunks of 100 rows taken from a buffer of 2 chunks, so the rows of a chunk "
        "stay together and some batches hold the same rows as without a shuffle; "
        "tfinput.columnar(..., shuffle_rows=True) permutes the rows of windows of 4 chunks "
        "(two batches) before cutting batches (one gather per column), a shuffle_buffer of "
        "400 rows (two batches) or more mixes more chunks, and shuffle='global' draws each "
        "batch's chunks from the whole data set"
    ]
    # shuffle_rows: rows of windows of four chunks, so no batch is two whole chunks
    mixed = batches(config, shuffle_rows=True)
    assert all(len({r // 100 for r in b}) > 2 for b in mixed)
    assert sorted(r for b in mixed for r in b) == list(range(1000))
    batches(config.replace(shuffle_buffer=400))  # two batches: chunks mix enough
    assert len(warnings_logged()) == 1


def test_explain_error_names_the_chunk_and_its_rows(small_columnar):
    path = small_columnar[1]
    entry = read_manifest(path).entry(path)
    source = ColumnarSource(paths=tuple(small_columnar))
    at = entry.offsets[1] + 5
    message = source.explain_error(path, f"{path}: corrupted record at {at}")
    assert message.startswith(f"chunk 1 (rows 100-199 of the file, byte {at}): corrupted record;")
    assert source.explain_error(path, "something else") == "something else"


def test_a_file_of_another_source_is_refused(small_columnar, small_schema):
    source = ColumnarSource(paths=tuple(small_columnar[:2]))
    with pytest.raises(SourceError, match=f"{small_columnar[3]}: not a file of this columnar"):
        source.validate([small_columnar[3]], small_schema)


def test_data_sets_with_different_chunk_sizes_are_refused(tmp_path, small_columnar, small_schema):
    other = testing.write_columnar(tmp_path, small_schema, rows=100, chunk_rows=50)
    with pytest.raises(SourceError, match=r"different chunk sizes \[50, 100\] cannot be read"):
        tfinput.columnar([*small_columnar, *other], small_schema).build(
            PipelineConfig(batch_size=100)
        )


def test_no_whole_chunk_to_read(tmp_path, small_schema):
    files = testing.write_columnar(tmp_path, small_schema, rows=50, chunk_rows=100)
    pipeline = tfinput.columnar(files, small_schema)
    with pytest.raises(SourceError, match="no whole chunk of 100 rows to read"):
        pipeline.build(PipelineConfig(batch_size=100, drop_remainder=True))
    _, labels = next(iter(pipeline.build(PipelineConfig(batch_size=100, drop_remainder=False))))
    assert labels.shape == (50,)


def test_roofline_reads_whole_chunks(small_columnar, small_schema):
    source = ColumnarSource(paths=tuple(small_columnar))
    stages = source.roofline_stages(small_columnar, small_schema, 250)
    assert stages.descriptions["read"] == (
        "TFRecordDataset over the files in order, batch(2 chunks of 100 rows)"
    )
    read = next(iter(stages.factories["read"]()))
    assert stages.counters["read"](read) == 200
    parsed = next(iter(stages.factories["parse"]()))
    np.testing.assert_array_equal(np.ravel(parsed["row_id"]), np.arange(200))
    size = sum(Path(p).stat().st_size for p in small_columnar)
    assert stages.bytes_per_example == pytest.approx(size / 1000)


# ------------------------------------------------------------ global shuffle
def _global(paths, schema, **kw):
    return tfinput.columnar(paths, schema, shuffle="global", **kw)


def _row_ids(ds):
    """Per batch, its rows' ``row_id`` values, in order."""
    return [f["dense"]["row_id"].numpy().astype(int).tolist() for f, _ in ds]


def _save_and_restore(pipeline, config, *, after, tmp_path, rest=None):
    """Batches read before saving the iterator after ``after`` batches, the rest (or
    the next ``rest`` batches) read from a fresh build restored from the checkpoint,
    and the checkpoint's size."""
    import itertools

    import tensorflow as tf

    it = iter(pipeline.build(config))
    first = [next(it) for _ in range(after)]
    prefix = tf.train.Checkpoint(iterator=it).write(str(tmp_path / "ckpt"))
    size = sum(p.stat().st_size for p in tmp_path.glob("ckpt*"))
    restored = iter(pipeline.build(config))
    tf.train.Checkpoint(iterator=restored).read(prefix).assert_consumed()
    return _row_ids(first) + _row_ids(itertools.islice(restored, rest)), size


GLOBAL = PipelineConfig(batch_size=200, shuffle_seed=11, deterministic=True)


def test_global_shuffle_resumes_exactly_with_verification(
    small_columnar, small_schema, small_columns, tmp_path, read_request
):
    from tests.helpers import assert_each_row_once, collect

    pipeline = _global(small_columnar, small_schema, verify=True)
    request = read_request(small_columnar, batch_size=200, shuffle_seed=11, deterministic=True)
    assert pipeline.source.symbolic_checkpoint(request)  # positions only
    batches = list(pipeline.build(GLOBAL))
    whole = _row_ids(batches)
    resumed, _ = _save_and_restore(pipeline, GLOBAL, after=2, tmp_path=tmp_path)
    assert resumed == whole
    assert_each_row_once([collect(batches)], small_columns, small_schema)


def test_global_shuffle_is_a_new_permutation_every_iteration(small_columnar, small_schema):
    ds = _global(small_columnar, small_schema).build(GLOBAL)
    epochs = [_row_ids(ds) for _ in range(2)]
    for batches in epochs:
        assert sorted(r for b in batches for r in b) == list(range(1000))
        assert [len(b) for b in batches] == [200] * 5
    assert epochs[0] != epochs[1]
    # Chunks come from all over the data set, rows are mixed within each batch.
    assert epochs[0][0] != sorted(epochs[0][0])
    again = _row_ids(_global(small_columnar, small_schema).build(GLOBAL))
    assert again == epochs[0], "the same seed gives the same order"
    other = dataclasses.replace(GLOBAL, shuffle_seed=12)
    assert _row_ids(_global(small_columnar, small_schema).build(other)) != epochs[0]


def test_global_shuffle_checkpoint_does_not_grow_with_the_data(
    small_columnar, small_schema, tmp_path
):
    big = testing.write_columnar(tmp_path / "big", small_schema, rows=4000, files=4, chunk_rows=100)
    sizes = []
    for i, paths in enumerate([small_columnar, big]):
        _, size = _save_and_restore(
            _global(paths, small_schema), GLOBAL, after=2, tmp_path=tmp_path / f"g{i}", rest=1
        )
        sizes.append(size)
    buffered = tfinput.columnar(small_columnar, small_schema)
    config = dataclasses.replace(GLOBAL, shuffle_buffer=500)
    _, buffer_size = _save_and_restore(buffered, config, after=2, tmp_path=tmp_path / "b", rest=1)
    # Positions only (tf.data's names for the stages make up most of it) and the
    # pipeline's identity (its files by path: `tfinput.resume.identified`): about 2 KB
    # beside the identity whatever the data, where the buffer shuffle holds its chunks.
    from tfinput.resume import pipeline_identity

    identities = [
        len(json.dumps(pipeline_identity(_global(p, small_schema), GLOBAL), sort_keys=True))
        for p in (small_columnar, big)
    ]
    positions = [size - identity for size, identity in zip(sizes, identities)]
    assert abs(positions[0] - positions[1]) <= 16 and positions[0] < 2500, (sizes, identities)
    assert buffer_size > 10 * sizes[0], (buffer_size, sizes)


def test_resume_at_a_batch_of_an_iteration(small_columnar, small_schema):
    pipeline = _global(small_columnar, small_schema)
    ds = pipeline.build(GLOBAL)
    epochs = [_row_ids(ds) for _ in range(3)]
    for iteration, batch in [(0, 0), (0, 3), (2, 1)]:
        source = pipeline.source.resume_at(iteration=iteration, batch=batch)
        rest = _row_ids(dataclasses.replace(pipeline, source=source).build(GLOBAL))
        assert rest == epochs[iteration][batch:], (iteration, batch)


def test_global_shuffle_shards_files_per_input_pipeline(small_columnar, small_schema):
    import tensorflow as tf

    pipeline = _global(small_columnar, small_schema)
    config = dataclasses.replace(GLOBAL, batch_size=400)
    parts = []
    for i in range(2):
        ctx = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=i, num_replicas_in_sync=2
        )
        parts.append(_row_ids(pipeline.build(config, input_context=ctx)))
    rows = [sorted(r for b in part for r in b) for part in parts]
    files = [sorted(set(r // 300 for r in part)) for part in rows]  # files of 300 rows
    assert files == [[0, 2], [1, 3]]
    assert sorted(rows[0] + rows[1]) == list(range(1000))


@pytest.mark.parametrize(
    "knobs",
    [dict(shuffle_buffer=100), dict(cache=True)],
    ids=["shuffle_buffer", "cache"],
)
def test_global_shuffle_refuses_a_buffer_or_cache(small_columnar, small_schema, knobs):
    config = dataclasses.replace(GLOBAL, **knobs)
    name = next(iter(knobs))
    with pytest.raises(ConfigError, match=f"shuffle='global'.*PipelineConfig.{name}="):
        _global(small_columnar, small_schema).build(config)


def test_global_shuffle_options_are_checked(small_columnar, small_schema, read_request):
    with pytest.raises(ConfigError, match=r"shuffle must be one of \['buffer', 'global'\]"):
        ColumnarSource(paths=("x",), shuffle="full")
    with pytest.raises(ConfigError, match="resume_at needs shuffle='global'"):
        ColumnarSource(paths=("x",)).resume_at(iteration=0, batch=1)
    source = ColumnarSource(paths=tuple(small_columnar), shuffle="global")
    request = read_request(small_columnar, batch_size=150, interleave_cycle_length=2)
    assert not source.symbolic_checkpoint(request)  # rebatch: explicit checkpoints
    assert list(source.unhonoured(request)) == ["interleave_cycle_length"]
    unseeded = dataclasses.replace(GLOBAL, shuffle_seed=None)
    pipeline = _global(small_columnar, small_schema)
    resumed = dataclasses.replace(pipeline, source=pipeline.source.resume_at(iteration=0, batch=1))
    with pytest.raises(ConfigError, match=r"needs PipelineConfig\.shuffle_seed set"):
        resumed.build(unseeded)


@pytest.mark.parametrize(
    ("batch_size", "drop_remainder"), [(200, True), (200, False), (64, True), (64, False)]
)
def test_a_build_knows_its_batch_count(tmp_path, small_schema, batch_size, drop_remainder):
    """From the manifests (1,037 rows in chunks of 100: partial chunks in each file):
    Keras's fit then knows its steps per epoch, as with Parquet."""
    path = testing.write_columnar(tmp_path / "c", small_schema, rows=1037, files=3, chunk_rows=100)
    config = PipelineConfig(batch_size=batch_size, drop_remainder=drop_remainder)
    ds = tfinput.columnar(path, small_schema).build(config)
    assert int(ds.cardinality()) == sum(1 for _ in ds) > 0


def test_check_size_accepts_the_manifest_size_and_names_a_missing_file(copy):
    from tfinput._src.core.columnar._checks import check_size

    m = read_manifest(copy)
    path, entry = m.paths[0], m.files[0]
    check_size(path, m, entry)  # intact: no error
    (copy / entry.name).unlink()
    with pytest.raises(SourceError, match=f"{path}: listed in the manifest .* but missing"):
        check_size(path, m, entry)
