"""`tfinput._src.measurement.windows`: the `WindowPlan`, one timed window (`measure_window`), a
fresh-iterator window (`run_window`) and back-to-back windows (`consecutive_windows`)."""

from __future__ import annotations

import inspect
import itertools

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from tests.tfinput.measurement.conftest import FakeClock, FakeCpu, batches
from tfinput import steps
from tfinput._src.measurement import compare
from tfinput._src.measurement.target import MeasureOptions
from tfinput._src.measurement.windows import (
    BENCH_PLAN,
    CAPTURE_PLAN,
    DEFAULT_WINDOW_SECONDS,
    TUNER_PLAN,
    Window,
    WindowPlan,
    batch_rows,
    close_iterator,
    consecutive_windows,
    measure_window,
    run_window,
    warm_up,
)
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, DataError


def test_measure_window_counts_time_wait_and_latency():
    clock = FakeClock()
    step = steps.simulated_step(0.02, sleep=clock.sleep)
    it = batches(clock, rows=4, produce_s=0.01)
    w = measure_window(
        it, batches=10, step=step, clock=clock, cpu_clock=FakeCpu(clock, 1.5), rss=lambda: 7
    )
    assert (w.batches, w.examples) == (10, 40)
    assert w.seconds == pytest.approx(0.3)
    assert w.examples_per_s == pytest.approx(40 / 0.3)
    assert w.wait_seconds == pytest.approx(0.1)
    assert w.batch_seconds == pytest.approx((0.03,) * 10)
    assert w.cores_busy == pytest.approx(1.5)
    assert w.peak_rss_bytes == 7


def test_measure_window_stops_when_data_ends_and_needs_one_batch():
    clock = FakeClock()
    w = measure_window(
        batches(clock, rows=3, produce_s=0.5, count=2),
        batches=10,
        clock=clock,
        cpu_clock=clock,
        rss=lambda: 0,
    )
    assert (w.batches, w.examples, w.seconds) == (2, 6, pytest.approx(1.0))
    with pytest.raises(DataError, match="no batch"):
        measure_window(iter([]), batches=3, clock=clock, cpu_clock=clock, rss=lambda: 0)


def test_measure_window_sync_is_timed_in_the_window():
    """An asynchronous step blocks in ``sync`` before the window's end is taken."""
    clock = FakeClock()
    it = batches(clock, rows=4, produce_s=0.01)
    w = measure_window(
        it, batches=3, clock=clock, cpu_clock=FakeCpu(clock, 1.0), sync=lambda: clock.sleep(0.5)
    )
    assert w.seconds == pytest.approx(0.53)
    assert w.batch_seconds[-1] == pytest.approx(0.51)
    assert w.wait_seconds == pytest.approx(0.03)


def test_measure_window_counts_fixed_batch_size_or_with_count():
    clock = FakeClock()

    def window(**kw):
        it = batches(clock, rows=3, produce_s=0.1)
        return measure_window(it, batches=2, clock=clock, cpu_clock=clock, rss=lambda: 0, **kw)

    assert window().examples == 6  # batch_rows: 3 per batch
    assert window(batch_size=10).examples == 20  # drop_remainder: the config's size
    assert window(count=lambda b: 5).examples == 10


@pytest.mark.parametrize(
    ("batch", "rows"),
    [
        ((({"dense": {}, "ids": {"a": np.zeros((5, 3))}}), np.zeros(5)), 5),
        ({"x/values": np.zeros(2), "y": np.zeros(9)}, 2),
        (pa.record_batch({"a": [1, 2, 3]}), 3),
        ({"dense": {}, "ids": {}}, -1),
    ],
    ids=["pipeline-output", "first-leaf", "record-batch", "no-leaf"],
)
def test_batch_rows(batch, rows):
    assert batch_rows(batch) == rows


@pytest.mark.parametrize(
    ("batch", "rows"),
    [
        (tf.zeros([7, 2]), 7),
        (pa.table({"a": [1, 2]}), 2),
        ([np.float32(1.0), np.zeros(4)], 4),
        (np.float32(1.0), -1),
    ],
    ids=["tensor", "arrow-table", "skips-scalar-leaf", "scalar"],
)
def test_batch_rows_of_tensors_tables_and_scalars(batch, rows):
    assert batch_rows(batch) == rows


def test_run_window_uses_a_fresh_iterator_and_excludes_warmup():
    clock = FakeClock()
    made = []

    def make():
        made.append(1)

        def gen():
            clock.sleep(5.0)  # slow start: opening files, filling buffers
            yield from batches(clock, rows=2, produce_s=0.1)

        return gen()

    for _ in range(2):
        w = run_window(
            make, warmup_batches=1, window_batches=4, clock=clock, cpu_clock=clock, rss=lambda: 0
        )
        assert w.seconds == pytest.approx(0.4)  # the 5 s start-up is not in the window
    assert len(made) == 2
    with pytest.raises(DataError, match="ended after 2 warm-up"):
        run_window(
            lambda: batches(clock, rows=1, produce_s=0, count=2),
            warmup_batches=3,
            window_batches=1,
            clock=clock,
        )


