"""`tuners._study`: `tune` end to end (baselines first, failures, resume, the packed
layout) and `baseline_configs`."""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import time

import numpy as np
import optuna
import pytest
import tensorflow as tf

import tfinput
from tests.tuners.conftest import (
    FAST,
    TUNED_TRIALS,
    FakeWorkload,
    assert_measured_once,
    options,
    rate_by_parallelism,
    tune_seeded,
)
from tfinput import steps
from tfinput.config import AUTOTUNE, PipelineConfig
from tfinput.errors import ConfigError, DataError
from tuners import _storage as tuners_storage
from tuners._options import MAX_CONSECUTIVE_FAILURES
from tuners._report import write_outputs
from tuners._result import StudyLockedError, TrialsFailedError, TuneInterrupted
from tuners._search import baseline_configs
from tuners._space import SearchSpace
from tuners._study import tune
from tuners._trials import is_counted, is_duplicate, summarize_trials


# ---------------------------------------------------------------- baselines
def test_baseline_configs_keep_the_batch_settings():
    base = PipelineConfig(batch_size=64, drop_remainder=True, shuffle_buffer=128, shuffle_seed=3)
    current = base.replace(map_parallelism=2)
    configs = baseline_configs(base, cpu_count=4, current=current)
    assert list(configs) == ["autotune", "heuristic", "current"]
    assert configs["current"] is current
    assert configs["autotune"].map_parallelism == AUTOTUNE
    assert configs["heuristic"] == PipelineConfig.heuristic(
        cpu_count=4,
        batch_size=64,
        drop_remainder=True,
        shuffle_buffer=128,
        shuffle_seed=3,
        layout="per_feature",
        steps_per_execution=1,
        device_prefetch=0,
    )
    for config in configs.values():
        assert (config.batch_size, config.shuffle_buffer, config.shuffle_seed) == (64, 128, 3)
    assert list(baseline_configs(base, cpu_count=4)) == ["autotune", "heuristic"]


def test_baselines_feed_per_feature_one_step_per_call_without_device_prefetch(base):
    packed = base.replace(
        layout="packed", steps_per_execution=8, device_prefetch=2, sparsecore_workers=4
    )
    for name, config in baseline_configs(packed, cpu_count=2).items():
        assert config.layout == "per_feature", name
        assert config.steps_per_execution == 1 and config.device_prefetch == 0, name
        assert config.sparsecore_workers == 2, name  # the default: no step reads it
    step = steps.Step(kind="simulated", name="sc", fn=lambda b: None, feeds_sparsecore=True)
    for name, config in baseline_configs(packed, cpu_count=2, step=step).items():
        assert config.sparsecore_workers == 0, name  # on the training thread
        assert config.batch_size == 50
    step = steps.Step(
        kind="keras_fit", name="keras_fit", fn=lambda batch: None, accepts_packed=True
    )
    space = SearchSpace.default(cpu_count=2, multi_hot_format="dense", step=step)
    params = space.params(baseline_configs(base, cpu_count=2)["autotune"])
    assert params["layout"] == "per_feature" and params["steps_per_execution"] == 1


# --------------------------------------------------------------------- tune
def test_baselines_come_first_and_result_is_confirmed(tuned):
    _, current, result = tuned
    trials = result.study.get_trials()
    assert [t.user_attrs.get("baseline") for t in trials[:3]] == [
        "autotune",
        "heuristic",
        "current",
    ]
    assert PipelineConfig.from_dict(trials[2].user_attrs["config"]) == current
    names = {c.name for c in result.confirmed}
    assert {"autotune", "current"} <= names
    assert result.confirmed[0].median == max(c.median for c in result.confirmed)
    auto = next(c for c in result.confirmed if c.name == "autotune")
    assert auto.ratio == 1.0
    assert result.fingerprint["cpu_count"] == 2 and result.fingerprint["tensorflow"]
    assert sum(result.trials.values()) == TUNED_TRIALS


@pytest.mark.parametrize(
    "count", ["n_trials", "windows", "window_batches", "max_consecutive_failures"]
)
def test_tune_counts_must_be_at_least_one(pipeline, count):
    with pytest.raises(ConfigError) as raised:
        if count == "n_trials":
            tune(pipeline, n_trials=0)
        else:
            tune(pipeline, options=options(**{count: 0}))
    assert str(raised.value) == f"{count} must be >= 1, got 0"


