"""The study: sampler, pruner, storage, baselines, confirmation. `tune` is the API.

    result = tuners.tune(pipeline, step=steps.simulated_step(0.02), n_trials=30)
    result.best_config.to_json("best.json", **result.fingerprint_record())
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
3. **One trial per host at a time.** Trials hold an exclusive host-wide file lock while
   they measure, so several workers on one machine never fight for the CPUs they
   measure; workers on other hosts share the study through the storage.
4. **Confirmation.** The top configs are measured again, interleaved window by window
   with ``autotune`` (and the current config) by `tfinput.bench.measure`, and the
   winner is the best *confirmed* median. The reported ratio is that of the confirmed
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

Storage: None (in memory); a path ending in ``.db``/``.sqlite`` or a ``sqlite:///`` URL
(one host, resumable); a path ending in ``.log``/``.journal`` (a journal file, several
processes on one host, resumable); a ``postgresql://`` URL (several hosts). RDB storages
get heartbeats: a trial whose worker died is failed after the grace period and retried
once by another worker. Every trial records its worker (``host:pid``, and the PID
namespace: containers may share a host name); when a study is
opened, a RUNNING trial of a process of this host that no longer exists (a restart
within the grace period, or the journal storage, which has no heartbeats) is failed
and its parameters are enqueued again, once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import logging
import os
import socket
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, TfinputError
from tuners.advice import INPUT_BOUND_THRESHOLD
from tuners.objective import measure
from tuners.space import SearchSpace

if TYPE_CHECKING:  # pragma: no cover
    from tfinput.bench import ConfigStats
    from tuners.advice import FormatAdvice, KnobContribution

__all__ = [
    "tune",
    "TuneResult",
    "TrialsFailedError",
    "make_storage",
    "host_lock",
    "baseline_configs",
]

log = logging.getLogger("tfinput.tuners")

HEARTBEAT_INTERVAL = 5
GRACE_PERIOD = 15
MAX_CONSECUTIVE_FAILURES = 5


class TrialsFailedError(TfinputError):
    """No trial of the search completed: the step or the pipeline raises whatever the
    config. The message names the last error; ``study`` holds the failed trials."""

    def __init__(self, message: str, *, study: Any = None) -> None:
        super().__init__(message)
        self.study = study


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuneResult:
    """Outcome of `tune`.

    Attributes:
      best_config: The winner of the confirmation round.
      best_name: Its name there (``trial N``, ``autotune`` or ``current``).
      confirmed: Every config of the confirmation round (`tfinput.bench.ConfigStats`:
        median, spread, ratio to autotune per round), best first.
      study_name: Optuna study name.
      trials: Counts by state (``complete``, ``pruned``, ``fail``, ``running``...).
      seconds: Wall time of the search and of the confirmation.
      fingerprint: Hardware and software the numbers belong to.
      method: How every number was measured.
      step: Description of the step.
      space: The search space.
      advice: Extra advice (learning-rate scaling when the batch size changed).
      confirmation_error: Why the confirmation failed (twice) when it did: then
        ``confirmed`` is empty and the winner is the best trial of the search, not
        confirmed against autotune; None when the confirmation ran.
      warnings: What went wrong without stopping the run (a search stopped after too
        many failed trials in a row, a confirmation retried after an error).
      beats_autotune: True only when the confirmed winner's per-round ratios to
        autotune are all above 1 (the paired spread excludes 1); False: keep autotune;
        None: not confirmed.
      input_wait: Share of the step's time spent waiting for input with the winner
        (measured; or ``1 - fed / step_bound`` when the step owns the loop); None when
        unknown.
      input_wait_source: ``measured``, ``step bound`` or None.
      input_bound: ``input_wait >= 0.03`` (None when unknown).
      step_bound: Examples/s of the step fed one cached batch (when it was measured).
      verdicts: The plain-language verdicts: beats autotune or "keep autotune", and
        whether input is the bottleneck.
      breakdown: The gain by knob group (`tuners.advice.KnobContribution`), largest
        first; empty when not measured.
      format_advice: `tuners.advice.FormatAdvice` when a tf.Example sample was
        converted to columnar and measured, else None.
    """

    best_config: PipelineConfig
    best_name: str
    confirmed: tuple[ConfigStats, ...]
    study_name: str
    trials: dict[str, int]
    seconds: dict[str, float]
    fingerprint: dict[str, Any]
    method: dict[str, Any]
    step: dict[str, Any]
    space: dict[str, list[Any]]
    advice: tuple[str, ...] = ()
    confirmation_error: str | None = None
    warnings: tuple[str, ...] = ()
    beats_autotune: bool | None = None
    input_wait: float | None = None
    input_wait_source: str | None = None
    input_bound: bool | None = None
    step_bound: float | None = None
    verdicts: tuple[str, ...] = ()
    breakdown: tuple[KnobContribution, ...] = ()
    format_advice: FormatAdvice | None = None
    study: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def ratio_vs_autotune(self) -> float | None:
        return self.confirmed[0].ratio if self.confirmed else None

    def record(self) -> dict[str, Any]:
        """Metadata stored next to the best config in its JSON file."""
        return {
            "fingerprint": self.fingerprint,
            "method": self.method,
            "step": self.step,
            "confirmed": self.confirmed[0].to_dict() if self.confirmed else None,
            "confirmation_error": self.confirmation_error,
            "beats_autotune": self.beats_autotune,
            "input_bound": self.input_bound,
            "verdicts": list(self.verdicts),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "tfinput.tune/1",
            "best_name": self.best_name,
            "best_config": self.best_config.to_dict(),
            "ratio_vs_autotune": self.ratio_vs_autotune,
            "confirmed": [c.to_dict() for c in self.confirmed],
            "study_name": self.study_name,
            "trials": self.trials,
            "seconds": self.seconds,
            "fingerprint": self.fingerprint,
            "method": self.method,
            "step": self.step,
            "space": self.space,
            "advice": list(self.advice),
            "confirmation_error": self.confirmation_error,
            "warnings": list(self.warnings),
            "beats_autotune": self.beats_autotune,
            "input_wait": None if self.input_wait is None else round(self.input_wait, 4),
            "input_wait_source": self.input_wait_source,
            "input_bound": self.input_bound,
            "step_bound_examples_per_s": (
                None if self.step_bound is None else round(self.step_bound, 1)
            ),
            "verdicts": list(self.verdicts),
            "breakdown": [c.to_dict() for c in self.breakdown],
            "format_advice": None if self.format_advice is None else self.format_advice.to_dict(),
        }


# ------------------------------------------------------------------ storage
def make_storage(
    storage: Any, *, heartbeat_interval: int = HEARTBEAT_INTERVAL, grace_period: int = GRACE_PERIOD
) -> Any:
    """An Optuna storage from a URL or path (see the module docstring); other objects
    (an Optuna storage) are returned unchanged."""
    import optuna

    if storage is None or not isinstance(storage, (str, os.PathLike)):
        return storage
    text = os.fspath(storage)
    retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)
    if text.startswith(("postgresql", "mysql")):
        text = _with_psycopg(text)
        try:
            return optuna.storages.RDBStorage(
                text,
                engine_kwargs={"pool_pre_ping": True, "connect_args": _connect_args(text)},
                heartbeat_interval=heartbeat_interval,
                grace_period=grace_period,
                heartbeat_stale_trial_callback=retry,
            )
        except Exception as e:  # sqlalchemy OperationalError, missing driver...
            raise ConfigError(f"cannot open storage {_redact(text)}: {_first_line(e)}") from e
    if text.startswith("sqlite:///") or text.endswith((".db", ".sqlite", ".sqlite3")):
        url = text if text.startswith("sqlite:///") else f"sqlite:///{os.path.abspath(text)}"
        path = url[len("sqlite:///") :]
        if path and not Path(path).parent.exists():
            raise ConfigError(
                f"cannot open storage {url}: directory {Path(path).parent} does not exist"
            )
        return optuna.storages.RDBStorage(
            url,
            heartbeat_interval=heartbeat_interval,
            grace_period=grace_period,
            heartbeat_stale_trial_callback=retry,
        )
    if text.endswith((".log", ".journal", ".jsonl")):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        if not Path(text).parent.exists():
            raise ConfigError(f"cannot open storage {text}: directory does not exist")
        return JournalStorage(JournalFileBackend(text))
    raise ConfigError(
        f"storage {text!r}: expected a postgresql:// or sqlite:/// URL, or a file path "
        "ending in .db (SQLite) or .log (journal)"
    )


def _with_psycopg(url: str) -> str:
    """``postgresql://`` with the driver tfinput installs (psycopg 3, the ``postgres``
    extra): SQLAlchemy 2.0 would pick psycopg2 for a bare ``postgresql://`` and 2.1
    picks psycopg, so name it. An explicit ``postgresql+driver://`` is kept."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    return url


