"""`tfinput._src.core.sources.skeleton`: the steps every source shares (shard, file order,
interleave, parallelism arguments) and the once-only warning for unhonoured knobs."""

from __future__ import annotations

import pytest
import tensorflow as tf

from tfinput._src.core.sources import ParquetSource, skeleton
from tfinput.config import AUTOTUNE, PipelineConfig
from tfinput.errors import SourceError


def test_an_unhonoured_knob_is_named_once_per_kind_knob_and_value(
    small_schema, read_request, warnings_logged
):
    source = ParquetSource(paths=("unused.parquet",))
    for _ in range(3):  # the tuner builds the same pipeline many times
        skeleton.warn_unhonoured(source, read_request([], interleave_block_length=7))
    skeleton.warn_unhonoured(source, read_request([], interleave_block_length=8))
    skeleton.warn_unhonoured(source, read_request([], interleave_block_length=1))  # honoured
    assert warnings_logged() == [
        f"tfinput: interleave_block_length={n} has no effect on the parquet source: pyarrow "
        "reads each file's record batches in order (the interleave knobs set its readahead "
        "and threads)"
        for n in (7, 8)
    ]


@pytest.mark.parametrize(
    ("knob", "value", "is_set"),
    [
        ("interleave_cycle_length", AUTOTUNE, False),
        ("interleave_cycle_length", 1, False),
        ("interleave_cycle_length", 4, True),
        ("interleave_block_length", 2, True),
        ("shuffle_buffer", 0, False),
        ("shuffle_buffer", 10, True),
        ("cache", True, True),
    ],
)
def test_knob_is_set(knob, value, is_set):
    config = PipelineConfig(batch_size=8, **{knob: value})
    assert skeleton.knob_is_set(config, knob) is is_set


def test_parallelism_arguments():
    assert skeleton.parallel_calls(1) is None  # the sequential op
    assert skeleton.parallel_calls(AUTOTUNE) == AUTOTUNE
    assert skeleton.parallel_calls(6) == 6
    assert skeleton.deterministic_arg(PipelineConfig(batch_size=8)) is None
    assert skeleton.deterministic_arg(PipelineConfig(batch_size=8, deterministic=False)) is False


def _three_files(cycle: int, block: int) -> list[int]:
    """Interleave three "files" of 4 records each: file f holds 10f .. 10f+3."""
    files = tf.data.Dataset.range(3)
    config = PipelineConfig(
        batch_size=8,
        interleave_cycle_length=cycle,
        interleave_block_length=block,
        interleave_parallelism=1,
        deterministic=True,
    )
    ds = skeleton.interleave_files(
        files, lambda f: tf.data.Dataset.range(4).map(lambda i: 10 * f + i), config
    )
    return list(ds.as_numpy_iterator())


def test_interleave_order_follows_cycle_and_block_length():
    assert _three_files(cycle=1, block=1) == [0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23]
    assert _three_files(cycle=3, block=1) == [0, 10, 20, 1, 11, 21, 2, 12, 22, 3, 13, 23]
    assert _three_files(cycle=2, block=2) == [0, 1, 10, 11, 2, 3, 12, 13, 20, 21, 22, 23]


def test_file_order_shuffles_only_when_asked_and_by_the_seed(read_request):
    paths = [f"f{i}" for i in range(20)]
    files = tf.data.Dataset.from_tensor_slices(paths)

    def order(request, count=20):
        return [p.decode() for p in skeleton.file_order(files, count, request).as_numpy_iterator()]

    assert order(read_request(paths)) == paths
    assert order(read_request(paths, shuffle_files=True), count=1) == paths
    shuffled = order(read_request(paths, shuffle_files=True, shuffle_seed=3))
    assert shuffled != paths and sorted(shuffled) == sorted(paths)
    assert order(read_request(paths, shuffle_files=True, shuffle_seed=3)) == shuffled


def test_shard_files_gives_each_pipeline_whole_files():
    files = [f"f{i}" for i in range(5)]
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    assert skeleton.shard_files(files, context, "TFRecord") == ["f1", "f3"]
    assert skeleton.shard_files(files, None, "TFRecord") == files
    many = tf.distribute.InputContext(num_input_pipelines=6, input_pipeline_id=0)
    with pytest.raises(SourceError, match=r"6 input pipelines but only 5 TFRecord file\(s\)"):
        skeleton.shard_files(files, many, "TFRecord")


def test_single_core_options():
    opts = skeleton.single_core_options()
    assert opts.threading.private_threadpool_size == 1
    assert opts.threading.max_intra_op_parallelism == 1
    assert opts.autotune.enabled is False
