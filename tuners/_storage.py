"""Where a study lives, who runs its trials, and reading them.

- **Storage**, and the host lock that keeps trials of one host apart (`make_storage`,
  `host_lock`, `open_study`).
- **Failures in words**: why a trial (or a measurement) failed (`explain_failure`).
- **Workers and trials** (who runs a trial, which count, no config measured twice):
  `tuners._trials`.
- **A locked SQLite study** (`is_locked`): another writer held the database longer than
  the busy timeout.

Storage: None (in memory); a path ending in ``.db``/``.sqlite`` or a ``sqlite:///`` URL
(one host, resumable); a path ending in ``.log``/``.journal`` (a journal file, several
processes on one host, resumable); a ``postgresql://`` URL (several hosts). RDB storages
get heartbeats: a trial whose worker died is failed after the grace period and retried
once by another worker (`tuners._storage` handles the processes of this host).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfinput.errors import ConfigError, TfinputError

if TYPE_CHECKING:
    from tfinput._src.measurement.target import Measurable


log = logging.getLogger("tfinput.tuners")

HEARTBEAT_INTERVAL = 5
GRACE_PERIOD = 15
#: How long a write to a SQLite study waits for another writer (Python's default: 5 s).
SQLITE_BUSY_TIMEOUT_S = 60


def sqlite_busy_timeout() -> float:
    """`SQLITE_BUSY_TIMEOUT_S`, as set now: how long a SQLite study's writes wait."""
    return SQLITE_BUSY_TIMEOUT_S


def make_storage(
    storage: Any, *, heartbeat_interval: int = HEARTBEAT_INTERVAL, grace_period: int = GRACE_PERIOD
) -> Any:
    """An Optuna storage from a URL or path (see the module docstring); other objects
    (an Optuna storage) are returned unchanged."""
    import optuna

    if storage is None or not isinstance(storage, (str, os.PathLike)):
        return storage
    text = os.fspath(storage)
    heartbeats = {
        "heartbeat_interval": heartbeat_interval,
        "grace_period": grace_period,
        "heartbeat_stale_trial_callback": optuna.storages.RetryHeartbeatStaleTrialCallback(
            max_retry=1
        ),
    }
    if text.startswith(("postgresql", "mysql")):
        text = with_psycopg(text)
        try:
            return _rdb_storage(
                text,
                engine_kwargs={"pool_pre_ping": True, "connect_args": connect_args(text)},
                **heartbeats,
            )
        except Exception as e:  # sqlalchemy OperationalError, missing driver...
            raise ConfigError(
                f"cannot open storage {redact(text)}: {without_secrets(first_line(e), text)}"
            ) from e
    if text.startswith("sqlite:///") or text.endswith((".db", ".sqlite", ".sqlite3")):
        url = text if text.startswith("sqlite:///") else f"sqlite:///{os.path.abspath(text)}"
        path = url[len("sqlite:///") :]
        if path and not Path(path).parent.exists():
            raise ConfigError(
                f"cannot open storage {url}: directory {Path(path).parent} does not exist"
            )
        # SQLite lets one writer at a time; the others wait up to the busy timeout
        # (Python's default: 5 s). On a loaded host the heartbeat thread, the trials and
        # the other workers of a shared study can hold a write longer than that, and a
        # shorter wait fails the run with "database is locked".
        engine_kwargs = {"connect_args": {"timeout": sqlite_busy_timeout()}}
        return _rdb_storage(url, engine_kwargs=engine_kwargs, **heartbeats)
    if text.endswith((".log", ".journal", ".jsonl")):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        if not Path(text).parent.exists():
            raise ConfigError(f"cannot open storage {text}: directory does not exist")
        return JournalStorage(JournalFileBackend(text))
    raise ConfigError(
        f"storage {text!r}: expected a postgresql:// or sqlite:/// URL, or a file path "
        "ending in .db (SQLite) or .log (journal)"
    )


#: Tries at opening an RDB storage whose schema another process is creating.
SCHEMA_TRIES = 4


