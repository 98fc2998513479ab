"""`tuners._storage`: where a study lives (memory, SQLite, journal, PostgreSQL URLs),
opening or resuming it, and the host lock. PostgreSQL itself: test_storage_postgres.py."""

from __future__ import annotations

import fcntl

import optuna
import pytest
from optuna.storages import RDBStorage
from optuna.storages.journal import JournalStorage

from tfinput.errors import ConfigError
from tuners._storage import (
    connect_args,
    first_line,
    host_lock,
    make_storage,
    open_study,
    redact,
    storage_label,
    with_psycopg,
    without_secrets,
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
