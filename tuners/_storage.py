"""Where a study lives, and the host lock that keeps trials of one host apart.

Storage: None (in memory); a path ending in ``.db``/``.sqlite`` or a ``sqlite:///`` URL
(one host, resumable); a path ending in ``.log``/``.journal`` (a journal file, several
processes on one host, resumable); a ``postgresql://`` URL (several hosts). RDB storages
get heartbeats: a trial whose worker died is failed after the grace period and retried
once by another worker (`tuners._workers` handles the processes of this host).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tfinput.errors import ConfigError

__all__ = [
    "HEARTBEAT_INTERVAL",
    "GRACE_PERIOD",
    "make_storage",
    "open_study",
    "with_psycopg",
    "redact",
    "storage_label",
    "without_secrets",
    "first_line",
    "host_lock",
]

HEARTBEAT_INTERVAL = 5
GRACE_PERIOD = 15
#: How long a write to a SQLite study waits for another writer (Python's default: 5 s).
SQLITE_BUSY_TIMEOUT_S = 60


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
            return optuna.storages.RDBStorage(
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
        engine_kwargs = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **heartbeats)
    if text.endswith((".log", ".journal", ".jsonl")):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        if not Path(text).parent.exists():
            raise ConfigError(f"cannot open storage {text}: directory does not exist")
        return JournalStorage(JournalFileBackend(text))
    raise ConfigError(
        f"storage {text!r}: expected a postgresql:// or sqlite:/// URL, or a file path "
        "ending in .db (SQLite) or .log (journal)"
    )


def with_psycopg(url: str) -> str:
    """``postgresql://`` with the driver tfinput installs (psycopg 3, the ``postgres``
    extra): SQLAlchemy 2.0 would pick psycopg2 for a bare ``postgresql://`` and 2.1
    picks psycopg, so name it. An explicit ``postgresql+driver://`` is kept."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    return url


def connect_args(url: str) -> dict[str, Any]:
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