def test_a_packed_winner_saves_its_layout_next_to_the_config(pipeline, base, tmp_path):
    def step(batch):  # per-feature batches cost 40 ms more: packed wins clearly
        if not tfinput.layout.is_packed(batch[0]):
            time.sleep(0.04)

    result = tune(
        pipeline,
        step=dataclasses.replace(steps.function_step(step), accepts_packed=True),
        n_trials=3,
        base=base,
        space=SearchSpace(choices={"layout": ("packed",), "prefetch": (1, 2)}),
        options=options(cpu_count=2, lock_path=str(tmp_path / "lock"), **FAST),
    )
    paths = write_outputs(result, tmp_path / "out")
    config = PipelineConfig.from_json(paths["best_config"])
    layout = json.loads(paths["best_config"].read_text())["packed_layout"]
    assert config.layout == "packed"
    assert layout == pipeline.packed_layout().to_dict()
    assert json.loads(paths["result"].read_text())["packed_layout"] == layout
    features, _ = next(iter(pipeline.build(config)))
    views = tfinput.layout.unpack(features, tfinput.layout.PackedLayout.from_dict(layout))
    assert views["ids"]["history"].shape == (50, 5)


def test_failed_trials_are_recorded_and_the_study_goes_on(pipeline, tmp_path):
    # Batches of 800 rows run "out of memory" in the step, by construction (not by
    # timing): those trials fail with the reason and the study continues; only batch
    # 50 completes, so it wins whatever the load on the machine.
    from tfinput._src.measurement.windows import batch_rows

    def step(batch):
        if batch_rows(batch) == 800:
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating 800 rows")

    result = tune_seeded(
        pipeline,
        tmp_path,
        step=step,
        n_trials=6,
        base=PipelineConfig(batch_size=50, drop_remainder=True),
        space=SearchSpace(choices={"batch_size": (50, 800), "map_parallelism": (1, 2)}),
        windows=1,
        window_batches=2,
        warmup_batches=1,
        pruner=optuna.pruners.NopPruner(),
    )
    trials = result.study.get_trials()
    fails = [t for t in trials if is_counted(t) and t.state == optuna.trial.TrialState.FAIL]
    completed = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert fails and completed and result.best_config.batch_size == 50
    for t in fails:
        assert t.params["batch_size"] == 800
        assert "out of memory" in t.user_attrs["error"]
    assert all(t.params["batch_size"] == 50 for t in completed)
    assert sum(map(is_counted, trials)) == 6, "failed trials count towards n_trials"


def test_resume_from_a_storage_file(pipeline, base, tmp_path):
    storage = str(tmp_path / "study.db")
    fields = dict(cpu_count=2, lock_path=str(tmp_path / "lock"), **FAST)
    kept = options(storage=storage, study_name="resume", **fields)
    first = tune(pipeline, base=base, n_trials=2, options=kept)  # the two baselines
    assert sum(first.trials.values()) == 2
    second = tune(pipeline, base=base, n_trials=3, options=kept)
    trials = second.study.get_trials()
    assert len(trials) == 3, "one more trial, baselines not enqueued again"
    assert [t.user_attrs.get("baseline") for t in trials].count("autotune") == 1
    assert "baseline" not in trials[2].user_attrs  # the one more is a searched config
    journal = tune(
        pipeline,
        base=base,
        n_trials=2,
        options=options(storage=str(tmp_path / "j.log"), study_name="journal", **fields),
    )
    assert sum(journal.trials.values()) == 2


# ------------------------------------------- failures, on a fake clock
class Runaway(BaseException):
    """Raised by a test step that ran far more often than the test allows (the study
    would otherwise never end); not caught by Optuna's ``catch=(Exception,)``."""


def _always_raise(limit=500):
    calls = []

    def fail(batch):
        calls.append(1)
        if len(calls) > limit:
            raise Runaway("the study did not stop")
        raise RuntimeError("device lost: the accelerator went away")

    return fail


