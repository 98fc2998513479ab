"""The study: sampler, pruner, storage, baselines, search. `tune` is the API.

    result = tuners.tune(pipeline, step=steps.simulated_step(0.02), n_trials=30)
    result.best_config.to_json("best.json", **result.record())
    ds = pipeline.build(PipelineConfig.from_json("best.json"))

What happens:

1. **Baselines first.** ``autotune``, ``heuristic`` and the user's current config are
   enqueued as the first trials, so the result is never worse than what the user had.
2. **Search.** TPE (multivariate, constant liar; seeded) proposes configs from the
   `SearchSpace`; each trial is `objective.measure` — fresh iterator, warm-up, several
   windows — and reports every window; a trial whose best window so far is below the
   bottom quarter of the finished trials at that window by more than the study's
   measured window-to-window spread is pruned (`tuners.pruning.NoiseAwarePruner`):
   clear losers stop early, near-ties are measured to the end. A trial that raises
   (bad config, out of memory) is recorded as failed with the reason and counts
   towards ``n_trials``; the study goes on, but stops after
   ``max_consecutive_failures`` failures in a row, and `TrialsFailedError` (naming
   the error) is raised when no trial at all completed.
3. **One trial per host at a time.** Trials hold an exclusive host-wide file lock
   (`tuners.storage.host_lock`) while they measure, so several workers on one machine
   never fight for the CPUs they measure; workers on other hosts share the study
   through the storage.
4. **Confirmation** (`tuners.confirm`). The top configs are measured again, interleaved
   window by window with ``autotune`` (and the current config) by
   `tfinput.bench.measure`, and the winner is the best *confirmed* median. The reported ratio is that of the confirmed
   medians, per round, so noise in the search does not inflate it. If the
   confirmation raises, it is run once more; if it fails again, the result is the
   best trial of the search, marked unconfirmed (``confirmation_error``).
5. **Verdicts** (`tuners.advice`): whether the winner beats autotune beyond the noise
   (every round's paired ratio above 1; otherwise "keep autotune"), and whether the step
   is input-bound at all (input wait under 3%: "input is not your bottleneck"; a step
   that owns its loop, ``model.fit``, gets the wait from its step bound, measured on one
   cached batch repeated).
6. **Gain by knob** (``breakdown``): the winner re-measured with each differing knob
   group reverted to autotune's values, interleaved.
7. **Format advice** (``advise_format``): tf.Example data whose parse stage is the bound
   get a 2-file sample converted to columnar records and measured side by side, with the
   ``tfinput convert`` command (docs/tuning.md).

Storage (`tuners.storage`): None (in memory); a path ending in ``.db``/``.sqlite`` or a
``sqlite:///`` URL (one host, resumable); a path ending in ``.log``/``.journal`` (a
journal file, several processes on one host, resumable); a ``postgresql://`` URL
(several hosts). RDB storages get heartbeats: a trial whose worker died is failed after
the grace period and retried once by another worker. Every trial records its worker
(`tuners.workers`: ``host:pid``, and the PID namespace: containers may share a host
name); when a study is opened, a RUNNING trial of a process of this host that no longer
exists (a restart within the grace period, or the journal storage, which has no
heartbeats) is failed and its parameters are enqueued again, once.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from tfinput.bench import WindowPlan
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, DataError, TfinputError
from tfinput.measure.target import Target
from tfinput.steps import Step
from tuners.advice import clock_kwargs
from tuners.confirm import (
    Progress,
    Remeasure,
    advice_sentences,
    confirm,
    confirmation_configs,
    gain_by_knob,
    pick_winner,
    revert_hurting_groups,
    serial_sentence,
    service_sizing,
    verdicts,
    winner_format_advice,
    winner_roofline,
)
from tuners.objective import measure
from tuners.result import (
    TrialsFailedError,
    TuneResult,
    describe_method,
    describe_step,
    fingerprint,
)
from tuners.space import SearchSpace
from tuners.storage import GRACE_PERIOD, HEARTBEAT_INTERVAL, host_lock, make_storage, open_study
from tuners.trials import (
    explain_failure,
    is_counted,
    state_counts,
    top_configs,
    trailing_failures,
    trial_info,
)
from tuners.trials import summarize_trials as summarize_trials  # importable from here
from tuners.workers import requeue_dead_workers, tag_worker

__all__ = [
    "tune",
    "TuneResult",
    "TrialsFailedError",
    "make_storage",
    "host_lock",
    "baseline_configs",
]

log = logging.getLogger("tfinput.tuners")

MAX_CONSECUTIVE_FAILURES = 5


# ---------------------------------------------------------------- baselines
def baseline_configs(
    base: PipelineConfig,
    *,
    cpu_count: int,
    current: PipelineConfig | None = None,
    step: Any = None,
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


# -------------------------------------------------------------------- tune
def tune(
    pipeline: Any,
    *,
    step: Callable[[Any], Any] | None = None,
    n_trials: int = 30,
    timeout: float | None = None,
    storage: Any = None,
    study_name: str | None = None,
    load_if_exists: bool = True,
    space: SearchSpace | None = None,
    base: PipelineConfig | None = None,
    current: PipelineConfig | None = None,
    windows: int = 5,
    window_batches: int = 20,
    warmup_batches: int = 5,
    confirm_top: int = 3,
    confirm_windows: int = 5,
    sampler: Any = None,
    pruner: Any = None,
    seed: int | None = 0,
    cpu_count: int | None = None,
    progress: Callable[[str, dict[str, Any]], None] | None = None,
    lock_path: str | None = None,
    heartbeat_interval: int = HEARTBEAT_INTERVAL,
    grace_period: int = GRACE_PERIOD,
    max_consecutive_failures: int = MAX_CONSECUTIVE_FAILURES,
    clock: Callable[[], float] | None = None,
    cpu_clock: Callable[[], float] | None = None,
    breakdown: bool = True,
    advise_format: bool = True,
    schema_path: str | None = None,
    target_rate: float | None = None,
) -> TuneResult:
    """Search pipeline configs against a training step and confirm the winner.

    Args:
      pipeline: A `tfinput.Pipeline` (anything with ``build(config)``).
      step: A `tfinput.steps.Step` or callable run on every batch (default: input only).
      n_trials: Trials to finish (complete, pruned, or failed because the step or
        pipeline raised), baselines included, summed over every worker of a shared
        study. Each trial costs about
        ``warmup_batches + windows * window_batches`` steps.
      timeout: Stop searching after this many seconds (None: no limit).
      storage: None, a path or a URL (see the module docstring), or an Optuna storage.
      study_name: Name in the storage (default: a fresh name for in-memory studies;
        required to share or resume one).
      load_if_exists: Resume the named study if the storage already holds it.
      space: The `SearchSpace` (default: `SearchSpace.default` for this machine).
      base: Values of knobs that are not searched, batch size included (default:
        ``current`` or ``PipelineConfig()``).
      current: The user's current config, measured as a baseline.
      windows, window_batches, warmup_batches: The measurement (see `measure`).
      confirm_top: Distinct best configs re-measured against ``autotune`` at the end.
      confirm_windows: Interleaved windows per config in the confirmation.
      sampler, pruner: Optuna overrides (default: seeded multivariate TPE;
        `tuners.pruning.NoiseAwarePruner`: bottom quarter beyond the measured noise,
        after one window).
      seed: Sampler seed.
      cpu_count: Cores for the default space and the heuristic baseline.
      progress: ``progress(event, info)`` for display (events: ``trial``, ``confirm``).
      lock_path: Host lock file (default: one per user in the temp directory).
      heartbeat_interval, grace_period: Seconds between a running trial's heartbeats,
        and of silence after which another worker fails and retries it (RDB storages).
      max_consecutive_failures: Stop searching after this many failed trials in a
        row (by every worker together): a step or pipeline that always raises ends the
        study instead of failing forever. Higher tolerates search spaces with many
        configs that do not fit (out of memory); lower gives up sooner.
      clock, cpu_clock: Injectable wall and process CPU clocks for every measurement
        (tests pass fakes; default: the real ones).
      breakdown: After the confirmation, when the winner differs from autotune,
        measure the gain by knob group (`tuners.advice.knob_breakdown`: the winner
        with each differing group reverted, interleaved; one more confirmation's
        worth of windows per group, at most six groups).
      advise_format: For tf.Example TFRecord data whose parse stage is the bound,
        convert a sample (at most 2 files, in a temporary directory) to columnar
        records and measure both side by side (`tuners.advice.format_advice`: a few
        seconds of roofline, the conversion, 3 short windows each).
      schema_path: The pipeline's schema file, for the ``tfinput convert`` command of
        the format advice.
      target_rate: Examples/s the training needs. For a pipeline read through tf.data
        service (`Pipeline.with_service`) the advice then says how many workers the
        winner's confirmed rate implies for it (`tfinput.fleet.workers_needed`).

    Returns:
      A `TuneResult`.

    Raises:
      ConfigError: bad space, storage or counts.
      DataError: the data hold fewer rows than one batch (found by the first trial,
        which stops the search; the message gives the row count).
      TrialsFailedError: no trial completed (the step or pipeline always raises).
    """
    _check_counts(
        n_trials=n_trials,
        windows=windows,
        window_batches=window_batches,
        max_consecutive_failures=max_consecutive_failures,
    )
    plan = WindowPlan.checked(
        "tune", warmup_batches=warmup_batches, windows=windows, window_batches=window_batches
    )
    run = _Tuning.settle(
        pipeline,
        step=step,
        space=space,
        base=base,
        current=current,
        cpu_count=cpu_count,
        plan=plan,
        clocks=clock_kwargs(clock, cpu_clock),
        lock_path=lock_path,
        progress=progress,
    )
    run.refuse_data_smaller_than_a_batch()
    storage_obj = _open_storage(
        storage, heartbeat_interval=heartbeat_interval, grace_period=grace_period
    )
    study = _open_study(
        run,
        storage_obj,
        shown=storage,
        study_name=_study_name(study_name, storage_obj),
        sampler=sampler or _default_sampler(seed),
        pruner=_default_pruner() if pruner is None else pruner,
        load_if_exists=load_if_exists,
    )
    search_seconds, notes = _search(
        study,
        run,
        n_trials=n_trials,
        timeout=timeout,
        in_memory=storage_obj is None,
        max_consecutive_failures=max_consecutive_failures,
    )
    outcome = _confirm_and_advise(
        study,
        run,
        confirm_top=confirm_top,
        confirm_windows=confirm_windows,
        breakdown=breakdown,
        advise_format=advise_format,
        schema_path=schema_path,
        notes=notes,
        target_rate=target_rate,
    )
    return TuneResult(
        study_name=study.study_name,
        trials=state_counts(study),
        seconds={"search": round(search_seconds, 1), **outcome.pop("seconds")},
        fingerprint=fingerprint(run.cpu_count),
        method=describe_method(
            plan, confirm_top=confirm_top, confirm_windows=confirm_windows, study=study
        ),
        step=describe_step(run.step),
        space=run.space.to_dict(),
        warnings=tuple(notes),
        packed_layout=_packed_layout(run.target, outcome["best_config"]),
        study=study,
        **outcome,
    )


def _packed_layout(target: Target, config: PipelineConfig) -> dict[str, Any] | None:
    """The JSON layout description when ``config`` builds packed batches."""
    layout = target.packed_layout(config)
    return layout.to_dict() if layout is not None else None


# --------------------------------------------------------------- the steps
def _check_counts(**counts: int) -> None:
    """Raise `ConfigError` for a count below 1."""
    for name, value in counts.items():
        if value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Tuning:
    """What the steps of one `tune` call share, defaults settled; called on an Optuna
    trial, it is the objective."""

    pipeline: Any
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
    #: Set by a trial that found the data smaller than one batch: the search stops.
    too_small: list[str] = dataclasses.field(default_factory=list)
    #: Trials of this call that failed (the first one's traceback is logged).
    failures: list[int] = dataclasses.field(default_factory=list)

    @classmethod
    def settle(
        cls,
        pipeline: Any,
        *,
        step: Any,
        space: SearchSpace | None,
        base: PipelineConfig | None,
        current: PipelineConfig | None,
        cpu_count: int | None,
        **fixed: Any,
    ) -> _Tuning:
        """The defaults of `tune`: input only, the available cores, ``current`` or
        ``PipelineConfig()`` as the base, the default space widened to the baselines."""
        from tfinput import bench

        step = Step.of(step)
        cores = cpu_count or bench.available_cpus()
        base = base or current or PipelineConfig()
        if space is None:
            space = SearchSpace.for_pipeline(pipeline, cpu_count=cores, step=step)
        baselines = baseline_configs(base, cpu_count=cores, current=current, step=step)
        return cls(
            pipeline=pipeline,
            target=Target.of(pipeline, what="tune"),
            step=step,
            space=space.including(*baselines.values()),
            base=base,
            current=current,
            baselines=baselines,
            cpu_count=cores,
            **fixed,
        )

    def __call__(self, trial: Any) -> float:
        """One trial: a config from the space (a baseline exactly as the user has it),
        measured under the host lock, every window reported to the pruner."""
        import optuna

        tag_worker(trial)

        def report(i: int, rate: float) -> bool:
            trial.report(rate, i)
            return trial.should_prune()

        try:
            config = self.space.suggest(trial, self.base)
            name = trial.user_attrs.get("baseline")
            if name in self.baselines:  # measure the baseline exactly as the user has it
                config = self.baselines[name]
            trial.set_user_attr("config", config.to_dict())
            with host_lock(self.lock_path):
                m = measure(
                    self.pipeline,
                    config,
                    self.step,
                    report=report,
                    **self.plan.to_dict(),
                    **self.clocks,
                )
        except (TfinputError, MemoryError, Exception) as e:
            if isinstance(e, DataError) and "produced no batch" in str(e):
                # Every other config would fail the same way: stop, and say what to do.
                self.too_small.append(self._too_small(config))
                trial.study.stop()
            reason = explain_failure(self.pipeline, e)
            trial.set_user_attr("error", reason)
            # The traceback once (the first failure; every one when the tuner's logger
            # is set to DEBUG, as the CLI's --verbose does); later failures one line each.
            first = not self.failures
            self.failures.append(trial.number)
            log.warning("trial %d failed: %s", trial.number, reason, exc_info=first or _verbose())
            raise
        for key, value in m.to_attrs().items():
            trial.set_user_attr(key, value)
        if m.stopped_early:
            raise optuna.TrialPruned(f"window rates {m.rates} pruned: a clear loser")
        return m.median

    def refuse_data_smaller_than_a_batch(self) -> None:
        """Before the first trial: the data must hold one batch of every batch size the
        search may try (the files' counts: Parquet footers, columnar manifests, the
        first records of TFRecord files; a source that cannot count is left to the
        first trial, which stops the search the same way).

        Raises:
          DataError: fewer rows than one batch (with ``drop_remainder``), or none.
        """
        source = self.target.source
        if source is None:
            return
        sizes = [self.base.batch_size, *self.space.choices.get("batch_size", ())]
        config = dataclasses.replace(self.base, batch_size=min(int(b) for b in sizes))
        try:
            files = source.files()
            rows = source.count_records_up_to(files, config.batch_size) if files else None
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
            pipeline=self.pipeline,
            step=self.step,
            plan=self.plan,
            windows=windows,
            cpu_count=self.cpu_count,
            clocks=self.clocks,
        )


def _open_storage(storage: Any, *, heartbeat_interval: int, grace_period: int) -> Any:
    """`make_storage`, Optuna quiet (warnings and up; its heartbeats are "experimental"
    since Optuna 2.8)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return make_storage(
            storage, heartbeat_interval=heartbeat_interval, grace_period=grace_period
        )


