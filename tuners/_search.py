"""The search of `tuners.tune`: its settled arguments (`Tuning`, the objective), the
baselines, opening the storage and the study, and the trials. `tuners._study` is the
public API."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gc
import logging
import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from tfinput._src.measurement.target import Target
from tfinput._src.measurement.windows import WindowPlan
from tfinput.config import PipelineConfig
from tfinput.errors import DataError, TfinputError
from tfinput.steps import Step
from tuners._budget import Budget, stopped_by_timeout
from tuners._confirm import (
    Progress,
    Remeasure,
)
from tuners._objective import Measurement, measure_target
from tuners._result import (
    TrialsFailedError,
)
from tuners._space import SearchSpace, nearest_unmeasured, pipeline_key, space_for_target
from tuners._storage import explain_failure, host_lock, is_interrupt, is_locked
from tuners._trials import (
    is_counted,
    is_duplicate,
    measured_twin,
    state_name,
    summarize_trials,
    tag_worker,
    taken_configs,
    trailing_failures,
    trial_info,
)

if TYPE_CHECKING:  # pragma: no cover
    import optuna

log = logging.getLogger("tfinput.tuners")


class DuplicateTrial(Exception):
    """Ends a trial whose config the study measured already, or is measuring: Optuna
    records it failed (`tuners._trials.is_duplicate` tells it apart; it does not count
    towards ``n_trials``, and samplers leave failed trials out)."""


class StorageLocked(BaseException):
    """Raised by a trial when the study's SQLite database is locked by another writer
    (`tuners._storage.is_locked`). Not an ``Exception``, so that Optuna does not catch
    it and wait out the lock again to record the trial failed: `tuners.tune` turns it
    into a `tuners.StudyLockedError` with the trials done."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _row(
    trial: optuna.Trial, state: str, value: float | None, attrs: Mapping[str, Any]
) -> dict[str, object]:
    """A `tuners._trials.summarize_trials` row of a trial this call measured."""
    return {
        "number": trial.number,
        "state": state,
        "value": value,
        "baseline": trial.user_attrs.get("baseline"),
        "params": dict(trial.params),
        "median": attrs.get("median_examples_per_s"),
        "min": attrs.get("min_examples_per_s"),
        "max": attrs.get("max_examples_per_s"),
        "cv": attrs.get("cv"),
        "error": None,
        "duplicate_of": None,
        "windows_cut_by_timeout": attrs.get("windows_cut_by_timeout"),
        "retried_from": trial.user_attrs.get("retried_from"),
        "duration_s": attrs.get("seconds"),
        "config": trial.user_attrs.get("config"),
    }