@pytest.mark.parametrize(
    "storage", [None, "study.db", "study.log"], ids=["memory", "sqlite", "journal"]
)
def test_a_step_that_always_raises_ends_the_study_with_its_error(tmp_path, storage, caplog):
    work = FakeWorkload(rate_by_parallelism, fail=_always_raise())
    kwargs = {"lock_path": str(tmp_path / "lock"), "n_trials": 20}
    if storage:
        kwargs.update(storage=str(tmp_path / storage), study_name="always-fails")
    with (
        caplog.at_level(logging.WARNING),
        pytest.raises(TrialsFailedError, match="device lost") as raised,
    ):
        work.tune(**kwargs)
    # A proposal of a config that failed already is not measured again (a duplicate).
    trials = [t for t in raised.value.study.get_trials() if not is_duplicate(t)]
    assert len(trials) == MAX_CONSECUTIVE_FAILURES
    assert all(t.state == optuna.trial.TrialState.FAIL for t in trials)
    assert all("device lost" in t.user_attrs["error"] for t in trials)
    # The step's traceback once, with the first failure; the others one line each, and
    # none of Optuna's own per-trial records (each with the same traceback).
    # the failures' own records (the per-trial progress lines start with "trial" too)
    failed = [r for r in caplog.records if str(r.msg).startswith("trial %d failed")]
    assert len(failed) == MAX_CONSECUTIVE_FAILURES
    assert [bool(r.exc_info) for r in failed] == [True] + [False] * (len(failed) - 1)
    assert not [r for r in caplog.records if "failed with parameters" in r.getMessage()]


# ------------------------------------------------------------------ Ctrl-C
def _ctrl_c(work, *, at_step=None, error=KeyboardInterrupt):
    """A fake step that raises KeyboardInterrupt (what Python's SIGINT handler raises)
    at its ``at_step``-th call, or at the first step of the confirmation."""
    calls = []

    def fail(batch):
        calls.append(1)
        if len(calls) == at_step or (at_step is None and work.confirming):
            raise error

    return fail


#: What pybind11 raises when Ctrl-C lands while TensorFlow's C++ code raises an error
#: of its own (seen in a real `tfinput tune` on the oldest TensorFlow): still Ctrl-C.
DISGUISED = RuntimeError(
    "pybind11::error_already_set: MISMATCH of original and normalized active exception "
    "types: ORIGINAL InvalidArgumentError REPLACED BY KeyboardInterrupt: <EMPTY MESSAGE>"
)


#: Steps of one trial of `FakeWorkload.tune`: a warm-up batch and four windows of two
#: (no pruning before the fifth trial); step 22 is in the third trial.
IN_THE_THIRD_TRIAL = 2 * 9 + 4


@pytest.mark.parametrize("error", [KeyboardInterrupt, DISGUISED], ids=["raised", "disguised"])
def test_ctrl_c_in_the_search_raises_with_the_completed_trials(tmp_path, error):
    work = FakeWorkload(rate_by_parallelism)
    work.fail = _ctrl_c(work, at_step=IN_THE_THIRD_TRIAL, error=error)
    with pytest.raises(KeyboardInterrupt) as raised:
        work.tune(n_trials=6, lock_path=str(tmp_path / "lock"))
    interrupt = raised.value
    assert isinstance(interrupt, TuneInterrupted) and interrupt.stage == "search"
    assert interrupt.completed == 2 and interrupt.requeued == () and interrupt.storage is None
    trials = interrupt.study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "FAIL"]
    assert trials[2].user_attrs["error"] == "interrupted (Ctrl-C) before it finished"
    data = json.loads(interrupt.write(tmp_path / "out").read_text())
    assert data["interrupted"] == {
        "stage": "search",
        "message": "interrupted during the search after 2 completed trials; no verdict: the "
        "confirmation against autotune did not run",
    }
    assert data["best_config"] is None and data["verdicts"] == []
    assert data["beats_autotune"] is None and data["trials"] == {"complete": 2, "fail": 1}
    best = max(trials[:2], key=lambda t: t.value)
    assert data["best_trial"]["number"] == best.number and not data["best_trial"]["confirmed"]
    assert data["best_trial"]["config"] == best.user_attrs["config"]
    assert [r["state"] for r in data["trials_detail"]] == ["complete", "complete", "fail"]