def _connect_args(url: str) -> dict[str, Any]:
    return {"connect_timeout": 10} if url.startswith("postgresql") else {}


def _redact(url: str) -> str:
    import re

    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


def _first_line(e: BaseException) -> str:
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


# ---------------------------------------------------------------- baselines
def baseline_configs(
    base: PipelineConfig, *, cpu_count: int, current: PipelineConfig | None = None
) -> dict[str, PipelineConfig]:
    """``autotune``, ``heuristic`` (and ``current``) with the user's batch settings.

    Both presets set the feeding knobs explicitly to what a plain training loop does:
    ``layout="per_feature"``, ``steps_per_execution=1``, ``device_prefetch=0``.
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
    # step per call, no device prefetch.
    feeding = {"layout": "per_feature", "steps_per_execution": 1, "device_prefetch": 0}
    out = {
        "autotune": PipelineConfig.autotune(**keep, **feeding),
        "heuristic": PipelineConfig.heuristic(cpu_count=cpu_count, **keep, **feeding),
    }
    if current is not None:
        out["current"] = current
    return out


def fingerprint(cpu_count: int) -> dict[str, Any]:
    """CPU model and count, accelerators, TensorFlow version, the Keras backend and (when
    JAX is imported) the JAX version: what the numbers belong to."""
    import sys

    import tensorflow as tf

    from tfinput import bench

    info = dict(bench.machine(cpu_count=cpu_count))
    accelerators = [
        d.device_type + ":" + d.name.rsplit(":", 1)[-1]
        for d in tf.config.list_physical_devices()
        if d.device_type != "CPU"
    ]
    info["accelerators"] = accelerators or None
    if "keras_backend" not in info:
        try:
            import keras

            info["keras_backend"] = str(keras.config.backend())
        except ImportError:
            info["keras_backend"] = None
    jax = sys.modules.get("jax")
    info["jax"] = str(getattr(jax, "__version__", "")) or None if jax is not None else None
    return info


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

    Returns:
      A `TuneResult`.

    Raises:
      ConfigError: bad space, storage or counts.
      TrialsFailedError: no trial completed (the step or pipeline always raises).
    """
    import optuna

    from tfinput import bench, steps

    if n_trials < 1:
        raise ConfigError(f"n_trials must be >= 1, got {n_trials}")
    for name, value in (
        ("windows", windows),
        ("window_batches", window_batches),
        ("max_consecutive_failures", max_consecutive_failures),
    ):
        if value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
    step = step or steps.input_only()
    cores = cpu_count or bench.available_cpus()
    base = base or current or PipelineConfig()
    if space is None:
        space = SearchSpace.for_pipeline(pipeline, cpu_count=cores, step=step)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():  # heartbeats are "experimental" since Optuna 2.8
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage_obj = make_storage(
            storage, heartbeat_interval=heartbeat_interval, grace_period=grace_period
        )
    if study_name is None:
        if storage_obj is not None:
            raise ConfigError("a study stored in a file or database needs a study_name")
        study_name = f"tfinput-{time.strftime('%Y%m%d-%H%M%S')}"
    sampler = sampler or optuna.samplers.TPESampler(
        seed=seed, multivariate=True, constant_liar=True, n_startup_trials=8
    )
    if pruner is None:
        from tuners.pruning import NoiseAwarePruner

        pruner = NoiseAwarePruner(quantile=0.25, n_startup_trials=4, n_warmup_steps=1)
    baselines = baseline_configs(base, cpu_count=cores, current=current)
    space = space.including(*baselines.values())
    # Creating the study and enqueueing the baselines under the host lock keeps two
    # workers on one host from enqueueing the baselines twice.
    with host_lock(lock_path):
        try:
            study = optuna.create_study(
                storage=storage_obj,
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
            raise ConfigError(
                f"cannot open storage {_redact(str(storage))}: {_first_line(e)}"
            ) from e
        _requeue_dead_workers(study)
        study.set_user_attr("space", space.to_dict())
        study.set_user_attr("step", _describe(step))
        for name, config in baselines.items():
            study.enqueue_trial(
                space.params(config), user_attrs={"baseline": name}, skip_if_exists=True
            )

    clocks: dict[str, Any] = {}
    if clock is not None:
        clocks["clock"] = clock
    if cpu_clock is not None:
        clocks["cpu_clock"] = cpu_clock

    def objective(trial: optuna.Trial) -> float:
        # First, so that a trial left RUNNING by a killed worker can be recognised.
        trial.set_user_attr("worker", _worker_id())
        trial.set_user_attr("worker_pid_namespace", _pid_namespace())

        def report(i: int, rate: float) -> bool:
            trial.report(rate, i)
            return trial.should_prune()

        try:
            config = space.suggest(trial, base)
            name = trial.user_attrs.get("baseline")
            if name in baselines:  # measure the baseline exactly as the user has it
                config = baselines[name]
            trial.set_user_attr("config", config.to_dict())
            with host_lock(lock_path):
                m = measure(
                    pipeline,
                    config,
                    step,
                    windows=windows,
                    window_batches=window_batches,
                    warmup_batches=warmup_batches,
                    report=report,
                    **clocks,
                )
        except (TfinputError, MemoryError, Exception) as e:
            reason = _explain_failure(pipeline, e)
            trial.set_user_attr("error", reason)
            log.warning("trial %d failed: %s", trial.number, reason)
            raise
        for key, value in m.to_attrs().items():
            trial.set_user_attr(key, value)
        if m.stopped_early:
            raise optuna.TrialPruned(f"window rates {m.rates} pruned: a clear loser")
        return m.median

    stop_reason: list[str] = []

    def stop_rule(study: optuna.Study, trial: Any) -> None:
        trials = study.get_trials(deepcopy=False)
        if sum(1 for t in trials if _counts(t)) >= n_trials:
            study.stop()
            return
        failed = _trailing_failures(trials, since=opened)
        if len(failed) >= max_consecutive_failures:
            stop_reason.append(
                f"the search stopped after {len(failed)} failed trials in a row; the last "
                f"error: {failed[-1].user_attrs.get('error')}"
            )
            study.stop()

    finished = sum(1 for t in study.get_trials(deepcopy=False) if _counts(t))
    callbacks: list[Any] = [stop_rule]
    if progress is not None:
        callbacks.append(lambda s, t: progress("trial", _trial_info(s, t, n_trials)))
    t0 = time.time()
    # Failures in a row count from now on: a resumed study whose step was fixed searches.
    opened = datetime.datetime.now()
    if finished < n_trials:
        study.optimize(
            objective,
            n_trials=None if storage_obj is not None else n_trials - finished,
            timeout=timeout,
            catch=(Exception,),
            callbacks=callbacks,
        )
    search_seconds = time.time() - t0
    notes: list[str] = []
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        errors = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("error")]
        last = errors[-1].user_attrs["error"] if errors else "no trial finished"
        raise TrialsFailedError(
            f"tune: no trial completed ({len(errors)} failed); every config failed, so the "
            f"step or the pipeline is broken. The last error: {last}",
            study=study,
        )
    if stop_reason:
        log.warning("%s", stop_reason[0])
        notes.append(stop_reason[0])

    t1 = time.time()
    candidates = _top_configs(study, confirm_top)
    to_confirm = {"autotune": baselines["autotune"]}
    if current is not None:
        to_confirm["current"] = current
    for name, config in candidates:
        if config not in to_confirm.values():
            to_confirm[name] = config
    if progress is not None:
        progress("confirm", {"configs": list(to_confirm), "windows": confirm_windows})

    def confirm_progress(done: int, total: int, window: Any) -> None:
        if progress is not None:
            progress(
                "confirm_window",
                {
                    "done": done,
                    "total": total,
                    "name": window.name,
                    "examples_per_s": window.examples_per_s,
                },
            )

    confirmed: list[Any] = []
    confirmation_error = None
    for attempt in (1, 2):
        try:
            bench_result = bench.measure(
                pipeline,
                to_confirm,
                step=step,
                windows=confirm_windows,
                window_batches=window_batches,
                warmup_batches=warmup_batches,
                baseline="autotune",
                cpu_count=cores,
                progress=confirm_progress,
                **clocks,
            )
        except Exception as e:  # a transient step error, out of memory...
            confirmation_error = _explain_failure(pipeline, e)
            note = f"confirmation attempt {attempt} of 2 failed: {confirmation_error}"
            log.warning("%s", note)
            notes.append(note)
            continue
        confirmed = sorted(bench_result.results, key=lambda c: c.median, reverse=True)
        confirmation_error = None
        break
    confirm_seconds = time.time() - t1
    if confirmed:
        best_config, best_name = confirmed[0].config, confirmed[0].name
    else:  # the search's best trial, unconfirmed
        best_name, best_config = (candidates or [("autotune", baselines["autotune"])])[0]
    verdict = _verdicts(
        pipeline,
        step,
        confirmed,
        best_config,
        notes=notes,
        windows=confirm_windows,
        window_batches=window_batches,
        warmup_batches=warmup_batches,
        cpu_count=cores,
        clocks=clocks,
    )
    t2 = time.time()
    contributions: tuple[Any, ...] = ()
    if breakdown and confirmed and best_name != "autotune":
        from tuners.advice import knob_breakdown

        if progress is not None:
            progress("breakdown", {"windows": confirm_windows})
        try:
            contributions = knob_breakdown(
                pipeline,
                best_config,
                baselines["autotune"],
                step=step,
                windows=confirm_windows,
                window_batches=window_batches,
                warmup_batches=warmup_batches,
                cpu_count=cores,
                **clocks,
            )
        except Exception as e:  # the breakdown is extra: never lose the result for it
            note = f"gain by knob not measured: {_explain_failure(pipeline, e)}"
            log.warning("%s", note)
            notes.append(note)
    t3 = time.time()
    format_result = None
    if advise_format and getattr(getattr(pipeline, "source", None), "kind", None) == "tfrecord":
        from tuners.advice import format_advice

        if progress is not None:
            progress("format_advice", {})
        try:
            format_result = format_advice(
                pipeline, best_config, schema_path=schema_path, cpu_count=cores
            )
        except Exception as e:
            note = f"format advice not measured: {_explain_failure(pipeline, e)}"
            log.warning("%s", note)
            notes.append(note)
    t4 = time.time()
    advice = []
    if format_result is not None:
        advice.append(format_result.sentence())
        if verdict["input_bound"] is False:
            advice.append(
                "the step is not input-bound, so a faster format will not speed up training "
                "on this host (it may on a faster accelerator)"
            )
    if best_config.batch_size != base.batch_size:
        k = best_config.batch_size / base.batch_size
        advice.append(
            f"The batch size changed from {base.batch_size} to {best_config.batch_size}: scale "
            f"the learning rate linearly (x{k:g}) and warm it up over the first epochs "
            "(Goyal et al., 2017), and check the model's quality, not only its speed."
        )
    states: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        states[t.state.name.lower()] = states.get(t.state.name.lower(), 0) + 1
    return TuneResult(
        best_config=best_config,
        best_name=best_name,
        confirmed=tuple(confirmed),
        study_name=study_name,
        trials=states,
        seconds={
            "search": round(search_seconds, 1),
            "confirm": round(confirm_seconds, 1),
            "verdicts": round(t2 - t1 - confirm_seconds, 1),
            "breakdown": round(t3 - t2, 1),
            "format_advice": round(t4 - t3, 1),
        },
        fingerprint=fingerprint(cores),
        method={
            "trial": f"fresh iterator, {warmup_batches} warm-up batches excluded, "
            f"{windows} windows of {window_batches} batches; objective = median "
            "examples/s over windows",
            "pruning": _describe_pruner(study.pruner),
            "sampler": type(study.sampler).__name__,
            "confirmation": f"top {confirm_top} configs, autotune (and current) re-measured "
            f"interleaved, {confirm_windows} windows each, fresh iterator "
            "per window; ratio = median of per-round ratios",
            "one trial per host": "exclusive host file lock during measurement",
            "beats autotune": "the winner's per-round ratios to autotune in the "
            "confirmation all above 1 (the paired spread excludes 1)",
            "input wait": "share of the confirmation's window time spent waiting for the "
            "next batch; when the step owns the loop (model.fit), 1 - fed / step bound, the "
            f"step bound measured on one cached batch repeated; input-bound from "
            f"{INPUT_BOUND_THRESHOLD:.0%}",
            "gain by knob": "the winner against itself with each differing knob group "
            f"reverted to autotune's values, interleaved, {confirm_windows} windows each; "
            "contribution = winner / without the group, median of per-round ratios",
        },
        step=_describe(step),
        space=space.to_dict(),
        advice=tuple(advice),
        confirmation_error=confirmation_error,
        warnings=tuple(notes),
        breakdown=contributions,
        format_advice=format_result,
        study=study,
        **verdict,
    )