# ---------------------------------------------------------------- baselines
def baseline_configs(
    base: PipelineConfig,
    *,
    cpu_count: int,
    current: PipelineConfig | None = None,
    step: Step | Callable[[Any], object] | None = None,
) -> dict[str, PipelineConfig]:
    """``autotune``, ``heuristic`` (and ``current``) with the user's batch settings.

    Both presets set the feeding knobs explicitly to what a plain training loop does:
    ``layout="per_feature"``, ``steps_per_execution=1``, ``device_prefetch=0``, and for
    a ``step`` that feeds SparseCore (``Step.feeds_sparsecore``)
    ``sparsecore_workers=0`` (the preprocessing on the training thread, as keras-rs's
    generator example does).
    """
    keep = {
        k: getattr(base, k)
        for k in (
            "batch_size",
            "drop_remainder",
            "shuffle_buffer",
            "shuffle_seed",
            "autotune_ram_budget",
        )
    }
    # The feeding knobs as a plain training loop has them: one tensor per feature, one
    # step per call, no device prefetch, SparseCore preprocessing on the training thread.
    feeding = {"layout": "per_feature", "steps_per_execution": 1, "device_prefetch": 0}
    if Step.of(step).feeds_sparsecore:
        feeding["sparsecore_workers"] = 0
    out = {
        "autotune": PipelineConfig.autotune(**keep, **feeding),
        "heuristic": PipelineConfig.heuristic(cpu_count=cpu_count, **keep, **feeding),
    }
    if current is not None:
        out["current"] = current
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tuning:
    """What the steps of one `tune` call share, defaults settled; called on an Optuna
    trial, it is the objective."""

    target: Target
    step: Step
    space: SearchSpace
    base: PipelineConfig
    current: PipelineConfig | None
    baselines: Mapping[str, PipelineConfig]
    cpu_count: int
    plan: WindowPlan
    clocks: Mapping[str, Callable[[], float]]
    lock_path: str | None
    progress: Progress | None
    #: The run's time (`tuners._budget.Budget`): the trials count into it, and stop
    #: after the window that passes the search's share.
    budget: Budget
    #: Set by a trial that found the data smaller than one batch: the search stops.
    too_small: list[str] = dataclasses.field(default_factory=list)
    #: Set by a trial whose proposal was measured when every config of the space is
    #: measured (or being measured): the search stops.
    exhausted: list[str] = dataclasses.field(default_factory=list)
    #: The trials this call measured, and the study's trials as last read after a
    #: trial (`tuners._trials.summarize_trials` rows): what a study whose database is
    #: locked reports (it cannot be read back then).
    measured: dict[int, dict[str, object]] = dataclasses.field(default_factory=dict)
    seen: list[dict[str, object]] = dataclasses.field(default_factory=list)
    #: Trials of this call that failed (the first one's traceback is logged).
    failures: list[int] = dataclasses.field(default_factory=list)
    #: Trials of this call stopped by Ctrl-C (`requeue_interrupted` enqueues them again).
    interrupted: list[int] = dataclasses.field(default_factory=list)

    @classmethod
    def settle(
        cls,
        target: Target,
        *,
        step: Step | Callable[[Any], object] | None,
        space: SearchSpace | None,
        base: PipelineConfig | None,
        current: PipelineConfig | None,
        cpu_count: int | None,
        plan: WindowPlan,
        clocks: Mapping[str, Callable[[], float]],
        lock_path: str | None,
        progress: Progress | None,
        budget: Budget,
    ) -> Tuning:
        """The defaults of `tune`: input only, the available cores, ``current`` or
        ``PipelineConfig()`` as the base, the default space widened to the baselines."""
        from tfinput._src.measurement.probes import available_cpus

        step = Step.of(step)
        cores = cpu_count or available_cpus()
        base = base or current or PipelineConfig()
        if space is None:
            space = space_for_target(target, cpu_count=cores, step=step)
        baselines = baseline_configs(base, cpu_count=cores, current=current, step=step)
        return cls(
            target=target,
            step=step,
            space=space.including(*baselines.values()),
            base=base,
            current=current,
            baselines=baselines,
            cpu_count=cores,
            plan=plan,
            clocks=clocks,
            lock_path=lock_path,
            progress=progress,
            budget=budget,
        )

    def __call__(self, trial: optuna.Trial) -> float:
        """One trial: a config from the space (a baseline exactly as the user has it),
        measured under the host lock, every window reported to the pruner; not measured
        when the study measured that config already, or is measuring it (`_duplicate`).
        A trial whose next window would not fit in the search's share of the timeout
        stops after its current window, and its value is the median of the windows it
        has."""
        import optuna

        cut: list[int] = []

        def report(i: int, rate: float) -> bool:
            took = self.budget.window_done()
            trial.report(rate, i)
            if trial.should_prune():
                return True
            # The next window, as long as this one (the first also built the iterator
            # and warmed it up: the windows measured so far, then).
            following = took if i > 0 else self.budget.window_s()
            if i + 1 < self.plan.windows and self.budget.search_left() < following:
                cut.append(i + 1)
                return True
            return False

        twin = None
        try:
            # Inside the try: a Ctrl-C that lands while the worker is recorded (two
            # storage writes) is the trial's interrupt too, recorded as such below.
            tag_worker(trial)
            config = self.space.suggest(trial, self.base)
            name = trial.user_attrs.get("baseline")
            if name in self.baselines:  # measure the baseline exactly as the user has it
                config = self.baselines[name]
            trial.set_user_attr("config", config.to_dict())
            with host_lock(self.lock_path):
                # No other trial of this host measures while the lock is held, and each
                # records its measurement before it lets go: a config measured, or being
                # measured on another host, is found here and not measured again.
                key = self._key(config.to_dict())
                twin = measured_twin(trial.study, trial, key, self._recorded_key)
                if twin is None:
                    m, attrs = self._measure(trial, config, report, cut)
        except KeyboardInterrupt as interrupt:
            self._interrupted(trial, interrupt)
            raise
        except (TfinputError, MemoryError, Exception) as e:
            if is_interrupt(e):  # Ctrl-C inside TensorFlow's C++, wrapped by pybind11
                self._interrupted(trial, e)
                raise KeyboardInterrupt from None
            if is_locked(e):  # the storage, not the config: no more writes to it
                raise StorageLocked(e) from e
            if isinstance(e, DataError) and "produced no batch" in str(e):
                # Every other config would fail the same way: stop, and say what to do.
                self.too_small.append(self._too_small(config))
                trial.study.stop()
            reason = explain_failure(self.target, e)
            trial.set_user_attr("error", reason)
            # The traceback once (the first failure; every one when the tuner's logger
            # is set to DEBUG, as the CLI's --verbose does); later failures one line each.
            first = not self.failures
            self.failures.append(trial.number)
            log.warning("trial %d failed: %s", trial.number, reason, exc_info=first or _verbose())
            raise
        if twin is not None:
            self._duplicate(trial, twin)
        state = "pruned" if m.stopped_early and not cut else "complete"
        self.measured[trial.number] = _row(
            trial, state, None if state == "pruned" else m.median, attrs
        )
        if m.stopped_early and not cut:
            raise optuna.TrialPruned(f"window rates {m.rates} pruned: a clear loser")
        return m.median

    def _measure(
        self,
        trial: optuna.Trial,
        config: PipelineConfig,
        report: Callable[[int, float], bool],
        cut: list[int],
    ) -> tuple[Measurement, dict[str, object]]:
        """``config`` measured for ``trial`` (its windows counted in the budget): the
        measurement and the attributes recorded on the trial."""
        trial.set_user_attr("measuring", True)
        self.budget.mark()
        m = measure_target(
            self.target, config, self.step, plan=self.plan, report=report, **self.clocks
        )
        if m.stopped_early:  # its last window was reported: its end follows
            self.budget.measurement_done()
        else:  # the last window is not reported: it counts with its end
            self.budget.window_done()
        self.budget.record(m)
        attrs = m.to_attrs()
        if cut:
            attrs["windows_cut_by_timeout"] = f"{cut[0]} of {self.plan.windows}"
        for attr, value in attrs.items():
            trial.set_user_attr(attr, value)
        return m, attrs

    def _duplicate(self, trial: optuna.Trial, twin: optuna.trial.FrozenTrial) -> NoReturn:
        """End ``trial`` unmeasured: ``twin`` measured its config, or is measuring it.
        The nearest config of the space that the study holds nowhere is enqueued instead
        (the next trial, of any worker, measures it); when there is none, every config
        of the space is measured and the search stops."""
        study = trial.study
        trial.set_user_attr("duplicate_of", twin.number)
        taken = taken_configs(study, self._planned_key)
        rng = random.Random(f"{trial.number}:{sorted(trial.params.items())}")
        instead, exhausted = nearest_unmeasured(
            self.space,
            trial.params,
            lambda p: self._key(self.space.config(p, self.base).to_dict()) in taken,
            rng,
        )
        what = (
            f"trial {trial.number}: not measured, its config is trial {twin.number}'s "
            f"({state_name(twin)})"
        )
        if instead is not None:
            study.enqueue_trial(instead, user_attrs={"instead_of": trial.number})
            changed = ", ".join(
                f"{k}={v}" for k, v in sorted(instead.items()) if trial.params.get(k) != v
            )
            log.info("%s; the nearest config not measured is next (%s)", what, changed)
        elif exhausted:
            size = self.space.size()
            note = (
                f"the search stopped: every one of the {size:,} configs of the search space "
                "is measured or being measured"
            )
            if note not in self.exhausted:
                self.exhausted.append(note)
            log.info("%s; %s", what, note)
            study.stop()
        else:
            log.info("%s; the sampler proposes again", what)
        raise DuplicateTrial(what)

    def _key(self, config: Mapping[str, Any]) -> str:
        """`tuners._space.pipeline_key` of a config of this target."""
        return pipeline_key(config, layout=self.target.layout)

    def _recorded_key(self, trial: optuna.trial.FrozenTrial) -> str | None:
        """The key of the config ``trial`` recorded (None before it recorded one)."""
        config = trial.user_attrs.get("config")
        return None if config is None else self._key(config)

    def _planned_key(self, trial: optuna.trial.FrozenTrial) -> str:
        """The key of the config ``trial`` measures: the one it recorded, else a
        baseline's as the user has it, else its params (enqueued or suggested) in the
        space."""
        recorded = self._recorded_key(trial)
        if recorded is not None:
            return recorded
        name = trial.user_attrs.get("baseline")
        if name in self.baselines:
            return self._key(self.baselines[name].to_dict())
        params = {**trial.system_attrs.get("fixed_params", {}), **trial.params}
        return self._key(self.space.config(params, self.base).to_dict())

    def _interrupted(self, trial: optuna.Trial, interrupt: BaseException) -> None:
        """Record that Ctrl-C stopped ``trial``: not the config's fault, so the trial
        does not count towards n_trials, and a study kept in a storage measures it again
        when it resumes."""
        self.interrupted.append(trial.number)
        # Ctrl-C may have landed inside a read of the storage: the interrupted frames
        # hold its open cursor, and on SQLite its lock, for as long as the traceback
        # lives, so every write after it (these, and Optuna's tell) would wait out the
        # busy timeout and fail. The frames go first; the interrupt goes on.
        interrupt.with_traceback(None)
        gc.collect()
        # Best effort: a write to the storage that Ctrl-C cut short fails here.
        with contextlib.suppress(Exception):
            trial.set_user_attr("interrupted", True)
            trial.set_user_attr("error", "interrupted (Ctrl-C) before it finished")

    def refuse_data_smaller_than_a_batch(self) -> None:
        """Before the first trial: the data must hold one batch of every batch size the
        search may try (the files' counts: Parquet footers, columnar manifests, the
        first records of TFRecord files; a source that cannot count is left to the
        first trial, which stops the search the same way).

        Raises:
          DataError: fewer rows than one batch (with ``drop_remainder``), or none.
        """
        sizes = [self.base.batch_size, *self.space.choices.get("batch_size", ())]
        config = dataclasses.replace(self.base, batch_size=min(int(b) for b in sizes))
        try:
            rows = self.target.rows_up_to(config.batch_size)
        except Exception:  # unreadable or missing files: the first trial names them
            return
        if rows is None:
            return
        if rows == 0 or (config.drop_remainder and rows < config.batch_size):
            raise DataError(self._too_small(config, rows))

    def _too_small(self, config: PipelineConfig, rows: int | None = None) -> str:
        """The error for data smaller than one batch of ``config``, with its rows."""
        if rows is None and self.target.pipeline is not None:
            try:
                rows = self.target.pipeline.check(batch_size=config.batch_size).records
            except Exception:  # the count is a courtesy; the advice stands without it
                rows = None
        held = f"{rows:,} rows" if rows is not None else "fewer rows"
        fit = f" (at most {rows:,})" if rows else ""
        return (
            f"tune: the data hold {held}, fewer than one batch of {config.batch_size:,} "
            "(a partial batch is dropped): tune with the batch size you train with, "
            f"--batch-size N{fit}, or on more data"
        )

    def remeasure(self, windows: int) -> Remeasure:
        """The measurement of the steps after the search: ``windows`` per config."""
        return Remeasure(
            target=self.target,
            step=self.step,
            plan=self.plan,
            windows=windows,
            cpu_count=self.cpu_count,
            clocks=self.clocks,
            budget=self.budget,
        )

    def look(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Optuna callback: keep the study's trials as they are now (`seen`)."""
        self.seen[:] = summarize_trials(study)


#: Proposals in a row of configs already measured after which the search stops (each
#: enqueues the nearest config not measured, so this is reached only when none is
#: found near the proposals of a large space).
MAX_DUPLICATES_IN_A_ROW = 20


class _StopRule:
    """Optuna callback: stop once ``n_trials`` trials count (`tuners._trials.is_counted`),
    when one more trial does not fit in the search's share of the timeout
    (`tuners._budget.Budget.trial_fits`), or after ``max_consecutive_failures``
    failed in a row since it was made (a resumed study whose step was fixed searches
    again); ``reason`` then says why."""

    def __init__(self, *, n_trials: int, max_consecutive_failures: int, budget: Budget) -> None:
        self.n_trials = n_trials
        self.max_consecutive_failures = max_consecutive_failures
        self.budget = budget
        self.since = datetime.datetime.now()
        self.reason: str | None = None
        self.out_of_time = False

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        trials = study.get_trials(deepcopy=False)
        if sum(1 for t in trials if is_counted(t)) >= self.n_trials:
            study.stop()
            return
        if not self.budget.trial_fits():
            self.out_of_time = True
            study.stop()
            return
        repeats = 0
        for t in reversed(trials):
            if not is_duplicate(t):
                break
            repeats += 1
        if repeats >= MAX_DUPLICATES_IN_A_ROW:
            if self.reason is None:
                self.reason = (
                    f"the search stopped after {repeats} proposals in a row of configs "
                    "already measured: the sampler finds nothing new near the best configs"
                )
            study.stop()
            return
        failed = trailing_failures(trials, since=self.since)
        if len(failed) >= self.max_consecutive_failures:
            if self.reason is None:
                self.reason = (
                    f"the search stopped after {len(failed)} failed trials in a row; the "
                    f"last error: {failed[-1].user_attrs.get('error')}"
                )
            study.stop()


def search_trials(
    study: optuna.Study,
    run: Tuning,
    *,
    n_trials: int,
    max_consecutive_failures: int,
) -> tuple[float, list[str]]:
    """Run the trials still missing (every worker of a shared study stops at the total),
    within the search's share of the run's timeout (``run.budget``: the first trial
    starts whatever is left).

    Returns:
      ``(seconds, notes)``: the search's time (on the run's clock) and, when it
      stopped before ``n_trials`` (too many failures in a row, the timeout, every
      config measured), a note saying so.

    Raises:
      DataError: the data hold fewer rows than one batch.
      TrialsFailedError: no trial completed.
    """
    import optuna

    finished = sum(1 for t in study.get_trials(deepcopy=False) if is_counted(t))
    progress = run.progress
    t0 = run.budget.elapsed()
    stop = _StopRule(
        n_trials=n_trials, max_consecutive_failures=max_consecutive_failures, budget=run.budget
    )
    callbacks: list[Any] = [run.look, stop]
    if progress is not None:
        callbacks.append(lambda s, t: progress("trial", trial_info(s, t, n_trials)))
    if finished < n_trials and run.budget.search_left() > 0:
        # Optuna logs every failed trial with its traceback; the objective logs each
        # failure itself (the traceback once), so Optuna's records of them are dropped.
        optimize_log = logging.getLogger("optuna.study._optimize")
        optimize_log.addFilter(_drop_failed_trial_records)
        try:
            study.optimize(run, n_trials=None, catch=(Exception,), callbacks=callbacks)
        finally:
            optimize_log.removeFilter(_drop_failed_trial_records)
    seconds = run.budget.elapsed() - t0
    if run.too_small:
        raise DataError(run.too_small[0])
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        errors = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("error")]
        if not errors and run.budget.limited and run.budget.left() <= 0:
            raise TrialsFailedError(
                f"tune: no trial completed within the timeout of {run.budget.timeout:g} s "
                f"(a trial measures {run.plan.windows} windows after its warm-up): raise "
                "--timeout, or lower --windows or --window-seconds",
                study=study,
            )
        last = errors[-1].user_attrs["error"] if errors else "no trial finished"
        raise TrialsFailedError(
            f"tune: no trial completed ({len(errors)} failed); every config failed, so the "
            f"step or the pipeline is broken. The last error: {last}",
            study=study,
        )
    notes = []
    counted = sum(1 for t in study.get_trials(deepcopy=False) if is_counted(t))
    out_of_time = stop.out_of_time or run.budget.search_left() <= 0
    timed_out = None
    if out_of_time and not stop.reason and not run.exhausted:
        timed_out = stopped_by_timeout(counted=counted, n_trials=n_trials, budget=run.budget)
    cut = [t.number for t in complete if t.user_attrs.get("windows_cut_by_timeout")]
    if cut:
        timed_out = (timed_out + "; " if timed_out else "") + (
            f"trial{'s' if len(cut) > 1 else ''} {', '.join(map(str, cut))} stopped before "
            "its last window to keep the timeout (its value is the median of the windows "
            "it measured)"
        )
    for reason in (stop.reason, *run.exhausted, timed_out):
        if reason:
            log.warning("%s", reason)
            notes.append(reason)
    return seconds, notes


def _verbose() -> bool:
    """Whether the tuner's logger (or tfinput's) is set to DEBUG: every failed trial's
    traceback is logged, not only the first."""
    return any(
        logging.NOTSET < logging.getLogger(name).level <= logging.DEBUG
        for name in ("tfinput", "tfinput.tuners")
    )


def _drop_failed_trial_records(record: logging.LogRecord) -> bool:
    """False for Optuna's "Trial N failed with ..." records (logging filter)."""
    message = str(record.msg)
    return not (message.startswith("Trial ") and " failed with " in message)