@pytest.mark.parametrize("error", [KeyboardInterrupt, DISGUISED], ids=["raised", "disguised"])
def test_ctrl_c_in_the_confirmation_claims_no_verdict(tmp_path, error):
    work = FakeWorkload(rate_by_parallelism)
    work.fail = _ctrl_c(work, error=error)
    with pytest.raises(TuneInterrupted) as raised:
        work.tune(n_trials=3, lock_path=str(tmp_path / "lock"))
    assert raised.value.stage == "confirmation" and raised.value.completed == 3
    assert raised.value.describe() == (
        "interrupted during the confirmation after 3 completed trials; no verdict: the "
        "confirmation against autotune did not finish"
    )
    data = raised.value.to_dict()
    assert data["beats_autotune"] is None and data["best_config"] is None


def test_a_study_interrupted_in_a_storage_resumes_and_measures_the_stopped_trial(tmp_path):
    from tuners._trials import is_counted

    work = FakeWorkload(rate_by_parallelism)
    work.fail = _ctrl_c(work, at_step=IN_THE_THIRD_TRIAL)
    kwargs = dict(
        storage=str(tmp_path / "study.db"), study_name="ctrl-c", lock_path=str(tmp_path / "lock")
    )
    with pytest.raises(TuneInterrupted) as raised:
        work.tune(n_trials=4, **kwargs)
    assert raised.value.requeued == (2,) and raised.value.storage == kwargs["storage"]
    assert raised.value.to_dict()["storage"] == kwargs["storage"]
    work.fail = lambda batch: None
    result = work.tune(n_trials=6, **kwargs)  # the same call, longer, resumes
    trials = result.study.get_trials()
    assert [t.state.name for t in trials[:3]] == ["COMPLETE", "COMPLETE", "FAIL"]
    assert not is_counted(trials[2])  # stopped by Ctrl-C: not the config's fault
    assert trials[3].user_attrs["retried_from"] == 2 and trials[3].params == trials[2].params
    assert trials[3].state.name == "COMPLETE"
    assert sum(is_counted(t) for t in trials) == 6 and result.confirmed
    # The resumed sampler (the same seed) proposes trial 2's config again: measured once.
    assert_measured_once(trials)
    assert next(t.user_attrs["duplicate_of"] for t in trials if is_duplicate(t)) == 3


def test_no_config_is_measured_twice_and_a_measured_space_ends_the_search(tmp_path):
    """A seeded random sampler over a space of five configs proposes some twice: those
    are recorded, not measured, and the nearest config not measured is next; once all
    are measured (and the heuristic), the search stops and says so."""
    work = FakeWorkload(rate_by_parallelism)
    result = work.tune(n_trials=30, lock_path=str(tmp_path / "lock"))
    trials = result.study.get_trials()
    assert_measured_once(trials)
    assert result.trials["duplicate"] == sum(map(is_duplicate, trials)) >= 1
    # The heuristic and the five values of the space (autotune's baseline builds what
    # map_parallelism=autotune builds).
    assert sum(map(is_counted, trials)) == 6
    assert (
        "the search stopped: every one of the 5 configs of the search space is measured or "
        "being measured" in result.warnings
    )
    rows = [r for r in summarize_trials(result.study) if r["state"] == "duplicate"]
    assert rows and all(r["duplicate_of"] is not None for r in rows)


def test_each_process_draws_its_sampler_seed_and_the_result_records_it(tmp_path, tuned):
    assert tuned[2].method["sampler_seed"] == 1  # given: kept
    seeds = [
        FakeWorkload(rate_by_parallelism).tune(n_trials=2, sampler=None).method["sampler_seed"]
        for _ in range(2)
    ]
    assert all(isinstance(s, int) for s in seeds) and seeds[0] != seeds[1]
    custom = FakeWorkload(rate_by_parallelism).tune(n_trials=2)  # a sampler of the user's
    assert custom.method["sampler_seed"] is None