def _verdicts(
    pipeline: Any,
    step: Any,
    confirmed: list[Any],
    best_config: PipelineConfig,
    *,
    notes: list[str],
    windows: int,
    window_batches: int,
    warmup_batches: int,
    cpu_count: int,
    clocks: dict[str, Any],
) -> dict[str, Any]:
    """The `TuneResult` verdict fields: beats autotune, input wait (measured, or from
    the step bound when the step owns the loop) and their sentences."""
    from tuners.advice import beats_autotune, input_verdict, step_bound

    beats, beats_text = beats_autotune(confirmed)
    wait = source = bound = None
    if confirmed:
        winner = confirmed[0]
        if winner.stall is not None:
            wait, source = winner.stall, "measured"
        else:
            try:
                bound = step_bound(
                    pipeline,
                    best_config,
                    step,
                    windows=windows,
                    window_batches=window_batches,
                    warmup_batches=warmup_batches,
                    cpu_count=cpu_count,
                    **clocks,
                )
            except Exception as e:
                note = f"step bound not measured: {_explain_failure(pipeline, e)}"
                log.warning("%s", note)
                notes.append(note)
            if bound:
                wait, source = max(0.0, 1.0 - winner.median / bound), "step bound"
    input_bound, input_text = input_verdict(
        wait, input_only=getattr(step, "kind", None) == "input_only"
    )
    return {
        "beats_autotune": beats,
        "input_wait": wait,
        "input_wait_source": source,
        "input_bound": input_bound,
        "step_bound": bound,
        "verdicts": (beats_text, input_text),
    }


