"""The source contract (`tfinput._src.core.sources.protocol`): every source satisfies `Source`,
declares what it can do, and gives its roofline stages; the steps every source shares
(shard, file order, interleave, parallelism arguments, the shuffle windows of batched
rows) and the once-only warning for unhonoured knobs."""

from __future__ import annotations

from pathlib import Path

import pytest
import tensorflow as tf

from tests.helpers import SOURCE_KINDS
from tfinput._src.core.columnar.source import ColumnarSource
from tfinput._src.core.sources import _row_shuffle, protocol
from tfinput._src.core.sources.dataset import DatasetSource
from tfinput._src.core.sources.parquet import ParquetSource
from tfinput._src.core.sources.protocol import FileChecks, RooflineStages, Source
from tfinput._src.core.sources.tfrecord import TFRecordSource
from tfinput.config import AUTOTUNE, PipelineConfig
from tfinput.errors import ConfigError, SourceError


@pytest.fixture(params=SOURCE_KINDS)
def pipeline(request, pipeline_of):
    return pipeline_of(request.param)


def test_every_source_satisfies_the_protocol(pipeline):
    source = pipeline.source
    assert isinstance(source, Source)
    assert source.kind in ("tfrecord", "parquet", "columnar", "dataset")
    assert isinstance(source.batches_itself, bool)
    assert source.resume in ("iterator", "none", "dataset")
    ds = pipeline.build(PipelineConfig(batch_size=50))
    _, labels = next(iter(ds))
    assert labels.shape == (50,)


#: Per source: (batches by itself, resumability).
DECLARED = {
    "tfrecord": (False, "iterator"),
    "parquet": (True, "iterator"),
    "columnar": (False, "iterator"),
    "wrapped": (False, "dataset"),
    "wrapped_batched": (True, "dataset"),
}


def _kind(request):
    return request.node.callspec.params["pipeline"]


def test_sources_declare_batching_and_resumability(pipeline, request):
    from tfinput._src.core.sources.protocol import RestartsOrder

    batches_itself, resume = DECLARED[_kind(request)]
    assert pipeline.source.batches_itself is batches_itself
    assert pipeline.source.resume == resume
    # The capability of compact positions is declared, not probed: columnar only.
    assert isinstance(pipeline.source, RestartsOrder) is (_kind(request) == "columnar")
    # Files checked one by one and roofline stages: the file sources, not a wrapped one.
    files = not _kind(request).startswith("wrapped")
    assert isinstance(pipeline.source, FileChecks) is files
    assert isinstance(pipeline.source, RooflineStages) is files


def test_classes_and_import_paths():
    from tfinput import columnar_records

    assert columnar_records.ColumnarSource is ColumnarSource
    for cls in (TFRecordSource, ParquetSource, DatasetSource, ColumnarSource):
        assert Source in cls.__mro__  # explicit: the defaults of `Source` are inherited
    assert ParquetSource(paths=("x",), engine="tensorflow-io").batches_itself is False


@pytest.mark.parametrize("kind", ["tfrecord", "parquet", "columnar"])
def test_roofline_stages_come_from_the_source(kind, pipeline_of):
    pipeline = pipeline_of(kind)
    source = pipeline.source
    files = source.files()
    stages = source.roofline_stages(files, pipeline.schema, 100)
    assert set(stages.factories) == {"read", "parse"} == set(stages.descriptions)
    assert stages.files == len(files)
    assert stages.bytes_per_example and stages.bytes_per_example > 0
    for name, factory in stages.factories.items():
        batch = next(iter(factory()))
        count = stages.counters.get(name)
        if count is not None:
            assert count(batch) > 0


def test_defaults_a_source_inherits(small_tfrecord, small_schema, read_request):
    """What `Source` and `FileChecks` give a subclass that does not override them: the
    shuffle buffer as asked, no knob refused, no count, the message unchanged, no
    cross-file problem, some files in their order with empty files skipped."""
    source = TFRecordSource(paths=tuple(small_tfrecord), empty_files="error")
    request = read_request(small_tfrecord, shuffle_buffer=10**9, interleave_block_length=3)
    assert Source.shuffle_buffer(source, None, request) == 10**9
    assert Source.unhonoured(source, request) == {}
    assert FileChecks.count_records(source, small_tfrecord[0]) is None
    assert FileChecks.explain_error(source, small_tfrecord[0], "bad") == "bad"
    assert source.problems_across_files(small_tfrecord, small_schema) == {}
    some = source.only_files([small_tfrecord[2], small_tfrecord[0]])
    assert (some.paths, some.empty_files) == ((small_tfrecord[2], small_tfrecord[0]), "skip")
    assert source.check_files() == (list(small_tfrecord), [])


def test_file_counts_by_default_validate_and_count_each_file(
    small_tfrecord, small_schema, tmp_path
):
    """What `Pipeline.check` reads together: each file's records where a build over it
    alone validates it, None (read alone) where it does not."""
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes(Path(small_tfrecord[0]).read_bytes()[:-5])  # a cut record header
    files = [small_tfrecord[0], str(cut), small_tfrecord[1]]
    source = TFRecordSource(paths=tuple(files))
    want = [source.count_records(small_tfrecord[0]), None, source.count_records(small_tfrecord[1])]
    assert FileChecks.file_counts(source, files, small_schema) == want
    assert source.file_counts(files, small_schema) == want  # TFRecord's: natively, at once