def test_a_study_locked_by_another_writer_ends_with_the_trials_done(tmp_path, monkeypatch):
    """Another connection holds the SQLite database's write lock (``BEGIN EXCLUSIVE``)
    from the third trial on, longer than the busy timeout: one error naming the
    database and the lock, carrying the trials this run completed."""
    monkeypatch.setattr(tuners_storage, "SQLITE_BUSY_TIMEOUT_S", 1)
    db = tmp_path / "study.db"
    work, holder = FakeWorkload(rate_by_parallelism), []

    def lock_the_database(batch):
        if len(work.measured) >= 2 and not holder:
            holder.append(sqlite3.connect(db, isolation_level=None))
            holder[0].execute("BEGIN EXCLUSIVE")

    work.fail = lock_the_database
    work.measured = []
    try:
        with pytest.raises(StudyLockedError) as raised:
            work.tune(
                n_trials=8,
                storage=str(db),
                study_name="locked",
                lock_path=str(tmp_path / "lock"),
                progress=lambda event, info: (
                    work.measured.append(info) if event == "trial" else None
                ),
            )
    finally:
        for connection in holder:
            connection.close()
    error = raised.value
    assert str(error) == (
        f"the study database {db} is locked: another writer held it for more than 1 s while "
        "the search ran (SQLite lets one process write at a time)"
    )
    assert error.completed >= 2 and error.path == str(db) and error.stage == "search"
    data = json.loads(error.write(tmp_path / "out").read_text())
    assert data["locked"] == {"database": str(db), "stage": "search"}
    assert data["best_config"] is None and data["verdicts"] == []
    assert [t["state"] for t in data["trials_detail"]][:2] == ["complete", "complete"]
    assert data["best_trial"]["confirmed"] is False


def test_a_study_locked_before_it_opens_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(tuners_storage, "SQLITE_BUSY_TIMEOUT_S", 1)
    db = tmp_path / "study.db"
    work = FakeWorkload(rate_by_parallelism)
    kwargs = dict(storage=str(db), study_name="locked", lock_path=str(tmp_path / "lock"))
    work.tune(n_trials=2, **kwargs)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StudyLockedError) as raised:
            work.tune(n_trials=4, **kwargs)
    finally:
        holder.close()
    assert str(raised.value) == (
        f"the study database {db} is locked: another writer held it for more than 1 s while "
        "the study was opened (SQLite lets one process write at a time)"
    )
    assert raised.value.stage == "open" and raised.value.trials == []
    assert work.tune(n_trials=4, **kwargs).trials["complete"] >= 2  # the lock gone: resumed


def test_with_the_tuner_logger_at_debug_every_failure_has_its_traceback(tmp_path, caplog):
    work = FakeWorkload(rate_by_parallelism, fail=_always_raise())
    with caplog.at_level(logging.DEBUG, logger="tfinput.tuners"), pytest.raises(TrialsFailedError):
        work.tune(lock_path=str(tmp_path / "lock"), n_trials=20)
    # the failures' own records (the per-trial progress lines start with "trial" too)
    failed = [r for r in caplog.records if str(r.msg).startswith("trial %d failed")]
    assert len(failed) == MAX_CONSECUTIVE_FAILURES
    assert all(r.exc_info for r in failed)


def test_failed_trials_count_towards_n_trials_with_a_storage(tmp_path):
    def oom(batch):
        if batch["config"].map_parallelism == 3:
            raise MemoryError

    work = FakeWorkload(rate_by_parallelism, fail=oom)
    result = work.tune(
        # Every config: the heuristic and the five values of the space (autotune's
        # baseline builds the same pipeline as map_parallelism=autotune).
        n_trials=6,
        storage=str(tmp_path / "s.db"),
        study_name="counted",
        lock_path=str(tmp_path / "lock"),
    )
    trials = result.study.get_trials()
    assert sum(map(is_counted, trials)) == 6 and result.trials.get("fail")
    assert all(t.params["map_parallelism"] == 3 for t in trials if t.user_attrs.get("error"))


