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

import logging
import time
from collections.abc import Callable
from typing import Any

from tfinput.bench import WindowPlan
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError
from tfinput.measure.target import Target
from tuners._search import (
    Tuning,
    baseline_configs,
    default_pruner,
    default_sampler,
    open_storage,
    open_tuning_study,
    search_trials,
    study_name_for,
)
from tuners.advice import clock_kwargs
from tuners.confirm import (
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
from tuners.result import (
    TrialsFailedError,
    TuneResult,
    describe_method,
    describe_step,
    fingerprint,
)
from tuners.space import SearchSpace
from tuners.storage import GRACE_PERIOD, HEARTBEAT_INTERVAL, host_lock, make_storage
from tuners.trials import (
    state_counts,
    top_configs,
)
from tuners.trials import summarize_trials as summarize_trials  # importable from here

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
    run = Tuning.settle(
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
    storage_obj = open_storage(
        storage, heartbeat_interval=heartbeat_interval, grace_period=grace_period
    )
    study = open_tuning_study(
        run,
        storage_obj,
        shown=storage,
        study_name=study_name_for(study_name, storage_obj),
        sampler=sampler or default_sampler(seed),
        pruner=default_pruner() if pruner is None else pruner,
        load_if_exists=load_if_exists,
    )
    search_seconds, notes = search_trials(
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


def _format_advice(
    run: Tuning,
    how: Remeasure,
    best_config: PipelineConfig,
    *,
    advise: bool,
    schema_path: str | None,
    notes: list[str],
) -> tuple[Any, str | None]:
    """``(format advice, serial-stage sentence)`` for tf.Example TFRecord data (a short
    roofline of the winner, then the columnar sample measured side by side); ``(None,
    None)`` for other data or when not asked."""
    source = run.target.source
    if not advise or source is None or source.kind != "tfrecord":
        return None, None
    if run.progress is not None:
        run.progress("roofline", {})
    roofline = winner_roofline(how, best_config, notes=notes)
    advice = winner_format_advice(
        how,
        best_config,
        schema_path=schema_path,
        progress=run.progress,
        notes=notes,
        roofline=roofline,
    )
    return advice, serial_sentence(roofline)


def _confirm_and_advise(
    study: Any,
    run: Tuning,
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
    format_result, serial = _format_advice(
        run, how, best_config, advise=advise_format, schema_path=schema_path, notes=notes
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