def test_an_unhonoured_knob_is_named_once_per_kind_knob_and_value(
    small_schema, read_request, warnings_logged
):
    source = ParquetSource(paths=("unused.parquet",))
    for _ in range(3):  # the tuner builds the same pipeline many times
        protocol.warn_unhonoured(source, read_request([], interleave_block_length=7))
    protocol.warn_unhonoured(source, read_request([], interleave_block_length=8))
    protocol.warn_unhonoured(source, read_request([], interleave_block_length=1))  # honoured
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
    assert protocol.knob_is_set(config, knob) is is_set


def test_parallelism_arguments():
    assert protocol.parallel_calls(1) is None  # the sequential op
    assert protocol.parallel_calls(AUTOTUNE) == AUTOTUNE
    assert protocol.parallel_calls(6) == 6
    assert protocol.deterministic_arg(PipelineConfig(batch_size=8)) is None
    assert protocol.deterministic_arg(PipelineConfig(batch_size=8, deterministic=False)) is False


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
    ds = protocol.interleave_files(
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
        return [p.decode() for p in protocol.file_order(files, count, request).as_numpy_iterator()]

    assert order(read_request(paths)) == paths
    assert order(read_request(paths, shuffle_files=True), count=1) == paths
    shuffled = order(read_request(paths, shuffle_files=True, shuffle_seed=3))
    assert shuffled != paths and sorted(shuffled) == sorted(paths)
    assert order(read_request(paths, shuffle_files=True, shuffle_seed=3)) == shuffled


def test_shard_files_gives_each_pipeline_whole_files():
    files = [f"f{i}" for i in range(5)]
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    assert protocol.shard_files(files, context, "TFRecord") == ["f1", "f3"]
    assert protocol.shard_files(files, None, "TFRecord") == files
    many = tf.distribute.InputContext(num_input_pipelines=6, input_pipeline_id=0)
    with pytest.raises(SourceError, match=r"6 input pipelines but only 5 TFRecord file\(s\)"):
        protocol.shard_files(files, many, "TFRecord")


def test_single_core_options():
    opts = protocol.single_core_options()
    assert opts.threading.private_threadpool_size == 1
    assert opts.threading.max_intra_op_parallelism == 1
    assert opts.autotune.enabled is False


@pytest.mark.parametrize(
    ("buffer", "batch", "window"), [(1, 32, 64), (64, 32, 64), (65, 32, 96), (1000, 256, 1024)]
)
def test_a_shuffle_window_is_the_buffer_in_whole_batches_two_at_least(buffer, batch, window):
    assert _row_shuffle.shuffle_window(buffer, batch) == window


def _groups(sizes: list[int]) -> tf.data.Dataset:
    """Batches of consecutive rows of these sizes: ids, a vector of the id and a ragged
    list of the id repeated ``id % 3`` times, the vector's width unknown to tf.data."""
    rows = [(sum(sizes[:i]), n) for i, n in enumerate(sizes)]

    def batch(start: tf.Tensor, n: tf.Tensor) -> dict[str, tf.Tensor]:
        ids = tf.range(start, start + n)
        return {
            "id": ids,
            "vector": tf.reshape(tf.repeat(ids, 2), [-1, 2]),
            "list": tf.RaggedTensor.from_row_lengths(tf.repeat(ids, ids % 3), ids % 3),
        }

    ds = tf.data.Dataset.from_tensor_slices(tuple(map(list, zip(*rows)))).map(batch)
    return ds.map(lambda b: {**b, "vector": tf.ensure_shape(b["vector"], [None, None])})


def test_row_windows_permute_each_window_and_join_a_short_one_to_the_window_before():
    config = PipelineConfig(batch_size=10, shuffle_buffer=5, shuffle_seed=4)
    # windows of 20 rows; the groups of 7 (a file's tail) and of 5 (the end) are short
    out = _row_shuffle.shuffle_row_windows(
        _groups([20, 7, 20, 20, 5]), window_rows=20, config=config
    )
    windows = [{k: v.numpy() if k != "list" else v.to_list() for k, v in w.items()} for w in out]
    assert [sorted(w["id"].tolist()) for w in windows] == [
        list(range(0, 27)),  # 20 rows and the 7 after them
        list(range(27, 47)),
        list(range(47, 72)),  # 20 rows and the last 5
    ]
    for w in windows:
        assert w["id"].tolist() != sorted(w["id"].tolist())  # permuted
        assert (w["vector"] == w["id"][:, None]).all()  # every column moves with its row
        assert w["list"] == [[i] * (i % 3) for i in w["id"].tolist()]
    again = _row_shuffle.shuffle_row_windows(
        _groups([20, 7, 20, 20, 5]), window_rows=20, config=config
    )
    assert [w["id"].numpy().tolist() for w in again] == [w["id"].tolist() for w in windows]


def test_row_windows_refuse_what_they_cannot_permute():
    sparse = tf.data.Dataset.from_tensors({"ids": tf.sparse.from_dense([[1, 0], [0, 2]])})
    config = PipelineConfig(batch_size=2, shuffle_buffer=4)
    with pytest.raises(
        ConfigError, match=r"shuffle_buffer=4: the batches' ids is SparseTensorSpec"
    ):
        _row_shuffle.shuffle_row_windows(sparse, window_rows=4, config=config)
