"""`tuners._objective`: one config's measurement (`measure`, `Measurement`), the tuner's
objective, with and without Optuna."""

from __future__ import annotations

import itertools

import pytest

from tfinput import steps
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, DataError
from tfinput.measure.windows import WindowPlan
from tuners._objective import Measurement, measure


def test_measure_windows_and_early_stop(pipeline, base):
    m = measure(
        pipeline,
        base,
        steps.input_only(),
        plan=WindowPlan(windows=3, window_batches=2, warmup_batches=1),
    )
    assert len(m.rates) == 3 and m.median > 0 and not m.stopped_early
    assert set(m.to_attrs()) >= {"median_examples_per_s", "cv", "window_rates"}
    stopped = measure(
        pipeline,
        base,
        plan=WindowPlan(windows=3, window_batches=2, warmup_batches=1),
        report=lambda i, rate: True,
    )
    assert stopped.stopped_early and len(stopped.rates) == 1


def test_measure_with_an_injected_clock(pipeline, base):
    ticks = iter(range(10_000))
    m = measure(
        pipeline,
        base,
        plan=WindowPlan(windows=2, window_batches=3, warmup_batches=1),
        clock=lambda: float(next(ticks)),
        cpu_clock=lambda: 0.0,
    )
    # each batch takes two ticks (fetch, then step end): 3 batches x 50 examples / 6 s
    assert m.rates == (25.0, 25.0)


def _ticking_source(config):
    """``config -> batches`` of ``batch_size`` rows, endless (a callable pipeline)."""
    return itertools.repeat({"rows": config.batch_size})


def test_measure_a_callable_source_reports_each_window_before_the_last():
    ticks = iter(range(10_000))
    reported = []

    def report(index, rate):
        reported.append((index, rate))
        return False

    config = PipelineConfig(batch_size=10, drop_remainder=True)
    m = measure(
        _ticking_source,
        config,
        plan=WindowPlan(windows=3, window_batches=2, warmup_batches=1),
        report=report,
        clock=lambda: float(next(ticks)),
        cpu_clock=lambda: 0.0,
    )
    # 2 batches x 10 rows per window, two ticks per batch: 5 examples/s
    assert m.rates == (5.0, 5.0, 5.0) and m.config == config
    # every window but the last is reported (nothing is left to prune after it)
    assert [i for i, _ in reported] == [0, 1] and all(r == 5.0 for _, r in reported)
    assert m.cores_busy == 0.0 and not m.stopped_early


def test_measurement_summary():
    m = Measurement(
        config=PipelineConfig(batch_size=50),
        rates=(100.0, 300.0, 200.0),
        stall=0.25,
        cores_busy=1.5,
    )
    assert m.median == 200.0 and m.spread == (100.0, 300.0)
    assert m.cv == pytest.approx(0.5)
    attrs = m.to_attrs()
    assert attrs["window_rates"] == [100.0, 300.0, 200.0]
    assert attrs["min_examples_per_s"] == 100.0 and attrs["max_examples_per_s"] == 300.0
    assert attrs["stall_fraction"] == 0.25 and attrs["cv"] == 0.5
    one = Measurement(config=PipelineConfig(), rates=(7.0,), stall=None, cores_busy=0.0)
    assert one.cv == 0.0 and one.to_attrs()["stall_fraction"] is None


def test_measure_data_too_short_for_the_warm_up():
    config = PipelineConfig(batch_size=10)
    with pytest.raises(DataError) as raised:
        measure(
            lambda c: [{"rows": 10}] * 2,
            config,
            plan=WindowPlan(windows=2, window_batches=2, warmup_batches=3),
        )
    message = str(raised.value)
    assert "the data ended after 2 warm-up batch(es)" in message
    assert "more than 3 batches of 10" in message


def test_measure_rejects_zero_windows():
    with pytest.raises(ConfigError, match="windows"):
        measure(_ticking_source, PipelineConfig(batch_size=10), plan=WindowPlan(windows=0))
