"""Who runs a trial: worker ids, and the RUNNING trials of workers that died.

Every trial records its worker (``host:pid``, and the PID namespace: containers may
share a host name). When a study is opened, a RUNNING trial of a process of this host
that no longer exists (a restart within the storage's grace period, or the journal
storage, which has no heartbeats) is failed and its parameters are enqueued again,
once. Trials of other hosts are left to the storage's heartbeat (RDB storages).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import optuna

__all__ = ["worker_id", "pid_namespace", "pid_alive", "tag_worker", "requeue_dead_workers"]

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
