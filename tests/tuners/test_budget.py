"""`tuners._budget`: the search's budget (`fit_budget`, `stopped_by_timeout`): trials of
time-sized windows (each sized from the warm-up's rate) within the user's ``timeout``."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import run_cli
from tests.tuners.conftest import FakeWorkload
from tfinput._src.measurement.windows import TUNER_PLAN, WindowPlan
from tfinput.config import AUTOTUNE, PipelineConfig
from tfinput.errors import ConfigError
from tuners._budget import MIN_WINDOWS, fit_budget
from tuners._objective import measure
from tuners._report import write_outputs
from tuners._space import SearchSpace

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
    # trials: 3 x (1 warm-up + 4 windows of 4); the confirmation: autotune and the two
    # best other configs x 2 windows, a fresh iterator of 1 warm-up batch + 4 each.
    assert w.steps == 3 * (1 + 4 * 4) + 3 * 2 * (1 + 4)
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
        "budget: 10 trials of 5 windows of at least 0.5 s need 25 s, more than the 16 s of "
        "the timeout left to the search: each trial measures 3 windows instead"
    )


def test_fit_budget_says_when_the_search_will_stop_at_the_timeout():
    plan = WindowPlan(windows=5, window_seconds=0.5)
    fitted, note = fit_budget(plan, n_trials=10, timeout=6.0)
    assert fitted.windows == MIN_WINDOWS and fitted.window_seconds == 0.5
    assert note == (
        "budget: 10 trials of 5 windows of at least 0.5 s need 25 s, more than the 6 s of "
        "the timeout left to the search: each trial measures 3 windows and the search stops "
        "at the timeout after about 4 of 10 trials (raise --timeout, or lower --n-trials or "
        "--window-seconds)"
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


def _within(result):
    """The run's own accounting: it ended within the timeout plus its longest window
    (a window with what ran before it since the previous one: build, warm-up)."""
    budget = result.budget
    assert budget["timeout_s"] is not None
    assert budget["elapsed_s"] <= budget["timeout_s"] + budget["longest_window_s"], budget
    return budget


def test_tune_fits_the_windows_to_the_timeout_and_notes_it():
    """4 trials of 4 windows of 0.25 s (4 s) in a timeout of 4.25 s that keeps 1.25 s
    for the confirmation (2 configs, 2 rounds, and the margin): 3 windows each."""
    w = FakeWorkload(lambda config: SLOW, wobble=0.0)
    result = w.tune(n_trials=4, windows=4, window_seconds=0.25, timeout=4.25)
    assert result.warnings[0] == (
        "budget: 4 trials of 4 windows of at least 0.25 s need 4 s, more than the 3 s of "
        "the timeout left to the search: each trial measures 3 windows instead"
    )
    assert "3 windows of at least 0.25 s" in result.method["trial"]
    rates = [t.user_attrs["window_rates"] for t in result.study.trials if t.value]
    assert rates and all(len(r) == 3 for r in rates[:-1]) and len(rates[-1]) <= 3
    _within(result)


#: A space of 40 configs: the search does not run out of new ones before the timeout.
WIDE = SearchSpace(choices={"map_parallelism": (1, 2, 3, 4), "prefetch": tuple(range(10))})


@pytest.mark.parametrize(
    ("timeout", "reserve"), [(30.0, "full"), (8.0, "least")], ids=["full", "least"]
)
def test_the_timeout_bounds_the_search_and_the_confirmation(timeout, reserve):
    """30 trials of 4 windows of 0.25 s cannot fit: the search stops when one more
    trial would eat into the time kept for the steps after it (all of them in 30 s;
    in 8 s, where they would take more than a quarter, the confirmation of autotune and
    the search's best), and the whole run ends within the timeout plus one window (the
    run's own accounting on the measurement clock)."""
    w = FakeWorkload(lambda c: SLOW * (0.5 if c.map_parallelism == 1 else 1.0), wobble=0.02)
    result = w.tune(n_trials=30, windows=4, window_seconds=0.25, space=WIDE, timeout=timeout)
    budget = _within(result)
    assert budget["reserve"] == reserve and budget["elapsed_s"] > timeout / 2
    counted = result.trials.get("complete", 0) + result.trials.get("pruned", 0)
    (note,) = [n for n in result.warnings if n.startswith("the search stopped after")]
    assert re.fullmatch(
        rf"the search stopped after {counted} of 30 trials to end within the timeout of "
        rf"{timeout:g} s, keeping about \d s for the confirmation",
        note,
    ), note
    assert result.confirmed and result.beats_autotune is not None  # confirmed: a verdict
    seconds = result.seconds
    spent = seconds["search"] + seconds["confirm"] + seconds["breakdown"]
    assert spent <= budget["elapsed_s"] + 0.5


def test_a_trial_still_measuring_when_the_search_time_is_up_stops_after_its_window():
    """Autotune measures fast; the heuristic ten times slower: the estimate from the
    first trial lets the second start, and it stops after the window that passed the
    search's share. Its value is the median of the windows it has."""
    w = FakeWorkload(lambda c: SLOW if c.map_parallelism == AUTOTUNE else SLOW / 10, wobble=0)
    result = w.tune(n_trials=30, windows=4, window_seconds=0.25, timeout=6.0)
    (cut,) = [t for t in result.study.trials if t.user_attrs.get("windows_cut_by_timeout")]
    done = re.fullmatch(r"([12]) of 3", cut.user_attrs["windows_cut_by_timeout"])
    assert cut.user_attrs["baseline"] == "heuristic" and done, cut.user_attrs
    assert cut.state.name == "COMPLETE" and len(cut.user_attrs["window_rates"]) == int(done[1])
    assert any(
        f"trial {cut.number} stopped before its last window to keep the timeout" in n
        for n in result.warnings
    ), result.warnings
    _within(result)


def test_a_timeout_with_no_room_to_confirm_gives_no_verdict_and_says_why():
    """Two trials of 3 windows of 1 s fit in 7 s, but not autotune and the best
    measured again in 3 rounds (about 8 s, with the margin): the confirmation is left
    out, and no verdict claims a comparison that did not happen."""
    w = FakeWorkload(lambda config: SLOW, wobble=0.0)
    result = w.tune(
        n_trials=30, windows=4, window_seconds=1.0, confirm_windows=3, breakdown=False, timeout=7.0
    )
    assert result.warnings[0].startswith(
        "budget: the timeout of 7 s leaves no time to confirm the search's best against "
        "autotune (3 rounds of 2 configs need about 8 s after a trial of about 3 s)"
    )
    assert result.confirmed == () and result.beats_autotune is None
    assert result.confirmation_error.startswith(
        "the confirmation was left out: autotune and heuristic in 3 rounds need about 8 s, "
        "and 1 s of the timeout of 7 s are left"
    )
    assert result.verdicts[0] == (
        f"no verdict: not confirmed against autotune ({result.confirmation_error})"
    )
    _within(result)


def test_a_search_that_completed_autotune_alone_claims_no_comparison():
    """One trial of 3 windows of 1 s fits in 4 s: autotune alone was measured, so there
    is nothing to confirm it against, and the verdict says so (it never says that no
    config beat it)."""
    w = FakeWorkload(lambda config: SLOW, wobble=0.0)
    result = w.tune(n_trials=3, windows=5, window_seconds=1.0, timeout=4.0)
    ran = [t for t in result.study.trials if t.state.is_finished()]
    assert [t.user_attrs.get("baseline") for t in ran] == ["autotune"]
    assert result.beats_autotune is None and result.confirmed == ()
    assert result.verdicts[0] == (
        "no verdict: not confirmed against autotune (autotune is the only config the "
        "search completed, so there is nothing to compare it with)"
    )
    assert "keep autotune" not in " ".join(result.verdicts)
    _within(result)


@pytest.mark.parametrize(
    ("timeout", "fields", "message"),
    [
        (0, {}, "timeout must be a positive number of seconds, got 0"),
        (-5.0, {}, "timeout must be a positive number of seconds, got -5.0"),
        (
            20.0,
            {"window_seconds": 1e9},
            "window_seconds 1e+09 does not fit in the timeout of 20 s: a trial measures at "
            "least 3 windows of at least 1e+09 s (3e+09 s)",
        ),
    ],
    ids=["zero", "negative", "window-beyond-the-timeout"],
)
def test_tune_refuses_a_timeout_that_holds_no_trial(timeout, fields, message):
    w = FakeWorkload(lambda config: SLOW, wobble=0.0)
    with pytest.raises(ConfigError) as raised:
        w.tune(n_trials=3, timeout=timeout, **fields)
    assert str(raised.value) == message
    assert w.steps == 0  # refused before any work


def test_the_search_says_when_the_timeout_stopped_it():
    """Trials of 9 batches of 1/1024 s on the measurement clock (no sleeping) and a
    timeout of 0.05 s: a few trials run, the search stops, and the result says so."""
    w = FakeWorkload(lambda config: RATE, wobble=0.0)
    result = w.tune(n_trials=30, window_batches=2, timeout=0.05)
    (note,) = [n for n in result.warnings if n.startswith("the search stopped")]
    match = re.fullmatch(
        r"the search stopped after (\d+) of 30 trials to end within the timeout of 0\.05 s"
        r"(, keeping about \d s for the confirmation)?",
        note,
    )
    assert match and 1 <= int(match[1]) < 30, note
    _within(result)