def _rdb_storage(url: str, **kwargs: Any) -> Any:
    """``optuna.storages.RDBStorage(url, **kwargs)``, tried again when another process
    created the schema at the same moment.

    Two processes opening a new database together both create its tables and stamp
    its schema version: the second fails with a unique-constraint error on
    ``alembic_version`` or ``version_info`` (or "table ... already exists"). Tried
    again, it finds the schema whole and opens it. Other errors (an unreachable server,
    a database locked by another writer) are raised at once.
    """
    import sqlalchemy.exc

    for attempt in range(SCHEMA_TRIES):
        try:
            return _storage_class()(url, **kwargs)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as e:
            text = str(e)
            racing = isinstance(e, sqlalchemy.exc.IntegrityError) or "already exists" in text
            if not racing or is_locked(e) or attempt == SCHEMA_TRIES - 1:
                raise
            log.debug("the storage's schema was being created by another process: %s", e)
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


@functools.cache
def _storage_class() -> type:
    """`optuna.storages.RDBStorage` whose heartbeat skips a beat when the database is
    locked by another writer (SQLite), instead of ending its thread with a traceback on
    stderr: the next beat tries again, and the trial's own writes meet the lock and
    say so (`is_locked`)."""
    import optuna

    class RDBStorage(optuna.storages.RDBStorage):
        def record_heartbeat(self, trial_id: int) -> None:
            try:
                super().record_heartbeat(trial_id)
            except Exception as e:
                if not is_locked(e):
                    raise
                log.debug("a heartbeat of trial id %d waited out a locked database", trial_id)

    return RDBStorage


def with_psycopg(url: str) -> str:
    """``postgresql://`` with the driver tfinput installs (psycopg 3, the ``postgres``
    extra): SQLAlchemy 2.0 would pick psycopg2 for a bare ``postgresql://`` and 2.1
    picks psycopg, so name it. An explicit ``postgresql+driver://`` is kept."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    return url


def connect_args(url: str) -> dict[str, object]:
    """SQLAlchemy ``connect_args`` for ``url``: a connection timeout for PostgreSQL."""
    return {"connect_timeout": 10} if url.startswith("postgresql") else {}


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages): the one of
    ``user:password@`` (everything up to the address's last ``@``, so a password with an
    ``@`` in it is hidden whole) and the value of any ``...password=`` query parameter."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    address, q, query = rest.partition("?")
    userinfo, at, host = address.rpartition("@")
    if at and ":" in userinfo:
        address = f"{userinfo.split(':', 1)[0]}:***@{host}"
    query = re.sub(r"((?:^|&)[^=&]*password=)[^&]*", r"\1***", query, flags=re.IGNORECASE)
    return f"{scheme}{sep}{address}{q}{query}"


def storage_label(storage: Any) -> str | None:
    """How a result names ``storage``: a URL or path as given, password redacted; None for
    memory or an Optuna storage object."""
    if isinstance(storage, (str, os.PathLike)):
        return redact(os.fspath(storage))
    return None


def without_secrets(text: str, url: str) -> str:
    """``text`` (an error message) with any password ``url`` holds replaced by ``***``,
    however the driver quoted it."""
    from urllib.parse import unquote

    secrets = set()
    _, sep, rest = url.partition("://")
    address, _, query = rest.partition("?")
    userinfo, at, _ = address.rpartition("@")
    if sep and at and ":" in userinfo:
        secrets.add(userinfo.split(":", 1)[1])
    secrets.update(re.findall(r"password=([^&]*)", query, flags=re.IGNORECASE))
    for secret in sorted(secrets | {unquote(x) for x in secrets}, key=len, reverse=True):
        if secret:
            text = text.replace(secret, "***")
    return text


def first_line(e: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def stop_heartbeats() -> int:
    """Stop the heartbeat threads Optuna left running; how many.

    Optuna records an RDB storage's heartbeat on a thread of its own (not a daemon),
    started as each trial starts, in a ``with`` block that stops it when the trial ends.
    A Ctrl-C that lands while that thread starts (``__enter__`` waits for it: long on a
    busy host) leaves it running with no one to stop it, and Python waits for it at exit:
    the process would never end. Called once Ctrl-C has stopped the search; any trial
    still RUNNING then is failed by the next worker that checks the heartbeats, as a
    killed worker's is.
    """
    from optuna.storages._heartbeat import HeartbeatThread

    stopped = 0
    for thread in threading.enumerate():
        # Thread keeps its target and arguments until the target returns.
        if getattr(thread, "_target", None) is HeartbeatThread._record_heartbeat:
            for arg in getattr(thread, "_args", ()):
                if isinstance(arg, threading.Event):
                    arg.set()
                    stopped += 1
    return stopped


@contextlib.contextmanager
def host_lock(path: str | None = None) -> Iterator[None]:
    """Exclusive lock shared by every tfinput tuner process on this host."""
    path = path or os.path.join(tempfile.gettempdir(), f"tfinput-tune-{os.getuid()}.lock")
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def open_study(
    storage: Any,
    *,
    study_name: str,
    sampler: Any,
    pruner: Any,
    load_if_exists: bool,
    shown: Any = None,
) -> Any:
    """Create (or, with ``load_if_exists``, resume) a maximizing Optuna study.

    Args:
      storage: An Optuna storage (`make_storage`), or None for memory.
      study_name: The study's name in the storage.
      sampler, pruner: The study's sampler and pruner.
      load_if_exists: Resume the named study if the storage already holds it.
      shown: The storage as the user gave it, named (password redacted) in messages
        (default: ``storage``).

    Returns:
      The `optuna.Study`.

    Raises:
      ConfigError: the study exists and ``load_if_exists`` is False, or the storage
        cannot be opened (unreachable database, bad credentials...).
    """
    import optuna

    try:
        return optuna.create_study(
            storage=storage,
            study_name=study_name,
            direction="maximize",
            sampler=sampler,
            pruner=pruner,
            load_if_exists=load_if_exists,
        )
    except optuna.exceptions.DuplicatedStudyError as e:
        raise ConfigError(
            f"study {study_name!r} already exists in the storage; resume it "
            "(load_if_exists=True) or choose another name"
        ) from e
    except Exception as e:  # unreachable database, bad credentials...
        shown = str(storage if shown is None else shown)
        raise ConfigError(
            f"cannot open storage {redact(shown)}: {without_secrets(first_line(e), shown)}"
        ) from e


def is_locked(error: BaseException) -> bool:
    """Whether ``error`` (or an error it was raised from) is SQLite's "database is
    locked": another writer held the study's database longer than the busy timeout."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if "database is locked" in str(e) or "database table is locked" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def sqlite_path(storage: Any) -> str | None:
    """The database file of a SQLite storage as given (a path or a ``sqlite:///``
    URL), made absolute; None for other storages."""
    if not isinstance(storage, (str, os.PathLike)):
        return None
    text = os.fspath(storage)
    if text.startswith("sqlite:///"):
        return os.path.abspath(text[len("sqlite:///") :])
    if text.endswith((".db", ".sqlite", ".sqlite3")):
        return os.path.abspath(text)
    return None


