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
   measured window-to-window spread is pruned (`tuners._objective.NoiseAwarePruner`):
   clear losers stop early, near-ties are measured to the end. A trial that raises
   (bad config, out of memory) is recorded as failed with the reason and counts
   towards ``n_trials``; the study goes on, but stops after
   ``max_consecutive_failures`` failures in a row, and `TrialsFailedError` (naming
   the error) is raised when no trial at all completed.
3. **One trial per host at a time.** Trials hold an exclusive host-wide file lock
   (`tuners._storage.host_lock`) while they measure, so several workers on one machine
   never fight for the CPUs they measure; workers on other hosts share the study
   through the storage.
4. **Confirmation** (`tuners._confirm`). The top configs are measured again, interleaved
   window by window with ``autotune`` (and the current config) by
   `tfinput.bench.measure`, and the winner is the best *paired ratio* to
   autotune: each round's examples/s over autotune's in that round, the median of the
   rounds (the median examples/s is reported beside it), so noise in the search does
   not inflate it. If the confirmation raises, it is run once more; if it fails again,
   the result is the best trial of the search, marked unconfirmed
   (``confirmation_error``).
5. **Verdicts** (`tuners._advice`): whether the winner beats autotune beyond the noise
   (every round's paired ratio above 1; otherwise "keep autotune", and autotune is the
   result's ``best_config``, the config measured best staying first in ``confirmed``),
   and whether the step is input-bound at all (input wait under 3%: "input is not your
   bottleneck"; a step that owns its loop, ``model.fit``, gets the wait from its step
   bound, measured on one cached batch repeated).
6. **Gain by knob** (``breakdown``): the winner re-measured with each differing knob
   group reverted to autotune's values, interleaved.
7. **Format advice** (``advise_format``): tf.Example data whose parse stage is the bound
   get a 2-file sample converted to columnar records and measured side by side, with the
   ``tfinput convert`` command (docs/tuning.md).

The timeout bounds the whole run (`tuners._budget.Budget`): the search keeps the time
the confirmation needs, and every step after it measures what fits.

No config is measured twice: a trial whose config the study measured, or is measuring,
is recorded as a duplicate, not measured, and the nearest config not measured is
enqueued instead (`tuners._search.Tuning`); each process draws its own sampler seed.

Storage (`tuners._storage`): None (in memory); a path ending in ``.db``/``.sqlite`` or a
``sqlite:///`` URL (one host, resumable); a path ending in ``.log``/``.journal`` (a
journal file, several processes on one host, resumable); a ``postgresql://`` URL
(several hosts). RDB storages get heartbeats: a trial whose worker died is failed after
the grace period and retried once by another worker. Every trial records its worker
(`tuners._storage`: ``host:pid``, and the PID namespace: containers may share a host
name); when a study is opened, a RUNNING trial of a process of this host that no longer
exists (a restart within the grace period, or the journal storage, which has no
heartbeats) is failed and its parameters are enqueued again, once.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tfinput._src.core.options import check_counts
from tfinput._src.measurement.target import Measurable, Target
from tfinput._src.measurement.windows import TUNER_PLAN, WindowPlan
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError
from tfinput.steps import Step
from tuners._advice import KNOB_GROUPS
from tuners._after_search import confirm_and_advise
from tuners._budget import MIN_WINDOWS, Budget, fit_budget, least_trial_seconds
from tuners._confirm import (
    Confirmation,
)
from tuners._method import describe_method, describe_step, fingerprint
from tuners._opening import (
    default_pruner,
    default_sampler,
    open_storage,
    open_tuning_study,
    process_seed,
    requeue_interrupted,
    study_name_for,
)
from tuners._options import (
    ConfirmOptions,
    SearchOptions,
    StudyOptions,
    TuneOptions,
)
from tuners._progress import TrialProgress
from tuners._result import StudyLockedError, TuneInterrupted, TuneResult
from tuners._search import StorageLocked, Tuning, search_trials
from tuners._space import SearchSpace
from tuners._storage import (
    is_interrupt,
    is_locked,
    sqlite_busy_timeout,
    sqlite_path,
    stop_heartbeats,
    storage_label,
)
from tuners._trials import state_counts

if TYPE_CHECKING:
    import optuna


log = logging.getLogger("tfinput.tuners")


