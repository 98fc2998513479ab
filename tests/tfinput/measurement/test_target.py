"""`tfinput._src.measurement.target`: what the bench, the tuner and the profiler measure, declared
once whatever form it came in, and `tfinput._src.measurement.target`: `MeasureOptions`, settled into a
window plan."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tfinput
from tests.tfinput.measurement.conftest import FakeClock
from tfinput import bench
from tfinput._src.core.config import Buildable
from tfinput._src.measurement.target import MeasureOptions, Target
from tfinput._src.measurement.windows import (
    BENCH_PLAN,
    DEFAULT_WINDOW_SECONDS,
    TUNER_PLAN,
    WindowPlan,
)
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError


def test_a_pipeline_is_built_repeated_and_answers_for_its_source(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    target = Target.of(pipeline)
    assert Target.of(target) is target
    assert target.pipeline is pipeline and target.source is pipeline.source
    assert target.schema is small_schema and target.service is None
    assert (target.layout, target.multi_hot_format) == ("per_feature", "dense")
    config = PipelineConfig(batch_size=500)
    batches = list(itertools.islice(iter(target.batches(config)), 5))  # 1,000 rows
    assert len(batches) == 5  # past the end: repeated
    assert target.packed_layout(config) is None
    packed = target.packed_layout(config.replace(layout="packed"))
    assert packed is not None and packed.to_dict() == pipeline.packed_layout().to_dict()
    schema = small_schema.with_towers(
        query=("user_id", "country", "history", "embedding"),
        candidate=("last_item", "tags", "price"),
        candidate_id="last_item",
    )
    towers = pipeline.with_schema(schema).with_towers()
    assert Target.of(towers).multi_hot_format is None  # nested batches: no packed layout


def test_a_callable_and_a_builder_are_targets_without_a_source():
    calls = []

    def batches(config):
        calls.append(config.batch_size)
        return iter(range(config.batch_size, 10**6))

    target = Target.of(batches)
    assert target.pipeline is None and target.source is None and target.schema is None
    assert (target.layout, target.multi_hot_format, target.service) == ("per_feature", None, None)
    config = PipelineConfig(batch_size=3)
    assert target.packed_layout(config.replace(layout="packed")) is None
    assert list(itertools.islice(target.one_batch_repeated(config), 3)) == [3, 3, 3]
    assert calls == [3]

    class Builder:
        def build(self, config):
            import tensorflow as tf

            return tf.data.Dataset.range(2).batch(config.batch_size)

    assert isinstance(Builder(), Buildable)
    built = Target.of(Builder())
    assert built.pipeline is None and built.label == "Builder"
    out = [b.numpy().tolist() for b in itertools.islice(iter(built.batches(config)), 3)]
    assert out == [[0, 1]] * 3


def test_anything_else_is_refused_naming_the_caller():
    with pytest.raises(ConfigError, match=r"bench: target must be a tfinput Pipeline .*got int"):
        Target.of(5, what="bench")


def test_rows_are_counted_from_the_files_without_building(pipeline_of):
    for kind in ("tfrecord", "parquet", "columnar"):
        rows = Target.of(pipeline_of(kind)).rows_up_to(10**9)
        assert rows == 1000, kind  # the shared rows, counted in full
    assert Target.of(pipeline_of("wrapped")).rows_up_to(10) is None
    assert Target.of(lambda config: iter(())).rows_up_to(10) is None


def test_measure_options_fill_the_plan_from_a_default_and_keep_given_clocks():
    options = MeasureOptions(windows=3)
    assert options.plan(BENCH_PLAN, what="x") == WindowPlan(
        warmup_batches=8, windows=3, window_batches=20, window_seconds=DEFAULT_WINDOW_SECONDS
    )
    with pytest.raises(ConfigError, match=r"^tune: windows must be an int >= 1, got 0$"):
        MeasureOptions(windows=0).plan(TUNER_PLAN, what="tune")
    clock = FakeClock()
    assert MeasureOptions(clock=clock).clocks() == {"clock": clock}
    assert MeasureOptions().clocks() == {}


def test_a_settled_plan_handed_on_is_the_plan_whatever_the_default():
    plan = WindowPlan(warmup_batches=1, windows=2, window_batches=3)
    options = MeasureOptions(windows=7, cpu_count=2).with_plan(plan)
    assert options.plan(BENCH_PLAN, what="x") == plan  # 0 s windows kept, not BENCH's
    assert options.cpu_count == 2


def test_bench_takes_the_measurement_object_and_no_loose_keyword():
    ticks = itertools.count()
    result = bench.measure(
        lambda config: itertools.repeat(np.zeros((4, 1))),
        {"only": PipelineConfig()},
        measurement=MeasureOptions(
            windows=2, window_batches=3, warmup_batches=1, clock=lambda: float(next(ticks))
        ),
    )
    assert (result.method["windows"], result.method["window_batches"]) == (2, 3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'windows'"):
        bench.measure(lambda config: [], {"only": PipelineConfig()}, windows=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'windows'"):
        bench.roofline(lambda config: [], windows=1)