def test_run_window_hands_warmup_batches_to_the_step_and_closes_the_iterator():
    clock = FakeClock()
    seen: list[int] = []
    gen = batches(clock, rows=2, produce_s=0.1)
    w = run_window(
        lambda: gen,
        warmup_batches=3,
        window_batches=2,
        step=lambda b: seen.append(len(b["label"])),
        clock=clock,
        cpu_clock=clock,
        rss=lambda: 0,
    )
    assert seen == [2] * 5 and w.batches == 2  # warm-up batches go through the step too
    with pytest.raises(StopIteration):
        next(gen)  # closed


def test_warm_up_and_close_iterator():
    clock = FakeClock()
    seen: list[int] = []
    gen = batches(clock, rows=1, produce_s=0, count=2)
    assert warm_up(gen, 5, lambda b: seen.append(1)) == 2  # the data ended after 2
    assert seen == [1, 1]
    assert warm_up(iter(range(9)), 3, None) == 3
    gen = batches(clock, rows=1, produce_s=0)
    next(gen)
    close_iterator(gen)
    assert list(gen) == []
    close_iterator(iter([1]))  # nothing to close: no error


def _consecutive(clock, plan, **kw):
    return consecutive_windows(
        batches(clock, rows=4, produce_s=0.1, count=kw.pop("count", None)),
        plan,
        step=None,
        batch_size=None,
        ran_out=lambda done: DataError(f"only {done}"),
        clock=clock,
        cpu_clock=clock,
        **kw,
    )


def test_consecutive_windows_continue_one_iterator_after_one_warmup():
    clock = FakeClock()
    plan = WindowPlan(warmup_batches=2, windows=3, window_batches=5)
    ws = _consecutive(clock, plan)
    assert [w.round for w in ws] == [0, 1, 2]
    assert [w.examples for w in ws] == [20, 20, 20]
    assert all(w.seconds == pytest.approx(0.5) for w in ws)
    assert clock.now == pytest.approx(100.0 + 0.1 * (2 + 15))  # one warm-up, not one per window


def test_consecutive_windows_stop_when_report_says_so_and_raise_when_data_runs_out():
    clock = FakeClock()
    plan = WindowPlan(warmup_batches=1, windows=4, window_batches=2)
    seen: list[tuple[int, float]] = []
    ws = _consecutive(clock, plan, report=lambda i, rate: seen.append((i, rate)) or i == 1)
    assert len(ws) == 2 and [i for i, _ in seen] == [0, 1]
    assert seen[0][1] == pytest.approx(40.0)  # 8 examples in 0.2 s
    with pytest.raises(DataError, match="only 1"):
        _consecutive(clock, WindowPlan(warmup_batches=3, windows=1), count=1)


def test_window_to_dict_and_rates_of_an_instant_window():
    w = Window(
        name="a",
        round=2,
        batches=2,
        examples=10,
        seconds=0.1234567,
        cpu_seconds=0.05,
        batch_seconds=(0.06, 0.06),
        wait_seconds=None,
        peak_rss_bytes=3 * 2**20,
    )
    assert w.to_dict() == {
        "round": 2,
        "batches": 2,
        "examples": 10,
        "seconds": 0.123457,
        "examples_per_s": 81.0,
        "cpu_seconds": 0.05,
        "wait_seconds": None,
        "peak_rss_mb": 3.0,
    }
    instant = Window(
        batches=1, examples=1, seconds=0.0, cpu_seconds=0.0, batch_seconds=(0.0,),
        wait_seconds=0.0,
    )  # fmt: skip
    assert instant.examples_per_s == float("inf") and instant.cores_busy == 0.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("windows", 0),
        ("window_batches", 0),
        ("warmup_batches", -1),
        ("windows", True),
        ("window_batches", 2.0),
    ],
    ids=["no-windows", "empty-window", "negative-warmup", "bool", "float"],
)
def test_window_plan_names_the_bad_field(field, value):
    with pytest.raises(ConfigError, match=rf"WindowPlan\.{field}: expected an int"):
        WindowPlan(**{field: value})


def test_window_plan_checked_names_the_caller():
    plan = WindowPlan.checked("benchmark", warmup_batches=0, windows=2, window_batches=3)
    assert plan == WindowPlan(warmup_batches=0, windows=2, window_batches=3)
    with pytest.raises(
        ConfigError, match=r"^benchmark: window_batches must be an int >= 1, got 0$"
    ):
        WindowPlan.checked("benchmark", warmup_batches=0, windows=2, window_batches=0)


