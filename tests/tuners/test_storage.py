"""`tuners._storage`: where a study lives (memory, SQLite, journal, PostgreSQL URLs),
opening or resuming it, and the host lock; the workers of its trials (ids, the RUNNING
trials of dead workers requeued); reading its trials. PostgreSQL itself:
test_storage_postgres.py."""

from __future__ import annotations

import datetime
import fcntl
import os
import socket
import subprocess
import sys
import threading

import optuna
import pytest
import tensorflow as tf
from optuna.storages import RDBStorage
from optuna.storages.journal import JournalStorage

from tests.tuners.conftest import FakeWorkload, rate_by_parallelism
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, DataError
from tuners._storage import (
    connect_args,
    explain_failure,
    first_line,
    host_lock,
    is_locked,
    make_storage,
    open_study,
    redact,
    sqlite_path,
    stop_heartbeats,
    storage_label,
    with_psycopg,
    without_secrets,
)
from tuners._trials import (
    is_counted,
    measured_twin,
    pid_alive,
    pid_namespace,
    requeue_dead_workers,
    state_counts,
    summarize_trials,
    tag_worker,
    taken_configs,
    top_configs,
    trailing_failures,
    trial_info,
    worker_id,
)

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def test_storage_errors():
    with pytest.raises(ConfigError, match="expected a postgresql:// or sqlite:/// URL"):
        make_storage("mongodb://x")
    with pytest.raises(ConfigError, match=r"directory .* does not exist"):
        make_storage("/nonexistent/dir/study.db")


def test_journal_storage_in_a_missing_directory():
    with pytest.raises(ConfigError) as raised:
        make_storage("/nonexistent/dir/study.log")
    assert str(raised.value) == (
        "cannot open storage /nonexistent/dir/study.log: directory does not exist"
    )


@pytest.mark.parametrize(
    "name, kind",
    [("study.db", RDBStorage), ("study.log", JournalStorage)],
    ids=["sqlite", "journal"],
)
def test_a_storage_file_keeps_the_study(tmp_path, name, kind):
    path = tmp_path / name
    storage = make_storage(path)
    assert isinstance(storage, kind)
    study = open_study(storage, study_name="s", sampler=None, pruner=None, load_if_exists=False)
    study.optimize(lambda trial: trial.suggest_int("x", 1, 3), n_trials=2)
    again = open_study(
        make_storage(str(path)), study_name="s", sampler=None, pruner=None, load_if_exists=True
    )
    assert len(again.trials) == 2 and again.direction == optuna.study.StudyDirection.MAXIMIZE


def test_sqlite_url_and_passthrough(tmp_path):
    url = f"sqlite:///{tmp_path / 'u.db'}"
    assert str(make_storage(url).engine.url) == url
    assert make_storage(None) is None
    memory = optuna.storages.InMemoryStorage()
    assert make_storage(memory) is memory


def test_an_existing_study_is_not_reused_without_load_if_exists():
    storage = optuna.storages.InMemoryStorage()
    open_study(storage, study_name="taken", sampler=None, pruner=None, load_if_exists=False)
    with pytest.raises(ConfigError, match="study 'taken' already exists in the storage"):
        open_study(storage, study_name="taken", sampler=None, pruner=None, load_if_exists=False)


@pytest.mark.parametrize(
    "url, want",
    [
        ("postgresql://u:p@h/db", "postgresql+psycopg://u:p@h/db"),
        ("postgres://h/db", "postgresql+psycopg://h/db"),
        ("postgresql+psycopg2://h/db", "postgresql+psycopg2://h/db"),
        ("sqlite:///x.db", "sqlite:///x.db"),
    ],
    ids=["postgresql", "postgres", "explicit-driver", "sqlite"],
)
def test_with_psycopg(url, want):
    assert with_psycopg(url) == want


def test_messages_hide_the_password_and_keep_one_line():
    assert redact("postgresql://me:s3cret@db:5432/x") == "postgresql://me:***@db:5432/x"
    assert redact("postgresql://db/x") == "postgresql://db/x"
    # A password with an "@" (or a "/") is hidden whole; so is a password= parameter.
    assert redact("postgresql://me:p@ss/w@db/x") == "postgresql://me:***@db/x"
    assert redact("postgresql://me@db/x?sslmode=require&password=s3cret") == (
        "postgresql://me@db/x?sslmode=require&password=***"
    )
    assert redact("postgresql://me@db/x") == "postgresql://me@db/x"
    assert storage_label("postgresql://me:s3cret@db/x") == "postgresql://me:***@db/x"
    assert storage_label("study.log") == "study.log" and storage_label(None) is None
    url = "postgresql://me:p%40ss@db/x"  # as a driver may quote it back: p@ss
    assert without_secrets('no password "p@ss" or p%40ss here', url) == (
        'no password "***" or *** here'
    )
    assert connect_args("postgresql+psycopg://db/x") == {"connect_timeout": 10}
    assert connect_args("sqlite:///x.db") == {}
    assert first_line(RuntimeError("could not connect\nDETAIL: refused")) == "could not connect"
    assert first_line(KeyError()) == "KeyError"


def test_unreachable_postgresql_names_the_url_without_its_password():
    with pytest.raises(ConfigError) as raised:
        open_study(
            make_storage("postgresql://me:s3cret@127.0.0.1:1/none"),
            study_name="x",
            sampler=None,
            pruner=None,
            load_if_exists=True,
        )
    message = str(raised.value)
    assert message.startswith("cannot open storage postgresql+psycopg://me:***@127.0.0.1:1/none")
    assert "s3cret" not in message