def is_interrupt(error: BaseException) -> bool:
    """Whether ``error`` is Ctrl-C: a ``KeyboardInterrupt``, or the ``RuntimeError``
    pybind11 raises in its place when the interrupt lands while TensorFlow's C++ code
    is raising an error of its own ("MISMATCH of original and normalized active
    exception types: ... REPLACED BY KeyboardInterrupt"); counted as a failed trial,
    that Ctrl-C would be lost."""
    return isinstance(error, KeyboardInterrupt) or (
        isinstance(error, RuntimeError) and "REPLACED BY KeyboardInterrupt" in str(error)
    )


def explain_failure(pipeline: Measurable, error: BaseException) -> str:
    """Why a trial or measurement failed, in one line: tfinput's own message, "out of
    memory", or the error's type and its cleaned-up message (`tfinput.errors.clean_error`).

    Raises:
      KeyboardInterrupt: ``error`` is Ctrl-C in disguise (`is_interrupt`): not a failure
        to note and go on from (every failure the tuner survives is explained here).
    """
    if is_interrupt(error):
        raise KeyboardInterrupt from None
    if isinstance(error, TfinputError):
        return str(error)
    if isinstance(error, MemoryError):
        return "out of memory (MemoryError)"
    try:
        from tfinput.errors import clean_error

        text = clean_error(error)
    except Exception:  # pragma: no cover - clean_error itself must not hide the error
        text = str(error)
    if "ResourceExhausted" in type(error).__name__:
        return f"out of memory: {text}"
    return f"{type(error).__name__}: {text}"
