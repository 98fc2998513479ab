"""`tuners._trials`: reading a study's trials (which count, failures in a row, progress,
the best distinct configs, one JSON row each) and failures explained in one line."""

from __future__ import annotations

import datetime

import optuna
import pytest
import tensorflow as tf

from tfinput.config import PipelineConfig
from tfinput.errors import DataError
from tuners._trials import (
    explain_failure,
    is_counted,
    state_counts,
    summarize_trials,
    top_configs,
    trailing_failures,
    trial_info,
)

State = optuna.trial.TrialState
T0 = datetime.datetime(2026, 1, 1, 12, 0)


@pytest.fixture
def study():
    """autotune (100/s), a failed config, a pruned trial, trial 3 (300/s), a trial whose
    worker died, and trial 5 with trial 3's config (200/s)."""
    s = optuna.create_study(direction="maximize")
    fast = PipelineConfig(batch_size=50, prefetch=4).to_dict()
    trials = [
        (State.COMPLETE, 100.0, {"baseline": "autotune", "config": PipelineConfig().to_dict()}),
        (State.FAIL, None, {"error": "out of memory (MemoryError)"}),
        (State.PRUNED, None, {}),
        (State.COMPLETE, 300.0, {"config": fast, "median_examples_per_s": 300.0, "cv": 0.1}),
        (State.FAIL, None, {"error": "worker h:1 died", "worker_died": True}),
        (State.COMPLETE, 200.0, {"config": fast}),
    ]
    for state, value, attrs in trials:
        s.add_trial(optuna.trial.create_trial(state=state, value=value, user_attrs=attrs))
    return s


def test_is_counted_and_state_counts(study):
    counted = [is_counted(t) for t in study.trials]
    assert counted == [True, True, True, True, False, True]  # a dead worker's: retried
    assert state_counts(study) == {"complete": 3, "fail": 2, "pruned": 1}


def test_top_configs_are_distinct_and_best_first(study):
    top = top_configs(study, 3)
    assert top == [
        ("trial 3", PipelineConfig(batch_size=50, prefetch=4)),
        ("trial 0", PipelineConfig()),  # autotune's trial is named by its number
    ]
    assert top_configs(study, 1) == top[:1]


def test_summarize_trials_one_row_per_trial(study):
    rows = summarize_trials(study)
    assert [r["state"] for r in rows] == [
        "complete",
        "fail",
        "pruned",
        "complete",
        "fail",
        "complete",
    ]
    assert rows[0]["baseline"] == "autotune" and rows[0]["value"] == 100.0
    assert rows[1]["error"] == "out of memory (MemoryError)"
    assert rows[3]["median"] == 300.0 and rows[3]["cv"] == 0.1 and rows[3]["min"] is None
    assert all(r["retried_from"] is None for r in rows)


def test_trial_info_is_the_progress_event(study):
    info = trial_info(study, study.trials[3], n_trials=10)
    assert info == {
        "number": 3,
        "state": "complete",
        "value": 300.0,
        "done": 4,  # complete and pruned
        "total": 10,
        "best": 300.0,
        "baseline": None,
        "error": None,
        "params": {},  # the trial's searched parameters (none in this study)
    }
    empty = optuna.create_study(direction="maximize")
    number = empty.ask().number
    first = trial_info(empty, empty.trials[number], 5)
    assert first["state"] == "running" and first["done"] == 0 and first["best"] is None


def test_trailing_failures_since_the_last_finished_trial():
    def trial(number, state, start, **attrs):
        t = optuna.trial.create_trial(state=state, value=1.0 if state == State.COMPLETE else None)
        t.number, t.datetime_start, t.user_attrs = number, start, attrs
        return t

    minute = datetime.timedelta(minutes=1)
    trials = [
        trial(0, State.FAIL, T0, error="old failure"),
        trial(1, State.COMPLETE, T0 + minute),
        trial(2, State.FAIL, T0 + 2 * minute, error="oom"),
        trial(3, State.FAIL, T0 + 3 * minute, error="died", worker_died=True),
        trial(4, State.FAIL, T0 + 4 * minute, error="oom again"),
    ]
    assert [t.number for t in trailing_failures(trials, since=T0)] == [2, 4]
    assert [t.number for t in trailing_failures(trials[:1], since=T0)] == [0]
    assert trailing_failures(trials[:1], since=T0 + minute) == []  # before this run


@pytest.mark.parametrize(
    "error, want",
    [
        (
            DataError("file a.tfrecord: feature 'x' expected int64"),
            "file a.tfrecord: feature 'x' expected int64",
        ),
        (MemoryError(), "out of memory (MemoryError)"),
        (
            tf.errors.ResourceExhaustedError(None, None, "OOM when allocating 800 rows"),
            "out of memory: OOM when allocating 800 rows",
        ),
        (RuntimeError("device lost"), "RuntimeError: device lost"),
    ],
    ids=["tfinput-error", "memory-error", "resource-exhausted", "other"],
)
def test_explain_failure(error, want):
    assert explain_failure(None, error) == want