def test_host_lock_is_exclusive(tmp_path):
    path = str(tmp_path / "lock")
    with host_lock(path), open(path) as other, pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(path) as other:  # released on exit
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(other, fcntl.LOCK_UN)


def test_a_heartbeat_thread_ctrl_c_orphaned_is_stopped(tmp_path):
    # Optuna starts a trial's heartbeat thread in a `with` block's __enter__; Ctrl-C that
    # lands there leaves it running with nothing to stop it (the tune process then
    # never exits: Python waits for it). Here it is left running on purpose.
    from optuna.storages._heartbeat import HeartbeatThread

    storage = RDBStorage(f"sqlite:///{tmp_path}/hb.db", heartbeat_interval=1)
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    orphan = HeartbeatThread(trial._trial_id, storage)
    orphan.start()
    (thread,) = [t for t in threading.enumerate() if t is orphan._thread]
    assert thread.is_alive() and not thread.daemon
    assert stop_heartbeats() == 1
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert stop_heartbeats() == 0


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
    # The candidates confirmed against autotune leave autotune out (and, by ``key``,
    # what builds the same pipeline).
    assert top_configs(study, 3, exclude=[PipelineConfig()]) == top[:1]
    same_batch = top_configs(study, 3, key=lambda c: c.batch_size, exclude=[PipelineConfig()])
    assert same_batch == top[:1]


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
        "duplicate_of": None,
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


# ------------------------------------------------------- a new SQLite file, at once
#: Opens the storage once every process of the race is ready (a file each in the
#: folder given), so that they create the database's schema at the same moment.
OPEN_TOGETHER = """\
import os, sys, time
from pathlib import Path
import optuna.storages
from tuners._storage import make_storage
db, ready, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
(ready / str(os.getpid())).touch()
while len(list(ready.iterdir())) < n:
    time.sleep(0.001)
make_storage(db)
print("opened")
"""


def test_processes_opening_a_new_sqlite_study_at_once_all_open_it(tmp_path):
    """Two processes open one new SQLite file at the same moment: each creates the
    schema, and without a retry one fails on ``alembic_version``'s unique constraint
    (with plain `RDBStorage`, 2 of 3 processes in each of 6 runs here)."""
    ready = tmp_path / "ready"
    ready.mkdir()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-W",
                "ignore",
                "-c",
                OPEN_TOGETHER,
                str(tmp_path / "new.db"),
                ready,
                "2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert [out.strip() for out, _ in outputs] == ["opened"] * 2


# ---------------------------------------------------------- no config twice
def test_a_config_measured_or_being_measured_has_a_twin_and_no_other():
    study = optuna.create_study(direction="maximize")
    config = PipelineConfig(prefetch=2).to_dict()

    def key_of(t):
        return None if "config" not in t.user_attrs else str(t.user_attrs["config"])

    def trial(state, **attrs):
        value = 1.0 if state == State.COMPLETE else None
        study.add_trial(optuna.trial.create_trial(state=state, value=value, user_attrs=attrs))
        return study.trials[-1]

    me = {"worker": worker_id(), "worker_pid_namespace": pid_namespace()}
    dead = {**me, "worker": f"{socket.gethostname()}:{_dead_pid()}"}
    key = str(config)
    current = study.ask()
    trial(State.FAIL, config=config, error="interrupted", interrupted=True)  # retried
    trial(State.FAIL, config=config, duplicate_of=0)  # never measured
    trial(State.RUNNING, config=config, **me)  # suggesting, not measuring yet
    trial(State.RUNNING, config=config, measuring=True, **dead)  # its worker died
    assert measured_twin(study, current, key, key_of) is None
    measuring = trial(State.RUNNING, config=config, measuring=True, worker="another-host:1")
    assert measured_twin(study, current, key, key_of).number == measuring.number
    assert measured_twin(study, current, str(PipelineConfig().to_dict()), key_of) is None
    other = optuna.create_study(direction="maximize")
    other.add_trial(optuna.trial.create_trial(state=State.PRUNED, user_attrs={"config": config}))
    assert measured_twin(other, other.ask(), key, key_of).state == State.PRUNED
    # taken: measured, measuring or planned; not the retried, not the duplicate
    assert taken_configs(study, lambda t: key_of(t) or "planned") == {key, "planned"}


@pytest.mark.parametrize(
    "error, locked",
    [
        (
            optuna.exceptions.StorageInternalError("An exception is raised during the commit."),
            False,
        ),
        (RuntimeError("x"), False),
    ],
    ids=["other-storage-error", "other"],
)
def test_is_locked_reads_the_cause(error, locked):
    assert is_locked(error) is locked
    import sqlite3

    try:
        try:
            raise sqlite3.OperationalError("database is locked")
        except sqlite3.OperationalError as cause:
            raise optuna.exceptions.StorageInternalError("exceeding max length") from cause
    except optuna.exceptions.StorageInternalError as wrapped:
        assert is_locked(wrapped)


def test_sqlite_path_names_the_database_file(tmp_path):
    assert sqlite_path(f"sqlite:///{tmp_path}/a.db") == f"{tmp_path}/a.db"
    assert sqlite_path("runs/b.db") == os.path.abspath("runs/b.db")
    assert sqlite_path("study.log") is None and sqlite_path(None) is None