def _study_name(study_name: str | None, storage: Any) -> str:
    """The given name, or a fresh one for an in-memory study."""
    if study_name is not None:
        return study_name
    if storage is not None:
        raise ConfigError("a study stored in a file or database needs a study_name")
    return f"tfinput-{time.strftime('%Y%m%d-%H%M%S')}"


def _default_sampler(seed: int | None) -> Any:
    """Seeded multivariate TPE with the constant liar (parallel workers)."""
    import optuna

    return optuna.samplers.TPESampler(
        seed=seed, multivariate=True, constant_liar=True, n_startup_trials=8
    )


def _default_pruner() -> Any:
    """`tuners.pruning.NoiseAwarePruner`: bottom quarter beyond the measured noise."""
    from tuners.pruning import NoiseAwarePruner

    return NoiseAwarePruner(quantile=0.25, n_startup_trials=4, n_warmup_steps=1)


def _open_study(run: _Tuning, storage: Any, **study: Any) -> Any:
    """Open the study (`tuners.storage.open_study` with ``study``'s arguments), requeue
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


class _StopRule:
    """Optuna callback: stop once ``n_trials`` trials count (`tuners.trials.is_counted`),
    or after ``max_consecutive_failures`` failed in a row since it was made (a resumed
    study whose step was fixed searches again); ``reason`` then says why."""

    def __init__(self, *, n_trials: int, max_consecutive_failures: int) -> None:
        self.n_trials = n_trials
        self.max_consecutive_failures = max_consecutive_failures
        self.since = datetime.datetime.now()
        self.reason: str | None = None

    def __call__(self, study: Any, trial: Any) -> None:
        trials = study.get_trials(deepcopy=False)
        if sum(1 for t in trials if is_counted(t)) >= self.n_trials:
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


def _search(
    study: Any,
    run: _Tuning,
    *,
    n_trials: int,
    timeout: float | None,
    in_memory: bool,
    max_consecutive_failures: int,
) -> tuple[float, list[str]]:
    """Run the trials still missing (every worker of a shared study stops at the total).

    Returns:
      ``(seconds, notes)``: the search's wall time and, when it stopped after too many
      failures in a row, a note saying so.

    Raises:
      DataError: the data hold fewer rows than one batch.
      TrialsFailedError: no trial completed.
    """
    import optuna

    finished = sum(1 for t in study.get_trials(deepcopy=False) if is_counted(t))
    progress = run.progress
    t0 = time.time()
    stop = _StopRule(n_trials=n_trials, max_consecutive_failures=max_consecutive_failures)
    callbacks: list[Any] = [stop]
    if progress is not None:
        callbacks.append(lambda s, t: progress("trial", trial_info(s, t, n_trials)))
    if finished < n_trials:
        # Optuna logs every failed trial with its traceback; the objective logs each
        # failure itself (the traceback once), so Optuna's records of them are dropped.
        optimize_log = logging.getLogger("optuna.study._optimize")
        optimize_log.addFilter(_drop_failed_trial_records)
        try:
            study.optimize(
                run,
                n_trials=n_trials - finished if in_memory else None,
                timeout=timeout,
                catch=(Exception,),
                callbacks=callbacks,
            )
        finally:
            optimize_log.removeFilter(_drop_failed_trial_records)
    seconds = time.time() - t0
    if run.too_small:
        raise DataError(run.too_small[0])
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        errors = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("error")]
        last = errors[-1].user_attrs["error"] if errors else "no trial finished"
        raise TrialsFailedError(
            f"tune: no trial completed ({len(errors)} failed); every config failed, so the "
            f"step or the pipeline is broken. The last error: {last}",
            study=study,
        )
    notes = []
    if stop.reason:
        log.warning("%s", stop.reason)
        notes.append(stop.reason)
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


def _confirm_and_advise(
    study: Any,
    run: _Tuning,
    *,
    confirm_top: int,
    confirm_windows: int,
    breakdown: bool,
    advise_format: bool,
    schema_path: str | None,
    notes: list[str],
    target_rate: float | None = None,
) -> dict[str, Any]:
    """Confirm the search's top configs, then the verdicts, the gain by knob and the
    format advice (`tuners.confirm`): the `TuneResult` fields they give, ``seconds``
    (without the search's) included."""
    how = run.remeasure(confirm_windows)
    progress, autotune = run.progress, run.baselines["autotune"]
    t1 = time.time()
    candidates = top_configs(study, confirm_top)
    configs = confirmation_configs(autotune, run.current, candidates)
    confirmed, confirmation_error = confirm(how, configs, progress=progress, notes=notes)
    confirm_seconds = time.time() - t1
    best_name, best_config = pick_winner(confirmed, candidates, autotune)
    t2 = time.time()
    contributions: tuple[Any, ...] = ()
    if breakdown and confirmed and best_name != "autotune":
        contributions = gain_by_knob(how, best_config, autotune, progress=progress, notes=notes)
        # A group measured slower in every round is reverted, and the reverted config
        # confirmed against the winner: the saved config is the one measured best.
        best_name, best_config, confirmed, contributions = revert_hurting_groups(
            how,
            (best_name, best_config),
            autotune,
            confirmed,
            contributions,
            progress=progress,
            notes=notes,
        )
    t3 = time.time()
    verdict = verdicts(how, confirmed, best_config, notes=notes)
    t_verdicts = time.time()
    format_result = serial = None
    source = run.target.source
    if advise_format and source is not None and source.kind == "tfrecord":
        if progress is not None:
            progress("roofline", {})
        roofline = winner_roofline(how, best_config, notes=notes)
        serial = serial_sentence(roofline)
        format_result = winner_format_advice(
            how,
            best_config,
            schema_path=schema_path,
            progress=progress,
            notes=notes,
            roofline=roofline,
        )
    t4 = time.time()
    return {
        "best_config": best_config,
        "best_name": best_name,
        "confirmed": tuple(confirmed),
        "seconds": {
            "confirm": round(confirm_seconds, 1),
            "verdicts": round(t_verdicts - t3, 1),
            "breakdown": round(t3 - t2, 1),
            "format_advice": round(t4 - t_verdicts, 1),
        },
        "advice": (
            *advice_sentences(
                format_result,
                input_bound=verdict["input_bound"],
                best_config=best_config,
                base=run.base,
                serial=serial,
            ),
            *service_sizing(run.target, best_config, confirmed, target_rate),
        ),
        "confirmation_error": confirmation_error,
        "breakdown": contributions,
        "format_advice": format_result,
        **verdict,
    }