def test_window_plan_carries_every_default():
    from profiles import CaptureConfig
    from tuners._objective import measure as measure_trial

    keys = ("warmup_batches", "windows", "window_batches", "window_seconds")
    assert inspect.signature(measure_trial).parameters["plan"].default == TUNER_PLAN

    ticks = itertools.count()
    measured = compare.measure(
        lambda config: itertools.repeat(np.zeros((4, 1))),
        {"only": PipelineConfig()},
        measurement=MeasureOptions(clock=lambda: float(next(ticks))),
    ).method
    measured_plan = WindowPlan(**{k: measured[k] for k in keys})
    seconds = DEFAULT_WINDOW_SECONDS
    assert measured_plan == BENCH_PLAN
    assert WindowPlan(warmup_batches=8, window_seconds=seconds) == BENCH_PLAN
    assert WindowPlan(window_seconds=seconds) == TUNER_PLAN
    assert CaptureConfig().window_plan == CAPTURE_PLAN
    assert TUNER_PLAN.to_dict() == {
        "warmup_batches": 5,
        "windows": 5,
        "window_batches": 20,
        "window_seconds": seconds,
    }
    assert 0.5 <= seconds <= 1.0


# ------------------------------------------------------------ windows sized by time
def test_timed_plan_sizes_windows_from_the_warm_up_rate_without_its_first_batch():
    """A 0.5 s target at 0.1 s a batch: 5 batches a window, the 3 s first batch (the
    pipeline starting) left out of the rate; ``window_batches`` is the least."""
    clock = FakeClock()

    def slow_start():
        clock.sleep(3.0)
        yield from batches(clock, rows=4, produce_s=0.1)

    plan = WindowPlan(warmup_batches=3, windows=2, window_batches=1, window_seconds=0.5)
    ws = _consecutive_of(clock, slow_start(), plan)
    assert [w.batches for w in ws] == [5, 5]
    assert all(w.seconds == pytest.approx(0.5) for w in ws)
    least = WindowPlan(warmup_batches=3, windows=1, window_batches=8, window_seconds=0.5)
    assert [w.batches for w in _consecutive(clock, least)] == [8]


def test_timed_window_goes_on_until_the_target_when_the_pipeline_slows_down():
    """Sized at 0.1 s a batch (5 batches), the pipeline then slows to 0.2 s: the window
    goes on until it lasts the target, never shorter."""
    clock = FakeClock()
    speeds = itertools.chain([0.1] * 3, itertools.repeat(0.05))

    def batches_at():
        while True:
            clock.sleep(next(speeds))
            yield {"label": np.zeros(2)}

    plan = WindowPlan(warmup_batches=3, windows=1, window_batches=1, window_seconds=0.5)
    (w,) = _consecutive_of(clock, batches_at(), plan)
    assert w.batches == 10 and w.seconds == pytest.approx(0.5)  # 5 from the rate, 5 more
    w = measure_window(
        batches(clock, rows=1, produce_s=0.1),
        batches=2,
        min_seconds=1.0,
        clock=clock,
        cpu_clock=clock,
        rss=lambda: 0,
    )
    assert (w.batches, w.seconds) == (10, pytest.approx(1.0))


def test_run_window_with_a_target_sizes_the_fresh_iterators_window():
    clock = FakeClock()
    w = run_window(
        lambda: batches(clock, rows=2, produce_s=0.25),
        warmup_batches=3,
        window_batches=1,
        window_seconds=1.0,
        clock=clock,
        cpu_clock=clock,
        rss=lambda: 0,
    )
    assert (w.batches, w.examples, w.seconds) == (4, 8, pytest.approx(1.0))
    with pytest.raises(DataError, match="ended after 0 warm-up"):
        run_window(lambda: iter([]), warmup_batches=2, window_batches=1, window_seconds=1.0)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, (20, DEFAULT_WINDOW_SECONDS)),  # the plan's: sized by time
        ({"window_batches": 3}, (3, 0.0)),  # a count alone: that fixed count
        ({"window_batches": 3, "window_seconds": 0.2}, (3, 0.2)),  # both: the least of each
        ({"window_seconds": 0}, (20, 0.0)),
    ],
    ids=["default", "count-alone", "both", "no-target"],
)
def test_measure_options_window_rule(given, expected):
    from tfinput._src.measurement.target import MeasureOptions

    plan = MeasureOptions(**given).plan(TUNER_PLAN, what="tune")
    assert (plan.window_batches, plan.window_seconds) == expected
    assert plan.timed is (expected[1] > 0)


@pytest.mark.parametrize("value", [-0.5, float("nan"), float("inf"), "1", True])
def test_window_seconds_must_be_a_finite_number_at_least_zero(value):
    from tfinput._src.measurement.target import MeasureOptions

    with pytest.raises(ConfigError, match=r"^tune: window_seconds must be a finite number >= 0"):
        MeasureOptions(window_seconds=value).plan(TUNER_PLAN, what="tune")
    with pytest.raises(ConfigError, match=r"WindowPlan\.window_seconds: expected a finite"):
        WindowPlan(window_seconds=value)


def _consecutive_of(clock, iterator, plan):
    return consecutive_windows(
        iterator,
        plan,
        step=None,
        batch_size=None,
        ran_out=lambda done: DataError(f"only {done}"),
        clock=clock,
        cpu_clock=clock,
    )