def _describe_pruner(pruner: Any) -> str:
    describe = getattr(pruner, "describe", None)
    return describe() if callable(describe) else type(pruner).__name__


def _counts(trial: Any) -> bool:
    """Whether a trial counts towards ``n_trials``: finished, or failed by its config
    (a trial failed because its worker died is retried instead)."""
    import optuna

    state = trial.state
    if state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED):
        return True
    return (
        state == optuna.trial.TrialState.FAIL
        and bool(trial.user_attrs.get("error"))
        and not trial.user_attrs.get("worker_died")
    )


def _trailing_failures(trials: list[Any], *, since: datetime.datetime) -> list[Any]:
    """The failed trials (failed by their config) started since ``since``, after the
    last finished one."""
    import optuna

    out: list[Any] = []
    for t in sorted(trials, key=lambda t: t.number):
        if t.datetime_start is None or t.datetime_start < since:
            continue
        if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED):
            out = []
        elif _counts(t):
            out.append(t)
    return out


def _worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _pid_namespace() -> str:
    """This process's PID namespace (containers sharing a host name have different ones,
    and a pid means nothing outside its namespace); "" where unknown."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _requeue_dead_workers(study: Any) -> list[int]:
    """Fail the RUNNING trials of dead processes of this host; enqueue their params again.

    Returns the numbers of the trials failed. Trials of other hosts are left to the
    storage's heartbeat (RDB storages).
    """
    import optuna

    host, namespace = socket.gethostname(), _pid_namespace()
    storage = study._storage
    failed = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        worker_host, _, pid = str(t.user_attrs.get("worker", "")).rpartition(":")
        if worker_host != host or not pid.isdigit():
            continue
        if t.user_attrs.get("worker_pid_namespace", namespace) != namespace:
            continue  # another container with the same host name
        if _pid_alive(int(pid)):
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


def _describe(step: Any) -> dict[str, Any]:
    describe = getattr(step, "describe", None)
    return describe() if callable(describe) else {"name": getattr(step, "__name__", str(step))}


def _trial_info(study: Any, trial: Any, n_trials: int) -> dict[str, Any]:
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
    }


def _top_configs(study: Any, k: int) -> list[tuple[str, PipelineConfig]]:
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


def _explain_failure(pipeline: Any, error: BaseException) -> str:
    if isinstance(error, TfinputError):
        return str(error)
    if isinstance(error, MemoryError):
        return "out of memory (MemoryError)"
    try:
        from tfinput.pipeline import clean_error

        text = clean_error(error)
    except Exception:  # pragma: no cover - clean_error itself must not hide the error
        text = str(error)
    if "ResourceExhausted" in type(error).__name__:
        return f"out of memory: {text}"
    return f"{type(error).__name__}: {text}"


def summarize_trials(study: Any) -> list[dict[str, Any]]:
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
