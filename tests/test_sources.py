"""The source contract: every source satisfies `tfinput.sources.Source`, declares what
it can do, and names the knobs it cannot honour."""

from __future__ import annotations

import logging

import pytest

import tfinput
from tests.test_pipeline import wrapped_dataset
from tfinput.config import PipelineConfig
from tfinput.errors import SourceError
from tfinput.sources import ColumnarSource, DatasetSource, ParquetSource, Source, TFRecordSource
from tfinput.sources.parquet import LIST_LENGTHS, LIST_VALUES

KINDS = ["tfrecord", "parquet", "columnar", "wrapped", "wrapped_batched"]


@pytest.fixture(params=KINDS)
def pipeline(request, small_schema, small_columns, small_tfrecord, small_parquet, small_columnar):
    if request.param == "tfrecord":
        return tfinput.tfrecord(small_tfrecord, small_schema)
    if request.param == "parquet":
        return tfinput.parquet(small_parquet, small_schema)
    if request.param == "columnar":
        return tfinput.columnar(small_columnar, small_schema)
    batched = request.param == "wrapped_batched"

    def make():
        ds = wrapped_dataset(small_columns, small_schema)
        return ds.ragged_batch(50) if batched else ds

    return tfinput.wrap(make, small_schema, batched=batched)


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
    "parquet": (True, "none"),
    "columnar": (False, "iterator"),
    "wrapped": (False, "dataset"),
    "wrapped_batched": (True, "dataset"),
}


def _kind(request):
    return request.node.callspec.params["pipeline"]


def test_sources_declare_batching_and_resumability(pipeline, request):
    batches_itself, resume = DECLARED[_kind(request)]
    assert pipeline.source.batches_itself is batches_itself
    assert pipeline.source.resume == resume


def test_classes_and_import_paths():
    from tfinput import columnar_records
    from tfinput.columnar_records.source import ColumnarSource as Old

    assert columnar_records.ColumnarSource is ColumnarSource is Old
    for cls in (TFRecordSource, ParquetSource, DatasetSource, ColumnarSource):
        assert Source in cls.__mro__  # explicit: the defaults of `Source` are inherited
    assert ParquetSource(paths=("x",), engine="tensorflow-io").batches_itself is False


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each knob warning is logged once per process; start every test with none logged,
    whatever other tests built before."""
    from tfinput.sources import skeleton

    monkeypatch.setattr(skeleton, "_WARNED", set())


def test_parquet_names_the_interleave_block_length_it_cannot_honour(
    small_parquet, small_schema, caplog
):
    pipeline = tfinput.parquet(small_parquet, small_schema)
    with caplog.at_level(logging.WARNING, logger="tfinput"):
        pipeline.build(PipelineConfig(batch_size=50, interleave_block_length=7))
    assert any(
        "interleave_block_length=7 has no effect on the parquet source" in m
        for m in _warnings(caplog)
    )


def test_honoured_knobs_do_not_warn(small_tfrecord, small_schema, caplog):
    config = PipelineConfig(batch_size=50, interleave_block_length=3, cache=True, shuffle_buffer=10)
    with caplog.at_level(logging.WARNING, logger="tfinput"):
        tfinput.tfrecord(small_tfrecord, small_schema).build(config)
    assert not [m for m in _warnings(caplog) if "has no effect" in m]


def test_wrapped_names_file_knobs_and_shuffling_of_batches(small_columns, small_schema, caplog):
    def make():
        return wrapped_dataset(small_columns, small_schema).ragged_batch(50)

    pipeline = tfinput.wrap(make, small_schema, batched=True).with_file_shuffling()
    config = PipelineConfig(batch_size=50, interleave_cycle_length=5, shuffle_buffer=123)
    with caplog.at_level(logging.WARNING, logger="tfinput"):
        pipeline.build(config)
    messages = "\n".join(_warnings(caplog))
    assert "interleave_cycle_length=5 has no effect on the dataset source" in messages
    assert "shuffle_buffer=123 has no effect on the dataset source" in messages
    assert "shuffle_files has no effect on the dataset source" in messages


def test_roofline_stages_come_from_the_source(pipeline, request):
    if _kind(request).startswith("wrapped"):
        pytest.skip("file sources only (see test_wrapped_source_has_no_roofline)")
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


def test_wrapped_source_has_no_roofline(small_columns, small_schema):
    pipeline = tfinput.wrap(lambda: wrapped_dataset(small_columns, small_schema), small_schema)
    with pytest.raises(SourceError, match="roofline: supported for tfrecord, parquet and columnar"):
        pipeline.source.roofline_stages([], small_schema, 100)


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
