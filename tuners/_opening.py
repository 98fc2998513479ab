"""Where `tuners.tune`'s study is opened and left: the storage (Optuna quiet), the
study's name, the sampler and the pruner, the baselines enqueued once per study, and the
trials Ctrl-C stopped enqueued again for a resumed study."""

from __future__ import annotations

import logging
import os
import time
import warnings
from typing import TYPE_CHECKING, Any

from tfinput.errors import ConfigError
from tuners._method import describe_step
from tuners._storage import host_lock, make_storage, open_study
from tuners._trials import requeue_dead_workers

if TYPE_CHECKING:  # pragma: no cover
    import optuna

    from tuners._search import Tuning

log = logging.getLogger("tfinput.tuners")


def open_storage(storage: Any, *, heartbeat_interval: int, grace_period: int) -> Any:
    """`make_storage`, Optuna quiet (warnings and up; its heartbeats are "experimental"
    since Optuna 2.8)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return make_storage(
            storage, heartbeat_interval=heartbeat_interval, grace_period=grace_period
        )


def study_name_for(study_name: str | None, storage: Any) -> str:
    """The given name, or a fresh one for an in-memory study."""
    if study_name is not None:
        return study_name
    if storage is not None:
        raise ConfigError("a study stored in a file or database needs a study_name")
    return f"tfinput-{time.strftime('%Y%m%d-%H%M%S')}"


def process_seed() -> int:
    """A seed for this process's sampler, drawn from the operating system: workers that
    share a study, and a study resumed after Ctrl-C, each propose their own configs
    (with one seed they would propose the same ones, in the same order)."""
    return int.from_bytes(os.urandom(4), "little") >> 1


def default_sampler(seed: int | None) -> Any:
    """Seeded multivariate TPE with the constant liar (parallel workers)."""
    import optuna

    return optuna.samplers.TPESampler(
        seed=seed, multivariate=True, constant_liar=True, n_startup_trials=8
    )


def default_pruner() -> Any:
    """`tuners._objective.NoiseAwarePruner`: bottom quarter beyond the measured noise."""
    from tuners._objective import NoiseAwarePruner

    return NoiseAwarePruner(quantile=0.25, n_startup_trials=4, n_warmup_steps=1)


def open_tuning_study(run: Tuning, storage: Any, **study: Any) -> Any:
    """Open the study (`tuners._storage.open_study` with ``study``'s arguments), requeue
    the trials of dead workers of this host, record the space and the step, and enqueue
    the baselines once. All under the host lock, which keeps two workers on one host
    from enqueueing the baselines twice."""
    with host_lock(run.lock_path):
        opened = open_study(storage, **study)
        requeue_dead_workers(opened)
        opened.set_user_attr("space", run.space.to_dict())
        opened.set_user_attr("step", describe_step(run.step))
        for name, config in run.baselines.items():
            opened.enqueue_trial(
                run.space.params(config), user_attrs={"baseline": name}, skip_if_exists=True
            )
    return opened


def requeue_interrupted(study: optuna.Study, run: Tuning) -> list[int]:
    """Enqueue again the params of the trials of ``run`` that Ctrl-C stopped (once), so
    that a study kept in a storage measures them when it resumes; the numbers
    requeued."""
    import optuna

    requeued = []
    try:
        for number in run.interrupted:
            t = study.get_trials(deepcopy=False)[number]
            if t.state != optuna.trial.TrialState.FAIL:
                continue
            attrs = {k: t.user_attrs[k] for k in ("baseline",) if k in t.user_attrs}
            params = {**t.system_attrs.get("fixed_params", {}), **t.params}
            study.enqueue_trial(params, user_attrs={**attrs, "retried_from": t.number})
            requeued.append(number)
    except Exception as e:  # the storage failed mid-write (Ctrl-C landed inside it)
        log.warning(
            "the trials Ctrl-C stopped could not be enqueued again (%s); a resumed study "
            "samples new ones instead",
            e,
        )
    return requeued
