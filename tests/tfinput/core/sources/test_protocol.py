"""The source contract (`tfinput._src.core.sources.protocol`): every source satisfies `Source`,
declares what it can do, and gives its roofline stages."""

from __future__ import annotations

import pytest

from tests.helpers import SOURCE_KINDS
from tfinput._src.core.columnar.source import ColumnarSource
from tfinput._src.core.sources import (
    DatasetSource,
    FileChecks,
    ParquetSource,
    RooflineStages,
    Source,
    TFRecordSource,
)
from tfinput.config import PipelineConfig


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
    cross-file problem, one file with empty files skipped."""
    source = TFRecordSource(paths=tuple(small_tfrecord), empty_files="error")
    request = read_request(small_tfrecord, shuffle_buffer=10**9, interleave_block_length=3)
    assert Source.shuffle_buffer(source, None, request) == 10**9
    assert Source.unhonoured(source, request) == {}
    assert FileChecks.count_records(source, small_tfrecord[0]) is None
    assert FileChecks.explain_error(source, small_tfrecord[0], "bad") == "bad"
    assert source.problems_across_files(small_tfrecord, small_schema) == {}
    one = source.one_file(small_tfrecord[2])
    assert (one.paths, one.empty_files) == ((small_tfrecord[2],), "skip")
    assert source.check_files() == (list(small_tfrecord), [])
