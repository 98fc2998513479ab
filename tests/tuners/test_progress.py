"""`tuners._progress`: what `tuners.tune` says while it runs, from Python: a line per
trial on the ``tfinput.tuners`` logger, silenced by ``verbose=False`` or the logger's
level, and a note while a slow first trial runs."""

from __future__ import annotations

import logging
import re
import time

import pytest

from tests.tuners.conftest import FAST, FakeWorkload, options
from tfinput._src.measurement.windows import WindowPlan
from tuners import _progress
from tuners._progress import TrialProgress, trial_line
from tuners._study import tune

LOGGER = "tfinput.tuners"
LINE = re.compile(
    r"^trial (\d+) \[(\w+|trial \d+)\] (complete|pruned|fail) [\d,]+/s \((\d+)/(\d+)\) "
    r"best [\d,]+/s(?: ~[\d.]+ (?:s|min|h) left)?: (.+)$"
)


def _lines(caplog, level=logging.INFO):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


def test_tune_logs_a_line_per_trial_with_config_rate_best_and_time_left(
    pipeline, base, tmp_path, caplog
):
    """The smallest real tune of the tuner tests: its two baselines, input only. Nothing
    configures logging: `tune` makes its INFO records reach the handlers."""
    fast = options(cpu_count=2, lock_path=str(tmp_path / "lock"), **FAST)
    result = tune(pipeline, n_trials=2, base=base, options=fast)
    lines = [line for line in _lines(caplog) if line.startswith("trial ")]
    assert len(lines) == 2, lines
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    assert [(m[1], m[2], m[4], m[5]) for m in parsed] == [
        ("0", "autotune", "1", "2"),
        ("1", "heuristic", "2", "2"),
    ]
    assert "left" in lines[0] and "left" not in lines[1]  # after the first; none at the end
    assert "map_parallelism=" in parsed[1][6]  # the config searched
    best = max(t.value for t in result.study.trials if t.value is not None)
    assert f"best {best:,.0f}/s" in lines[1]
    assert any(line.startswith("confirming ") for line in _lines(caplog))
    assert logging.getLogger(LOGGER).level == logging.NOTSET  # restored after the call


def test_verbose_false_and_the_loggers_level_silence_the_lines(pipeline, base, tmp_path, caplog):
    fast = options(cpu_count=2, lock_path=str(tmp_path / "lock"), **FAST)
    kwargs = dict(n_trials=1, base=base, options=fast)
    tune(pipeline, verbose=False, **kwargs)
    assert _lines(caplog) == []
    logging.getLogger("tfinput").setLevel(logging.WARNING)
    try:
        tune(pipeline, **kwargs)
    finally:
        logging.getLogger("tfinput").setLevel(logging.NOTSET)
    assert _lines(caplog) == []


def test_a_plain_script_sees_the_lines_on_stderr(capsys, monkeypatch):
    """No handler anywhere (as in a script that never configures logging): the reporter
    adds a stderr handler for the call, and removes it after."""
    log = logging.getLogger(LOGGER)
    monkeypatch.setattr(log, "propagate", False)
    plan = WindowPlan(warmup_batches=1, windows=1, window_batches=1)
    info = {"number": 0, "state": "complete", "value": 1234.0, "done": 1, "best": 1234.0}
    with TrialProgress(total=3, plan=plan) as reporter:
        reporter("trial", {**info, "params": {"prefetch": 2}})
    assert not log.handlers
    err = capsys.readouterr().err
    assert re.search(r"^tune: trial 0 \[trial 0\] complete 1,234/s \(1/3\) best 1,234/s ", err)
    assert "left: prefetch=2" in err


def test_a_slow_first_trial_says_so_while_it_runs():
    """On the fake clock each step costs 30 s: the note comes at the third step of trial
    0, with the step time and what the trial and the search will take, before the
    trial's line."""
    work = FakeWorkload(lambda config: config.batch_size / 30.0, wobble=0.0)
    events = []

    def record(event, info):
        events.append((event, info))

    work.progress = record
    tune_trials = 2
    work.tune(n_trials=tune_trials, verbose=False, confirm_top=1, confirm_windows=1)
    names = [e for e, _ in events]
    assert names.count("slow_trial") == 1
    assert names.index("slow_trial") < names.index("trial")
    message = events[names.index("slow_trial")][1]["message"]
    steps = 1 + 4 * 2  # FAKE_PLAN: 1 warm-up batch, 4 windows of 2
    assert message == (
        f"trial 0 still running after 60 s: each step takes ~30 s, so a trial of {steps} "
        "steps (1 warm-up + 4 windows of 2) takes ~4.5 min and 2 trials ~9.0 min (plus "
        "the confirmation). Fewer windows/window_batches or n_trials, or a cheaper step, "
        "finish sooner"
    )
    first = events[names.index("trial")][1]
    assert first["eta_s"] == pytest.approx(270.0)  # one trial of 9 steps left


def test_the_watchdog_speaks_while_the_first_step_has_not_returned(caplog):
    """A first step that does not return (tracing, compiling, a hang): the watchdog
    thread logs the note while the step is still inside."""
    plan = WindowPlan(warmup_batches=1, windows=1, window_batches=1)
    reporter = TrialProgress(total=1, plan=plan, clock=time.monotonic, slow_after=0.1, poll=0.02)
    seen_inside = []

    def step(batch):
        end = time.monotonic() + 1.5
        while not reporter.warned and time.monotonic() < end:
            time.sleep(0.01)
        seen_inside.append(reporter.warned)

    with reporter:
        reporter.watch(step)(None)
    assert seen_inside == [True]
    (note,) = _lines(caplog, logging.WARNING)
    assert re.fullmatch(
        r"trial 0 still running after \d s: its first step has not returned yet "
        r"\(tracing and compiling, or a slow step\)",
        note,
    )


def test_the_cli_and_python_share_the_trial_line():
    info = {"number": 4, "state": "pruned", "value": 9876.5, "done": 5, "best": 12000.0}
    line = trial_line({**info, "eta_s": 150.0, "params": {"b": 1, "a": "x"}}, 30)
    assert line == "trial 4 [trial 4] pruned 9,876/s (5/30) best 12,000/s ~2.5 min left: a=x b=1"
    failed = {**info, "state": "fail", "value": None, "error": "OOM", "baseline": "current"}
    assert trial_line(failed, 30) == "trial 4 [current] fail OOM (5/30) best 12,000/s"
    twice = {**info, "state": "duplicate", "value": None, "duplicate_of": 2}
    assert trial_line(twice, 30) == (
        "trial 4 [trial 4] duplicate not measured: trial 2's config (5/30) best 12,000/s"
    )
    assert _progress.SLOW_FIRST_TRIAL_S == 60.0


#: 100-example batches at 102,400 examples/s: 1/1024 s each (exact in binary).