def test_too_many_failures_in_a_row_stop_the_search_with_a_warning(tmp_path):
    # Only the baselines (autotune, heuristic) work; every searched config fails.
    def fail(batch):
        if batch["config"].map_parallelism in (1, 2, 3, 4):
            raise RuntimeError("kernel not supported")

    work = FakeWorkload(rate_by_parallelism, fail=fail)
    result = work.tune(
        n_trials=30,
        max_consecutive_failures=3,
        base=PipelineConfig(batch_size=100, drop_remainder=True),
        # Configs enough that the search does not run out of new ones first.
        space=SearchSpace(choices={"map_parallelism": (1, 2, 3, 4), "prefetch": tuple(range(8))}),
        lock_path=str(tmp_path / "lock"),
        cpu_count=6,  # heuristic map_parallelism outside 1-4
    )
    assert len(result.study.get_trials()) < 30
    assert any(
        "3 failed trials in a row" in w and "kernel not supported" in w for w in result.warnings
    )
    assert result.confirmed  # the baselines were confirmed


def test_data_smaller_than_one_batch_is_refused_before_the_first_trial(
    small_tfrecord, small_schema, tmp_path, caplog
):
    """1,000 rows and a batch of 2,048: every config would fail alike, so tune refuses
    before any trial, with the row count and the batch size to use (the first 2,048
    records are counted, no more)."""
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    with caplog.at_level(logging.WARNING), pytest.raises(DataError) as e:
        tune(
            pipeline,
            base=PipelineConfig(batch_size=2048),
            n_trials=6,
            options=options(lock_path=str(tmp_path / "lock"), **FAST),
        )
    assert str(e.value) == (
        "tune: the data hold 1,000 rows, fewer than one batch of 2,048 (a partial batch "
        "is dropped): tune with the batch size you train with, --batch-size N (at most "
        "1,000), or on more data"
    )
    assert "trial 0" not in caplog.text


def test_data_a_source_cannot_count_stops_at_the_first_trial_with_the_row_count(
    small_columns, small_schema, tmp_path, caplog
):
    """A wrapped dataset cannot be counted up front: its first trial ends the run the
    same way (no more trials, no traceback per trial)."""
    from tests.helpers import wrapped_dataset

    pipeline = tfinput.wrap(wrapped_dataset(small_columns), small_schema)
    with (
        caplog.at_level(logging.WARNING),
        pytest.raises(DataError, match="fewer than one batch of 2,048"),
    ):
        tune(
            pipeline,
            base=PipelineConfig(batch_size=2048),
            n_trials=6,
            options=options(lock_path=str(tmp_path / "lock"), **FAST),
        )
    assert "trial 0 failed: " in caplog.text and "trial 1 failed" not in caplog.text


def test_packed_batches_and_tune_work_at_3000_features(tmp_path):
    """The ``wide-3000`` preset (3,000 features) at a few hundred rows: a packed batch
    holds every feature as the per-feature batch does, and `tune` runs to the end on it."""
    from tfinput import datagen

    data = datagen.generate_files(tmp_path / "data", preset="wide-3000", rows=256, files=2)
    schema = data.schema
    pipeline = tfinput.tfrecord(list(data.paths), schema).with_layout("packed")
    config = PipelineConfig(batch_size=64)
    features, labels = next(iter(pipeline.build(config)))
    assert tfinput.layout.is_packed(features)
    layout = pipeline.packed_layout()
    # widths: a column per dense and single id, max_len (10) per list
    assert (layout.n_dense, layout.n_ids, layout.n_weights) == (300, 2_100 + 6_000, 6_000)
    unpacked = tfinput.layout.unpack(features, layout)
    per_feature, same_labels = next(iter(pipeline.with_layout("per_feature").build(config)))
    for group in ("dense", "ids", "weights"):
        assert len(unpacked[group]) == len(per_feature[group])
        for name, value in per_feature[group].items():
            np.testing.assert_array_equal(unpacked[group][name], value, err_msg=name)
    np.testing.assert_array_equal(labels, same_labels)
    fast = options(cpu_count=2, lock_path=str(tmp_path / "lock"), **FAST)
    # One trial, the autotune baseline (which measures the per-feature layout: the
    # layout is a searched knob); the confirmation has nothing to compare it with.
    result = tune(pipeline, n_trials=1, base=config, options=fast)
    assert result.trials["complete"] == 1
    (trial,) = [t for t in result.study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert trial.value > 0 and result.best_config.batch_size == 64