# -------------------------------------------------------------------- tune
def tune(
    pipeline: Measurable,
    *,
    step: Step | Callable[[Any], object] | None = None,
    space: SearchSpace | None = None,
    base: PipelineConfig | None = None,
    current: PipelineConfig | None = None,
    n_trials: int = 30,
    timeout: float | None = None,
    options: TuneOptions | None = None,
    progress: Callable[[str, dict[str, object]], None] | None = None,
    verbose: bool = True,
) -> TuneResult:
    """Search pipeline configs against a training step and confirm the winner.

    Args:
      pipeline: A `tfinput.Pipeline`, anything with ``build(config)``, or a callable
        ``config -> batches``.
      step: A `tfinput.steps.Step` or callable run on every batch (default: input only).
      space: The `SearchSpace` (default: `SearchSpace.for_pipeline` on this machine).
      base: Values of knobs that are not searched, batch size included (default:
        ``current`` or ``PipelineConfig()``).
      current: The user's current config, measured as a baseline.
      n_trials: Trials to finish (complete, pruned, or failed because the step or
        pipeline raised), baselines included, summed over every worker of a shared
        study. Each costs about ``windows * window_seconds`` seconds after its
        warm-up (``window_batches`` steps a window when the windows are not timed).
      timeout: Seconds the whole run may take, the confirmation and the gain by knob
        included (None: no limit): it ends within the timeout plus one window
        (`tuners._budget.Budget`; ``TuneResult.budget`` accounts for it). The search
        keeps the confirmation's time; when ``n_trials`` timed trials do not fit in the
        rest, each measures fewer windows (at least 3), and the result notes it
        (`tuners._budget.fit_budget`); a confirmation that does not fit is left out
        (no verdict), with a note.
      options: A `tuners.TuneOptions` (default: every default): the search (seed,
        sampler, pruner), the study (storage, name, heartbeats), the measurement
        (window counts, CPUs, clocks) and the confirmation (top configs, gain by knob,
        format advice).
      progress: ``progress(event, info)`` for display (events: ``trial``, with the
        estimated seconds left as ``eta_s``; ``slow_trial``; ``confirm``,
        ``roofline``, ...).
      verbose: Log a line per trial (its config, rate, state, the best so far and,
        from the first trial on, the time left), the stages after the search, and a
        note while a first trial runs past `tuners._progress.SLOW_FIRST_TRIAL_S`
        seconds, on the ``tfinput.tuners`` logger (INFO; the note WARNING). When
        logging is not configured, a stderr handler shows them for the call; a level
        set on the logger (or on ``tfinput``) silences them, as ``verbose=False`` does.

    Returns:
      A `TuneResult`.

    Raises:
      ConfigError: bad space, storage or counts; a ``timeout`` that is not a positive
        number, or that cannot hold one trial of the least windows.
      DataError: the data hold fewer rows than one batch (found by the first trial,
        which stops the search; the message gives the row count).
      TrialsFailedError: no trial completed (the step or pipeline always raises).
      TuneInterrupted: Ctrl-C once the study is open (a ``KeyboardInterrupt`` that
        carries the study with its completed trials, and where it stopped; the trial
        it stopped does not count and, in a storage, is measured again on resume).
      StudyLockedError: the study's SQLite database stayed locked by another writer
        past the busy timeout (one line naming it; the trials this run knows of go
        with it).
    """
    opts = options or TuneOptions()
    run, reporter, notes = _settle(
        pipeline,
        opts,
        step=step,
        space=space,
        base=base,
        current=current,
        n_trials=n_trials,
        timeout=timeout,
        progress=progress,
        verbose=verbose,
    )
    with reporter:
        return _search_and_confirm(run, opts, notes, n_trials=n_trials)


