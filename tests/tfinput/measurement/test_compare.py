"""`tfinput._src.measurement.compare`: configs measured side by side (`measure`), interleaved
window by window, with a real pipeline, a simulated step and steps that own the loop."""

from __future__ import annotations

import json

import pytest

import tfinput
from tests.tfinput.measurement.conftest import (
    FakeClock,
    batches,
    fake_measure,
    fake_target,
)
from tfinput import steps
from tfinput._src.measurement import compare
from tfinput._src.measurement.target import MeasureOptions
from tfinput._src.measurement.windows import Window
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError


def test_measure_interleaves_configs_and_computes_ratios():
    clock = FakeClock()
    order: list[int] = []
    configs = {
        "slow": PipelineConfig.naive(batch_size=10),
        "fast": PipelineConfig.naive(batch_size=10, map_parallelism=2),
    }
    seen = []
    result = fake_measure(
        fake_target(clock, order, {1: 0.02, 2: 0.01}),
        configs,
        clock,
        plan=(3, 5, 2),
        rss=2**20,
        cpu_count=4,
        progress=lambda done, total, w: seen.append((done, total, w.name, w.round)),
    )
    assert order == [1, 2, 1, 2, 1, 2]  # A B A B A B
    assert [s[2:] for s in seen] == [
        ("slow", 0),
        ("fast", 0),
        ("slow", 1),
        ("fast", 1),
        ("slow", 2),
        ("fast", 2),
    ]
    assert seen[-1][:2] == (6, 6)
    slow, fast = result.result("slow"), result.result("fast")
    assert result.baseline == "slow" and result.best is fast
    assert slow.median == pytest.approx(500.0) and fast.median == pytest.approx(1000.0)
    assert fast.ratio == pytest.approx(2.0) and fast.ratio_min == pytest.approx(2.0)
    assert slow.cv == pytest.approx(0.0) and fast.latency_p99_ms == pytest.approx(10.0)
    assert fast.utilisation == pytest.approx(0.25) and fast.peak_rss_mb == pytest.approx(1.0)
    assert [len(r.windows) for r in result.results] == [3, 3]


def test_measure_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="no configs"):
        compare.measure(lambda c: [], {})
    with pytest.raises(ConfigError, match="windows must be"):
        compare.measure(
            lambda c: [], {"a": PipelineConfig()}, measurement=MeasureOptions(windows=0)
        )
    with pytest.raises(ConfigError, match="baseline 'b'"):
        compare.measure(lambda c: [], {"a": PipelineConfig()}, baseline="b")


def test_measure_refuses_a_target_that_is_neither_pipeline_nor_callable():
    with pytest.raises(ConfigError, match=r"target must be a tfinput Pipeline or a .*got int"):
        compare.measure(42, {"a": PipelineConfig()})


def test_measure_a_real_pipeline_with_a_simulated_step(pipeline_of):
    clock = FakeClock()
    result = compare.measure(
        pipeline_of("parquet"),
        {"p": PipelineConfig(batch_size=64)},
        step=steps.simulated_step(0.5, sleep=clock.sleep),
        measurement=MeasureOptions(windows=2, window_batches=3, warmup_batches=1, clock=clock),
    )
    (r,) = result.results
    assert [w.examples for w in r.windows] == [192, 192]  # 1000 rows repeated: full batches
    assert r.median == pytest.approx(192 / 1.5)  # only the simulated device time passed
    assert result.method["step"]["kind"] == "simulated"
    assert result.method["pipeline"]["source"] == "parquet"


def _owning_step(clock: FakeClock, prepared: list[PipelineConfig]) -> steps.Step:
    """A step that drives the data itself and, like model.fit, cannot see input waits."""

    def run_windows(source, *, plan, batch_size, **kw):
        windows, window_batches = plan.windows, plan.window_batches
        it = iter(source)
        for _ in range(plan.warmup_batches):
            next(it)
        out = []
        for i in range(windows):
            t0 = clock()
            for _ in range(window_batches):
                next(it)
                clock.sleep(0.02)
            seconds = clock() - t0
            out.append(
                Window(
                    round=i,
                    batches=window_batches,
                    examples=window_batches * batch_size,
                    seconds=seconds,
                    cpu_seconds=seconds,
                    batch_seconds=(seconds / window_batches,) * window_batches,
                    wait_seconds=None,
                )
            )
        return out

    def prepare(config: PipelineConfig) -> steps.Step:
        prepared.append(config)
        return base

    base = steps.Step(kind="function", name="owner", fn=lambda b: None, run_windows=run_windows)
    return steps.Step(kind="function", name="owner", fn=lambda b: None, prepare_fn=prepare)


def test_measure_hands_the_data_to_a_loop_owning_step():
    clock = FakeClock()
    prepared: list[PipelineConfig] = []
    configs = {
        "a": PipelineConfig(batch_size=4, steps_per_execution=1),
        "b": PipelineConfig(batch_size=4, steps_per_execution=2),
    }
    result = fake_measure(
        lambda cfg: batches(clock, rows=4, produce_s=0.01),
        configs,
        clock,
        plan=(3, 5, 2),
        step=_owning_step(clock, prepared),
    )
    assert prepared == list(configs.values())  # once per config
    for r in result.results:
        assert len(r.windows) == 3 and r.stall is None
        assert [w.examples for w in r.windows] == [20, 20, 20]
        assert r.median == pytest.approx(20 / 0.15)
    data = json.loads(result.to_json())
    assert [r["stall_fraction"] for r in data["results"]] == [None, None]
    assert data["results"][0]["windows"][0]["wait_seconds"] is None


def test_measure_with_keras_fit_interleaves_steps_per_execution(small_tfrecord, small_schema):
    from tfinput import models

    # Without XLA: each steps_per_execution retraces the train function, and an XLA
    # compile of each would cost seconds without changing what is measured here.
    model = models.ranking_model(small_schema, jit_compile=False)
    configs = {
        "k1": PipelineConfig(batch_size=32, steps_per_execution=1),
        "k2": PipelineConfig(batch_size=32, steps_per_execution=2),
    }
    result = compare.measure(
        tfinput.tfrecord(small_tfrecord, small_schema),
        configs,
        step=steps.keras_fit_step(model),
        measurement=MeasureOptions(windows=1, window_batches=2, warmup_batches=1),
    )
    assert [r.name for r in result.results] == ["k1", "k2"]
    for r in result.results:
        assert r.stall is None and r.median > 0
        assert r.windows[0].examples == 64
    assert result.method["step"]["kind"] == "keras_fit"
    per_config = result.method["step_per_config"]
    assert [per_config[n]["steps_per_execution"] for n in ("k1", "k2")] == [1, 2]
    assert result.machine["keras_backend"] == "tensorflow"
    assert model.steps_per_execution == 2
