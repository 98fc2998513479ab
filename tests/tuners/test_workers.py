"""`tuners._workers`: which process runs a trial, and the RUNNING trials of workers that
died, failed and retried once (by `tune`, and directly on a study)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import optuna
import pytest

from tests.tuners.conftest import FakeWorkload, rate_by_parallelism
from tuners._storage import make_storage
from tuners._workers import pid_alive, pid_namespace, requeue_dead_workers, tag_worker, worker_id


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_worker_id_and_pid_liveness():
    assert worker_id() == f"{socket.gethostname()}:{os.getpid()}"
    assert pid_namespace() == os.readlink("/proc/self/ns/pid")
    assert pid_alive(os.getpid()) and not pid_alive(_dead_pid())


def test_tag_worker_records_this_process():
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    tag_worker(trial)
    assert trial.user_attrs == {"worker": worker_id(), "worker_pid_namespace": pid_namespace()}


def test_requeue_dead_workers_fails_and_enqueues_their_trials_once():
    study = optuna.create_study(direction="maximize")
    study.enqueue_trial({"x": 2}, user_attrs={"baseline": "autotune"})
    dead = study.ask()
    dead.suggest_int("x", 1, 3)
    dead.set_user_attr("worker", f"{socket.gethostname()}:{_dead_pid()}")
    live = study.ask()
    tag_worker(live)
    elsewhere = study.ask()  # another host: left to the storage's heartbeat
    elsewhere.set_user_attr("worker", f"not-{socket.gethostname()}:{_dead_pid()}")
    untagged = study.ask()  # killed before it was tagged: nothing to go on

    assert requeue_dead_workers(study) == [dead.number]
    assert requeue_dead_workers(study) == [], "failed once, retried once"
    trials = study.get_trials()
    failed = trials[dead.number]
    assert failed.state == optuna.trial.TrialState.FAIL and failed.user_attrs["worker_died"]
    assert "died while the trial was running; retried" in failed.user_attrs["error"]
    for t in (live, elsewhere, untagged):
        assert trials[t.number].state == optuna.trial.TrialState.RUNNING
    (retry,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert retry.user_attrs == {"baseline": "autotune", "retried_from": dead.number}
    assert retry.system_attrs["fixed_params"] == {"x": 2}


@pytest.mark.parametrize("storage", ["study.db", "study.log"], ids=["sqlite", "journal"])
def test_a_trial_left_running_by_a_dead_worker_is_failed_and_retried(tmp_path, storage):
    work = FakeWorkload(rate_by_parallelism)
    kwargs = dict(
        storage=str(tmp_path / storage), study_name="restart", lock_path=str(tmp_path / "lock")
    )
    work.tune(n_trials=4, **kwargs)
    # A worker (on this host) was killed mid-trial: its trial stays RUNNING, and the
    # restart comes well within the heartbeat grace period (or there is no heartbeat).
    study = optuna.load_study(study_name="restart", storage=make_storage(kwargs["storage"]))
    study.enqueue_trial({"map_parallelism": 3})
    victim = study.ask()
    choices = study.trials[0].distributions["map_parallelism"].choices
    assert victim.suggest_categorical("map_parallelism", choices) == 3
    victim.set_user_attr("worker", f"{socket.gethostname()}:{_dead_pid()}")
    study.enqueue_trial({"map_parallelism": 4})
    early = study.ask()  # killed before it suggested anything: retried as enqueued
    early.set_user_attr("worker", f"{socket.gethostname()}:{_dead_pid()}")
    alive = study.ask()  # a live process of this host (this one) is left alone
    alive.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
    other = study.ask()  # so is a process of another container with the same host name
    other.set_user_attr("worker", f"{socket.gethostname()}:{_dead_pid()}")
    other.set_user_attr("worker_pid_namespace", "pid:[1]")

    result = work.tune(n_trials=8, **kwargs)
    trials = {t.number: t for t in result.study.get_trials()}
    killed = trials[victim.number]
    assert killed.state == optuna.trial.TrialState.FAIL
    assert "died" in killed.user_attrs["error"]
    retries = [t for t in trials.values() if t.user_attrs.get("retried_from") == victim.number]
    assert len(retries) == 1 and retries[0].state.is_finished()
    assert retries[0].params == {"map_parallelism": 3}
    (early_retry,) = [
        t for t in trials.values() if t.user_attrs.get("retried_from") == early.number
    ]
    assert trials[early.number].state == optuna.trial.TrialState.FAIL
    assert early_retry.params == {"map_parallelism": 4}
    assert trials[alive.number].state == optuna.trial.TrialState.RUNNING
    assert trials[other.number].state == optuna.trial.TrialState.RUNNING
    killed_numbers = (victim.number, early.number)
    counted = [
        t for t in trials.values() if t.state.is_finished() and t.number not in killed_numbers
    ]
    assert len(counted) == 8, "the killed trials do not count; their retries do"