def _settle(
    pipeline: Measurable,
    opts: TuneOptions,
    *,
    step: Step | Callable[[Any], object] | None,
    space: SearchSpace | None,
    base: PipelineConfig | None,
    current: PipelineConfig | None,
    n_trials: int,
    timeout: float | None,
    progress: Callable[[str, dict[str, object]], None] | None,
    verbose: bool,
) -> tuple[Tuning, TrialProgress, list[str]]:
    """`tune`'s entry: the counts checked, the target and the trial plan settled once,
    the budget and the progress made, and the trials fitted to the timeout: the run,
    its progress and the notes so far."""
    measured, kept = opts.measurement, opts.study
    check_counts(
        n_trials=n_trials, windows=measured.windows, window_batches=measured.window_batches
    )
    check_timeout(timeout)
    # The target and the trial plan are settled here, once, and handed down as objects.
    target = Target.of(pipeline, what="tune")
    plan = measured.plan(TUNER_PLAN, what="tune")
    check_windows_fit(plan, timeout)
    clock = measured.clock or time.perf_counter
    budget = Budget(timeout, clock=clock, plan=plan)
    reporter = TrialProgress(
        total=n_trials, plan=plan, display=progress, verbose=verbose, clock=clock, left=budget.left
    )
    run = Tuning.settle(
        target,
        step=reporter.watch(step),
        space=space,
        base=base,
        current=current,
        cpu_count=measured.cpu_count,
        plan=plan,
        clocks=measured.clocks(),
        lock_path=kept.lock_path,
        progress=reporter,
        budget=budget,
    )
    run, notes = _fit_to_budget(run, reporter, opts.confirmation, n_trials=n_trials)
    return run, reporter, notes


def _search_and_confirm(
    run: Tuning, opts: TuneOptions, notes: list[str], *, n_trials: int
) -> TuneResult:
    """The study opened, the search run, the winner confirmed: the `TuneResult`; a
    locked storage or Ctrl-C raised as `tune` says."""
    search, kept = opts.search, opts.study
    run.refuse_data_smaller_than_a_batch()
    try:
        study, in_memory, seed = _open_study(run, search, kept)
    except Exception as e:
        if is_locked(e):
            raise _locked(kept, stage="open", run=run) from None
        raise
    stage = "search"
    try:
        search_seconds, said = search_trials(
            study,
            run,
            n_trials=n_trials,
            max_consecutive_failures=search.max_consecutive_failures,
        )
        notes += said
        stage = "confirmation"
        outcome = confirm_and_advise(study, run, opts.confirmation, notes=notes)
        return _result(
            study,
            run,
            opts.confirmation,
            notes,
            outcome,
            seed=seed,
            search_seconds=search_seconds,
            storage=storage_label(opts.study.storage),
        )
    except (KeyboardInterrupt, Exception, StorageLocked) as e:
        if isinstance(e, StorageLocked) or (not is_interrupt(e) and is_locked(e)):
            stop_heartbeats()  # its thread would wait on the lock, and hold the exit
            raise _locked(kept, stage=stage, run=run, study=study) from None
        # Ctrl-C: what was done goes with the exception (a second Ctrl-C while the
        # interrupted trials are enqueued again stops at once). An error after
        # Ctrl-C stopped a trial is the interrupt's too: the storage failing while
        # Optuna records the stopped trial (Ctrl-C landed inside a write).
        if not is_interrupt(e) and not run.interrupted:
            raise
        stop_heartbeats()  # one Ctrl-C left running would keep the process alive
        requeued = () if in_memory else requeue_interrupted(study, run)
        raise TuneInterrupted(
            study, stage=stage, storage=kept.storage, requeued=tuple(requeued)
        ) from e


