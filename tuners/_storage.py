"""Where a study lives, who runs its trials, and reading them.

- **Storage**, and the host lock that keeps trials of one host apart (`make_storage`,
  `host_lock`, `open_study`).
- **Workers** (`tag_worker`, `requeue_dead_workers`): every trial records its worker
  (``host:pid``, and the PID namespace: containers may share a host name). When a study
  is opened, a RUNNING trial of a process of this host that no longer exists (a restart
  within the storage's grace period, or the journal storage, which has no heartbeats) is
  failed and its parameters are enqueued again, once. Trials of other hosts are left to
  the storage's heartbeat (RDB storages).
- **Trials** (`summarize_trials`, `top_configs`, ...): which count towards ``n_trials``,
  failures in a row, the progress of a trial, the best distinct configs, one JSON row per
  trial; and why a trial (or a measurement) failed, in words (`explain_failure`).
- **No config measured twice** (`measured_twin`, `taken_configs`): the pipeline a
  trial's config builds compared with those of the trials measured, or being measured,
  in the study.
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
import datetime
import fcntl
import functools
import logging
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, TfinputError

if TYPE_CHECKING:
    import optuna

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


def worker_id() -> str:
    """``host:pid`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def pid_namespace() -> str:
    """This process's PID namespace (containers sharing a host name have different ones,
    and a pid means nothing outside its namespace); "" where unknown."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this PID namespace exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def tag_worker(trial: optuna.Trial) -> None:
    """Record this process as ``trial``'s worker (first thing in a trial, so that a
    trial left RUNNING by a killed worker can be recognised)."""
    trial.set_user_attr("worker", worker_id())
    trial.set_user_attr("worker_pid_namespace", pid_namespace())


def requeue_dead_workers(study: optuna.Study) -> list[int]:
    """Fail the RUNNING trials of dead processes of this host; enqueue their params again.

    Returns the numbers of the trials failed. Trials of other hosts are left to the
    storage's heartbeat (RDB storages).
    """
    import optuna

    host, namespace = socket.gethostname(), pid_namespace()
    storage = study._storage
    failed = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        worker_host, _, pid = str(t.user_attrs.get("worker", "")).rpartition(":")
        if worker_host != host or not pid.isdigit():
            continue
        if t.user_attrs.get("worker_pid_namespace", namespace) != namespace:
            continue  # another container with the same host name
        if pid_alive(int(pid)):
            continue
        reason = f"worker {worker_host}:{pid} died while the trial was running; retried"
        try:
            storage.set_trial_user_attr(t._trial_id, "error", reason)
            storage.set_trial_user_attr(t._trial_id, "worker_died", True)
            if not storage.set_trial_state_values(t._trial_id, state=optuna.trial.TrialState.FAIL):
                continue
        except RuntimeError:  # finished meanwhile (another process got there first)
            continue
        failed.append(t.number)
        log.warning("trial %d: %s", t.number, reason)
        attrs = {k: t.user_attrs[k] for k in ("baseline",) if k in t.user_attrs}
        # The params it was enqueued with (a baseline), then those it had suggested (a
        # trial killed mid-suggestion keeps those; the rest are sampled again).
        params = {**t.system_attrs.get("fixed_params", {}), **t.params}
        study.enqueue_trial(params, user_attrs={**attrs, "retried_from": t.number})
    return failed


# ---------------------------------------------------------- no config twice
def is_duplicate(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether ``trial`` proposed a config already measured and was not measured."""
    return "duplicate_of" in trial.user_attrs


def _measured(trial: optuna.trial.FrozenTrial, host: str, namespace: str) -> bool:
    """Whether ``trial`` holds a measurement of its config, or is taking one: finished
    (complete, pruned, or failed by its config), or RUNNING past its measurement's
    start (``measuring``) in a worker that is alive (on this host) or elsewhere."""
    import optuna

    if is_duplicate(trial):
        return False
    if trial.state == optuna.trial.TrialState.RUNNING:
        if not trial.user_attrs.get("measuring"):
            return False  # still suggesting, or waiting for the host lock
        worker_host, _, pid = str(trial.user_attrs.get("worker", "")).rpartition(":")
        same = worker_host == host and (
            trial.user_attrs.get("worker_pid_namespace", namespace) == namespace
        )
        return not (same and pid.isdigit() and not pid_alive(int(pid)))
    return is_counted(trial)


def measured_twin(
    study: optuna.Study,
    trial: optuna.trial.BaseTrial,
    key: str,
    key_of: Callable[[optuna.trial.FrozenTrial], str | None],
) -> optuna.trial.FrozenTrial | None:
    """The trial of ``study`` that measured the config ``trial`` is about to measure
    (``key``; ``key_of`` gives each trial's from the config it recorded, None before it
    recorded one), or is measuring it; None when there is none. `tuners._search.Tuning`
    asks under the host lock, so no other trial of this host is measuring then.

    A trial stopped by Ctrl-C or by its worker's death was not measured (its params are
    enqueued again); a duplicate itself was never measured.
    """
    host, namespace = socket.gethostname(), pid_namespace()
    for t in study.get_trials(deepcopy=False):
        same = t.number != trial.number and key_of(t) == key
        if same and _measured(t, host, namespace):
            return t
    return None


def taken_configs(
    study: optuna.Study, key_of: Callable[[optuna.trial.FrozenTrial], str]
) -> set[str]:
    """``key_of`` every trial that measured its config, is measuring it, or holds it
    enqueued or proposed (a trial not yet measured), duplicates aside."""
    import optuna

    taken = set()
    for t in study.get_trials(deepcopy=False):
        if is_duplicate(t):
            continue
        if t.state == optuna.trial.TrialState.FAIL and not is_counted(t):
            continue  # stopped by Ctrl-C or a dead worker: enqueued again
        taken.add(key_of(t))
    return taken


# ------------------------------------------------------------- locked SQLite
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


def is_counted(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a trial counts towards ``n_trials``: finished, or failed by its config
    (a trial failed because its worker died, or stopped by Ctrl-C, is retried instead;
    a duplicate was not measured)."""
    import optuna

    if is_duplicate(trial):
        return False
    state = trial.state
    if state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED):
        return True
    return (
        state == optuna.trial.TrialState.FAIL
        and bool(trial.user_attrs.get("error"))
        and not trial.user_attrs.get("worker_died")
        and not trial.user_attrs.get("interrupted")
    )


def trailing_failures(trials: list[Any], *, since: datetime.datetime) -> list[Any]:
    """The failed trials (failed by their config) started since ``since``, after the
    last finished one."""
    import optuna

    out: list[Any] = []
    for t in sorted(trials, key=lambda t: t.number):
        if t.datetime_start is None or t.datetime_start < since:
            continue
        if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED):
            out = []
        elif is_counted(t):
            out.append(t)
    return out


def trial_info(
    study: optuna.Study, trial: optuna.trial.FrozenTrial, n_trials: int
) -> dict[str, object]:
    """The ``trial`` progress event: the trial's state, value and searched parameters,
    trials done, the best."""
    import optuna

    done = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    ]
    try:
        best = study.best_value
    except ValueError:
        best = None
    return {
        "number": trial.number,
        "state": state_name(trial),
        "value": trial.value,
        "done": len(done),
        "total": n_trials,
        "best": best,
        "baseline": trial.user_attrs.get("baseline"),
        "error": trial.user_attrs.get("error"),
        "duplicate_of": trial.user_attrs.get("duplicate_of"),
        "params": dict(trial.params),
    }


def state_counts(study: optuna.Study) -> dict[str, int]:
    """Trial counts by state (``complete``, ``pruned``, ``fail``, ``running``...;
    ``duplicate``: not measured, see `state_name`)."""
    states: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        state = state_name(t)
        states[state] = states.get(state, 0) + 1
    return states


def state_name(trial: optuna.trial.FrozenTrial) -> str:
    """``complete``, ``pruned``, ``fail``, ``running``...; ``duplicate`` for a trial that
    proposed a config already measured and was not measured (`measured_twin`)."""
    return "duplicate" if is_duplicate(trial) else trial.state.name.lower()


def top_configs(
    study: optuna.Study,
    k: int,
    *,
    key: Callable[[PipelineConfig], Any] = lambda config: config,
    exclude: Sequence[PipelineConfig] = (),
) -> list[tuple[str, PipelineConfig]]:
    """The ``k`` best distinct configs of the completed trials, as ``(name, config)``
    (a baseline's name, or ``trial N``; autotune's trial is named by its number).

    Args:
      study: The study.
      k: How many.
      key: What makes two configs the same (default: equal configs; the tuner passes
        the pipeline they build, `tuners._space.pipeline_key`).
      exclude: Configs left out (and those the same as them by ``key``).
    """
    import optuna

    complete = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state == optuna.trial.TrialState.COMPLETE and "config" in t.user_attrs
    ]
    complete.sort(key=lambda t: t.value, reverse=True)
    seen = {key(c) for c in exclude}
    out: list[tuple[str, PipelineConfig]] = []
    for t in complete:
        if len(out) >= k:
            break
        config = PipelineConfig.from_dict(t.user_attrs["config"])
        if key(config) in seen:
            continue
        seen.add(key(config))
        name = t.user_attrs.get("baseline") or f"trial {t.number}"
        out.append((name if name != "autotune" else f"trial {t.number}", config))
    return out


def summarize_trials(study: optuna.Study) -> list[dict[str, object]]:
    """Every trial as a JSON-ready row (number, state, value, config, spread, error, the
    trial a duplicate was not measured for, the windows a timeout cut)."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        rows.append(
            {
                "number": t.number,
                "state": state_name(t),
                "value": t.value,
                "baseline": t.user_attrs.get("baseline"),
                "params": dict(t.params),
                "median": t.user_attrs.get("median_examples_per_s"),
                "min": t.user_attrs.get("min_examples_per_s"),
                "max": t.user_attrs.get("max_examples_per_s"),
                "cv": t.user_attrs.get("cv"),
                "error": t.user_attrs.get("error"),
                "duplicate_of": t.user_attrs.get("duplicate_of"),
                "windows_cut_by_timeout": t.user_attrs.get("windows_cut_by_timeout"),
                "retried_from": t.system_attrs.get(
                    "failed_trial", t.user_attrs.get("retried_from")
                ),
                "duration_s": t.duration.total_seconds() if t.duration else None,
            }
        )
    return rows
