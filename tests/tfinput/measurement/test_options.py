"""`MeasureOptions`: the plan from a default, a settled plan handed on, the given clocks,
and bench's one way to take them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.tfinput.measurement.conftest import FakeClock
from tfinput import bench
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError
from tfinput.measure.options import MeasureOptions
from tfinput.measure.windows import BENCH_PLAN, DEFAULT_WINDOW_SECONDS, TUNER_PLAN, WindowPlan


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