def check_timeout(timeout: float | None) -> None:
    """Raise `ConfigError` for a ``timeout`` that is not a positive number of seconds
    (None: no limit)."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")


def check_windows_fit(plan: WindowPlan, timeout: float | None) -> None:
    """Raise `ConfigError` when a trial of ``plan`` cannot fit in ``timeout``: even cut
    to its least windows (`tuners._budget.least_trial_seconds`), they last longer."""
    if timeout is None or not plan.timed:
        return
    least = least_trial_seconds(plan)
    if least > timeout:
        windows = min(plan.windows, MIN_WINDOWS)
        raise ConfigError(
            f"window_seconds {plan.window_seconds:g} does not fit in the timeout of "
            f"{timeout:g} s: a trial measures at least {windows} windows of at least "
            f"{plan.window_seconds:g} s ({least:g} s)"
        )


def _fit_to_budget(
    run: Tuning, reporter: TrialProgress, confirming: ConfirmOptions, *, n_trials: int
) -> tuple[Tuning, list[str]]:
    """Settle what the search keeps of the timeout for the steps after it, and fit the
    trials' windows in the rest (`tuners._budget.fit_budget`): the run's plan, and
    the notes that say what was changed."""
    budget, notes = run.budget, []
    searched = set(run.space.searched)
    groups = sum(1 for knobs in KNOB_GROUPS.values() if searched & set(knobs))
    reserve_note = budget.settle(
        configs=1 + (run.current is not None) + confirming.confirm_top,
        rounds=confirming.confirm_windows,
        breakdown_configs=1 + groups if confirming.breakdown and groups else 0,
    )
    plan, budget_note = fit_budget(run.plan, n_trials=n_trials, timeout=budget.search_share())
    for note in (reserve_note, budget_note):
        if note is not None:
            log.warning("%s", note)
            notes.append(note)
    if plan != run.plan:
        budget.plan = reporter.plan = plan
        run = dataclasses.replace(run, plan=plan)
    return run, notes


def _locked(
    kept: StudyOptions, *, stage: str, run: Tuning, study: optuna.Study | None = None
) -> StudyLockedError:
    """The `StudyLockedError` of a study whose SQLite database another writer holds:
    the trials this run saw finished before the lock, and those it measured."""
    rows = {r["number"]: r for r in run.seen}
    rows.update(run.measured)
    return StudyLockedError(
        path=sqlite_path(kept.storage) or str(storage_label(kept.storage)),
        study_name=study.study_name if study is not None else str(kept.study_name),
        stage=stage,
        waited=sqlite_busy_timeout(),
        trials=[rows[n] for n in sorted(rows)],
    )


def _open_study(
    run: Tuning, search: SearchOptions, kept: StudyOptions
) -> tuple[optuna.Study, bool, int | None]:
    """The study in its storage (created, or loaded to resume or share), whether it is
    in memory, and the default sampler's seed (drawn for this process when
    ``search.seed`` is None; None with a sampler of the user's)."""
    storage = open_storage(
        kept.storage, heartbeat_interval=kept.heartbeat_interval, grace_period=kept.grace_period
    )
    seed = None
    sampler = search.sampler
    if sampler is None:
        seed = search.seed if search.seed is not None else process_seed()
        sampler = default_sampler(seed)
    study = open_tuning_study(
        run,
        storage,
        shown=kept.storage,
        study_name=study_name_for(kept.study_name, storage),
        sampler=sampler,
        pruner=default_pruner() if search.pruner is None else search.pruner,
        load_if_exists=kept.load_if_exists,
    )
    return study, storage is None, seed


def _result(
    study: optuna.Study,
    run: Tuning,
    confirming: ConfirmOptions,
    notes: list[str],
    outcome: Confirmation,
    *,
    seed: int | None,
    search_seconds: float,
    storage: str | None,
) -> TuneResult:
    """The `TuneResult` of a finished search and its confirmation (``outcome``)."""
    return TuneResult(
        study_name=study.study_name,
        trials=state_counts(study),
        fingerprint=fingerprint(run.cpu_count),
        method=describe_method(
            run.plan,
            confirm_top=confirming.confirm_top,
            confirm_windows=confirming.confirm_windows,
            study=study,
            seed=seed,
        ),
        step=describe_step(run.step),
        space=run.space.to_dict(),
        warnings=tuple(notes),
        packed_layout=_packed_layout(run.target, outcome.best_config),
        study=study,
        budget=run.budget.to_dict(),
        storage=storage,
        seconds={"search": round(search_seconds, 1), **outcome.seconds},
        best_config=outcome.best_config,
        best_name=outcome.best_name,
        confirmed=outcome.confirmed,
        advice=outcome.advice,
        confirmation_error=outcome.confirmation_error,
        beats_autotune=outcome.beats_autotune,
        input_wait=outcome.input_wait,
        input_wait_source=outcome.input_wait_source,
        input_bound=outcome.input_bound,
        step_bound=outcome.step_bound,
        verdicts=outcome.verdicts,
        breakdown=outcome.breakdown,
        format_advice=outcome.format_advice,
    )


def _packed_layout(target: Target, config: PipelineConfig) -> dict[str, object] | None:
    """The JSON layout description when ``config`` builds packed batches."""
    layout = target.packed_layout(config)
    return layout.to_dict() if layout is not None else None
