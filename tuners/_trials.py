"""Who runs a study's trials, and reading them.

- **Workers** (`tag_worker`, `requeue_dead_workers`): every trial records its worker
  (``host:pid``, and the PID namespace: containers may share a host name). When a study
  is opened, a RUNNING trial of a process of this host that no longer exists (a restart
  within the storage's grace period, or the journal storage, which has no heartbeats) is
  failed and its parameters are enqueued again, once. Trials of other hosts are left to
  the storage's heartbeat (RDB storages).
- **Trials** (`summarize_trials`, `top_configs`, ...): which count towards ``n_trials``,
  failures in a row, the progress of a trial, the best distinct configs, one JSON row per
  trial.
- **No config measured twice** (`measured_twin`, `taken_configs`): the pipeline a
  trial's config builds compared with those of the trials measured, or being measured,
  in the study.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tfinput.config import PipelineConfig

if TYPE_CHECKING:
    import optuna

log = logging.getLogger("tfinput.tuners")


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
