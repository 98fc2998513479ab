"""The tuner's windows sized by time: batches per window from the warm-up's rate, the
target recorded in result.json, and the search kept within the user's timeout."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.helpers import run_cli
from tests.tuners.conftest import FakeWorkload
from tfinput.config import PipelineConfig
from tfinput.measure.windows import TUNER_PLAN, WindowPlan
from tuners import measure
from tuners._budget import MIN_WINDOWS, fit_budget, stopped_by_timeout
from tuners._report import write_outputs

#: 100-example batches at 102,400 examples/s: 1/1024 s each (exact in binary).
RATE = 102_400.0
#: 1,600 examples/s: 1/16 s a batch, 4 batches in a 0.25 s window.
SLOW = 1_600.0


def test_measure_sizes_each_window_from_the_warm_up_rate():
    """A 0.25 s target at 1,024 batches/s: 256 batches a window, each exactly 0.25 s;
    ``window_batches`` is only the least."""
    w = FakeWorkload(lambda config: RATE, wobble=0.0)
    config = PipelineConfig(batch_size=100)
    m = measure(
        w,
        config,
        w.step,
        plan=WindowPlan(windows=2, warmup_batches=3, window_seconds=0.25),
        clock=w.clock,
    )
    assert w.steps == 3 + 2 * 256
    assert m.rates == pytest.approx((RATE, RATE))
    w.steps = 0
    measure(
        w,
        config,
        w.step,
        plan=WindowPlan(windows=2, window_batches=4, warmup_batches=3),
        clock=w.clock,
    )
    assert w.steps == 3 + 2 * 4  # a count alone: the fixed count of the old rule


def test_tune_records_the_target_and_sizes_trials_and_confirmation_by_it(tmp_path):
    w = FakeWorkload(lambda config: SLOW, wobble=0.0)
    result = w.tune(n_trials=3, window_seconds=0.25, window_batches=2)
    assert result.method["window_seconds"] == 0.25
    assert "windows of at least 0.25 s and 2 batches" in result.method["trial"]
    assert "windows each of at least 0.25 s" in result.method["confirmation"]
    trials = [t for t in result.study.trials if t.user_attrs.get("window_rates")]
    assert trials and all(len(t.user_attrs["window_rates"]) == 4 for t in trials)
    # trials: 3 x (1 warm-up + 4 windows of 4); the confirmation: 2 configs (the best
    # two are one config, so autotune and it) x 2 windows, a fresh iterator of 1 warm-up
    # batch + 4 each.
    assert w.steps == 3 * (1 + 4 * 4) + 2 * 2 * (1 + 4)
    paths = write_outputs(result, tmp_path, html=False)
    saved = json.loads(paths["result"].read_text())
    assert saved["method"]["window_seconds"] == 0.25


def test_cli_window_seconds_is_recorded_in_result_json(cli_args, capsys, tmp_path):
    out_dir = tmp_path / "out"
    code, _, err = run_cli(
        capsys,
        "tune",
        *cli_args,
        *("--n-trials", "2", "--window-seconds", "0.02", "--no-breakdown", "--out", out_dir),
    )
    assert code == 0, err
    method = json.loads((out_dir / "result.json").read_text())["method"]
    assert (method["window_seconds"], method["window_batches"]) == (0.02, 2)
    assert "2 windows of at least 0.02 s and 2 batches" in method["trial"]


def test_cli_window_batches_alone_keeps_a_fixed_count(cli_args, capsys, tmp_path):
    """The test suite's ``--window-batches 2`` (without ``--window-seconds``) asks for
    that fixed count: tests stay as short as before."""
    out_dir = tmp_path / "out"
    code, _, err = run_cli(
        capsys, "tune", *cli_args, *("--n-trials", "1", "--no-breakdown", "--out", out_dir)
    )
    assert code == 0, err
    method = json.loads((out_dir / "result.json").read_text())["method"]
    assert method["window_seconds"] == 0.0 and "2 windows of 2 batches" in method["trial"]


# ---------------------------------------------------------------- the budget
def test_fit_budget_gives_fewer_windows_of_the_same_length():
    plan = WindowPlan(windows=5, window_seconds=0.5)
    fitted, note = fit_budget(plan, n_trials=10, timeout=16.0)
    assert fitted == WindowPlan(windows=3, window_seconds=0.5)
    assert note == (
        "budget: 10 trials of 5 windows of at least 0.5 s need 25 s, more than the timeout "
        "of 16 s: each trial measures 3 windows instead"
    )


def test_fit_budget_says_when_the_search_will_stop_at_the_timeout():
    plan = WindowPlan(windows=5, window_seconds=0.5)
    fitted, note = fit_budget(plan, n_trials=10, timeout=6.0)
    assert fitted.windows == MIN_WINDOWS and fitted.window_seconds == 0.5
    assert note == (
        "budget: 10 trials of 5 windows of at least 0.5 s need 25 s, more than the timeout "
        "of 6 s: each trial measures 3 windows and the search stops at the timeout after "
        "about 4 of 10 trials (raise --timeout, or lower --n-trials or --window-seconds)"
    )


@pytest.mark.parametrize(
    ("plan", "timeout"),
    [
        (TUNER_PLAN, None),  # no timeout: nothing to fit
        (TUNER_PLAN, 1000.0),  # it fits
        (WindowPlan(windows=5, window_batches=2), 0.1),  # a fixed count: length unknown
        (WindowPlan(windows=2, window_seconds=1.0), 1.0),  # never more windows than asked
    ],
    ids=["no-timeout", "fits", "count-plan", "two-windows"],
)
def test_fit_budget_leaves_other_plans_as_they_are(plan, timeout):
    fitted, note = fit_budget(plan, n_trials=4, timeout=timeout)
    assert fitted.windows == plan.windows and fitted.window_seconds == plan.window_seconds
    if plan.windows < MIN_WINDOWS and timeout is not None:
        assert "the search stops at the timeout" in note
    else:
        assert note is None


def test_tune_fits_the_windows_to_the_timeout_and_notes_it():
    w = FakeWorkload(lambda config: SLOW, wobble=0.0)
    result = w.tune(n_trials=4, windows=4, window_seconds=0.25, timeout=3.0)
    assert result.warnings[0] == (
        "budget: 4 trials of 4 windows of at least 0.25 s need 4 s, more than the timeout "
        "of 3 s: each trial measures 3 windows instead"
    )
    assert "3 windows of at least 0.25 s" in result.method["trial"]
    rates = [t.user_attrs["window_rates"] for t in result.study.trials]
    assert rates and all(len(r) == 3 for r in rates)


def test_tune_says_when_the_timeout_stopped_the_search():
    """Trials of 9 steps of 5 ms (real time) and a 10 ms timeout: the first trial runs,
    the search stops after it, and the result says so."""
    w = FakeWorkload(lambda config: RATE, wobble=0.0)

    def step(batch):
        time.sleep(0.005)
        w.step(batch)

    result = w.tune(n_trials=6, window_batches=2, timeout=0.01, step=step)
    (note,) = [n for n in result.warnings if n.startswith("the search stopped at the timeout")]
    match = re.fullmatch(
        r"the search stopped at the timeout of 0\.01 s after (\d) of 6 trials", note
    )
    assert match and 1 <= int(match[1]) < 6
    assert stopped_by_timeout(counted=6, n_trials=6, timeout=1.0) is None
    assert stopped_by_timeout(counted=2, n_trials=6, timeout=None) is None
