"""Reading a study's trials: which count towards ``n_trials``, failures in a row, the
progress of a trial, the best distinct configs, one JSON row per trial; and why a
trial (or a measurement) failed, in words."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from tfinput.config import PipelineConfig
from tfinput.errors import TfinputError

if TYPE_CHECKING:
    import optuna

    from tfinput.measure.target import Measurable

__all__ = [
    "explain_failure",
    "is_counted",
    "trailing_failures",
    "trial_info",
    "state_counts",
    "top_configs",
    "summarize_trials",
]


def explain_failure(pipeline: Measurable, error: BaseException) -> str:
    """Why a trial or measurement failed, in one line: tfinput's own message, "out of
    memory", or the error's type and its cleaned-up message (`tfinput.errors.clean_error`).
    """
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
    (a trial failed because its worker died, or stopped by Ctrl-C, is retried instead)."""
    import optuna

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
) -> dict[str, Any]:
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
        "state": trial.state.name.lower(),
        "value": trial.value,
        "done": len(done),
        "total": n_trials,
        "best": best,
        "baseline": trial.user_attrs.get("baseline"),
        "error": trial.user_attrs.get("error"),
        "params": dict(trial.params),
    }


def state_counts(study: optuna.Study) -> dict[str, int]:
    """Trial counts by state (``complete``, ``pruned``, ``fail``, ``running``...)."""
    states: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        states[t.state.name.lower()] = states.get(t.state.name.lower(), 0) + 1
    return states


def top_configs(study: optuna.Study, k: int) -> list[tuple[str, PipelineConfig]]:
    """The ``k`` best distinct configs of the completed trials, as ``(name, config)``
    (a baseline's name, or ``trial N``; autotune's trial is named by its number)."""
    import optuna

    complete = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state == optuna.trial.TrialState.COMPLETE and "config" in t.user_attrs
    ]
    complete.sort(key=lambda t: t.value, reverse=True)
    out: list[tuple[str, PipelineConfig]] = []
    for t in complete:
        config = PipelineConfig.from_dict(t.user_attrs["config"])
        if all(config != c for _, c in out):
            name = t.user_attrs.get("baseline") or f"trial {t.number}"
            out.append((name if name != "autotune" else f"trial {t.number}", config))
        if len(out) >= k:
            break
    return out


def summarize_trials(study: optuna.Study) -> list[dict[str, Any]]:
    """Every trial as a JSON-ready row (number, state, value, config, spread, error)."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        rows.append(
            {
                "number": t.number,
                "state": t.state.name.lower(),
                "value": t.value,
                "baseline": t.user_attrs.get("baseline"),
                "params": dict(t.params),
                "median": t.user_attrs.get("median_examples_per_s"),
                "min": t.user_attrs.get("min_examples_per_s"),
                "max": t.user_attrs.get("max_examples_per_s"),
                "cv": t.user_attrs.get("cv"),
                "error": t.user_attrs.get("error"),
                "retried_from": t.system_attrs.get(
                    "failed_trial", t.user_attrs.get("retried_from")
                ),
                "duration_s": t.duration.total_seconds() if t.duration else None,
            }
        )
    return rows
