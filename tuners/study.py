"""The study: sampler, pruner, storage, baselines, confirmation. `tune` is the API.

    result = tuners.tune(pipeline, step=steps.simulated_step(0.02), n_trials=30)
    result.best_config.to_json("best.json", **result.fingerprint_record())
    ds = pipeline.build(PipelineConfig.from_json("best.json"))

What happens:

1. **Baselines first.** ``autotune``, ``heuristic`` and the user's current config are
   enqueued as the first trials, so the result is never worse than what the user had.
2. **Search.** TPE (multivariate, constant liar; seeded) proposes configs from the
   `SearchSpace`; each trial is `objective.measure` — fresh iterator, warm-up, several
   windows — and reports every window, so a trial whose best window so far is in the
   bottom quarter of earlier trials at that window is pruned. A trial that raises
   (bad config, out of memory) is recorded as failed with the reason; the study goes on.
3. **One trial per host at a time.** Trials hold an exclusive host-wide file lock while
   they measure, so several workers on one machine never fight for the CPUs they
   measure; workers on other hosts share the study through the storage.
4. **Confirmation.** The top configs are measured again, interleaved window by window
   with ``autotune`` (and the current config) by `tfinput.bench.measure`, and the
   winner is the best *confirmed* median. The reported ratio is that of the confirmed
   medians, per round, so noise in the search does not inflate it.

Storage: None (in memory); a path ending in ``.db``/``.sqlite`` or a ``sqlite:///`` URL
(one host, resumable); a path ending in ``.log``/``.journal`` (a journal file, several
processes on one host, resumable); a ``postgresql://`` URL (several hosts). RDB storages
get heartbeats: a trial whose worker died is failed after the grace period and retried
once by another worker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, TfinputError
from tuners.objective import measure
from tuners.space import SearchSpace

if TYPE_CHECKING:  # pragma: no cover
    from tfinput.bench import ConfigStats

__all__ = ["tune", "TuneResult", "make_storage", "host_lock", "baseline_configs"]

log = logging.getLogger("tfinput.tuners")

HEARTBEAT_INTERVAL = 5
GRACE_PERIOD = 15


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
    """``autotune``, ``heuristic`` (and ``current``) with the user's batch settings."""
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
    out = {
        "autotune": PipelineConfig.autotune(**keep),
        "heuristic": PipelineConfig.heuristic(cpu_count=cpu_count, **keep),
    }
    if current is not None:
        out["current"] = current
    return out


def fingerprint(cpu_count: int) -> dict[str, Any]:
    """CPU model and count, accelerators, TensorFlow version: what the numbers belong to."""
    import tensorflow as tf

    from tfinput import bench

    info = dict(bench.machine(cpu_count=cpu_count))
    accelerators = [
        d.device_type + ":" + d.name.rsplit(":", 1)[-1]
        for d in tf.config.list_physical_devices()
        if d.device_type != "CPU"
    ]
    info["accelerators"] = accelerators or None
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
) -> TuneResult:
    """Search pipeline configs against a training step and confirm the winner.

    Args:
      pipeline: A `tfinput.Pipeline` (anything with ``build(config)``).
      step: A `tfinput.steps.Step` or callable run on every batch (default: input only).
      n_trials: Trials to finish (complete or pruned), baselines included, summed over
        every worker of a shared study. Each trial costs about
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
      sampler, pruner: Optuna overrides (default: seeded multivariate TPE; a 25th
        percentile pruner after one window).
      seed: Sampler seed.
      cpu_count: Cores for the default space and the heuristic baseline.
      progress: ``progress(event, info)`` for display (events: ``trial``, ``confirm``).
      lock_path: Host lock file (default: one per user in the temp directory).
      heartbeat_interval, grace_period: Seconds between a running trial's heartbeats,
        and of silence after which another worker fails and retries it (RDB storages).

    Returns:
      A `TuneResult`.

    Raises:
      ConfigError: bad space, storage or counts.
    """
    import optuna

    from tfinput import bench, steps

    if n_trials < 1:
        raise ConfigError(f"n_trials must be >= 1, got {n_trials}")
    for name, value in (("windows", windows), ("window_batches", window_batches)):
        if value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
    step = step or steps.input_only()
    cores = cpu_count or bench.available_cpus()
    base = base or current or PipelineConfig()
    if space is None:
        space = SearchSpace.for_pipeline(pipeline, cpu_count=cores)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
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
    pruner = pruner or optuna.pruners.PercentilePruner(25.0, n_startup_trials=4, n_warmup_steps=1)
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
        study.set_user_attr("space", space.to_dict())
        study.set_user_attr("step", _describe(step))
        for name, config in baselines.items():
            study.enqueue_trial(
                space.params(config), user_attrs={"baseline": name}, skip_if_exists=True
            )

    def objective(trial: optuna.Trial) -> float:
        config = space.suggest(trial, base)
        name = trial.user_attrs.get("baseline")
        if name in baselines:  # measure the baseline exactly as the user has it
            config = baselines[name]
        trial.set_user_attr("config", config.to_dict())
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")

        def report(i: int, rate: float) -> bool:
            trial.report(rate, i)
            return trial.should_prune()

        try:
            with host_lock(lock_path):
                m = measure(
                    pipeline,
                    config,
                    step,
                    windows=windows,
                    window_batches=window_batches,
                    warmup_batches=warmup_batches,
                    report=report,
                )
        except (TfinputError, MemoryError, Exception) as e:
            reason = _explain_failure(pipeline, e)
            trial.set_user_attr("error", reason)
            log.warning("trial %d failed: %s", trial.number, reason)
            raise
        for key, value in m.to_attrs().items():
            trial.set_user_attr(key, value)
        if m.stopped_early:
            raise optuna.TrialPruned(f"window medians below the 25th percentile: {m.rates}")
        return m.median

    done_states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    finished = sum(1 for t in study.get_trials(deepcopy=False) if t.state in done_states)
    callbacks: list[Any] = [optuna.study.MaxTrialsCallback(n_trials, states=done_states)]
    if progress is not None:
        callbacks.append(lambda s, t: progress("trial", _trial_info(s, t, n_trials)))
    t0 = time.time()
    if finished < n_trials:
        study.optimize(
            objective,
            n_trials=None if storage_obj is not None else n_trials - finished,
            timeout=timeout,
            catch=(Exception,),
            callbacks=callbacks,
        )
    search_seconds = time.time() - t0

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
    )
    confirmed = sorted(bench_result.results, key=lambda c: c.median, reverse=True)
    confirm_seconds = time.time() - t1
    best = confirmed[0]
    advice = []
    if best.config.batch_size != base.batch_size:
        k = best.config.batch_size / base.batch_size
        advice.append(
            f"The batch size changed from {base.batch_size} to {best.config.batch_size}: scale "
            f"the learning rate linearly (x{k:g}) and warm it up over the first epochs "
            "(Goyal et al., 2017), and check the model's quality, not only its speed."
        )
    states: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        states[t.state.name.lower()] = states.get(t.state.name.lower(), 0) + 1
    return TuneResult(
        best_config=best.config,
        best_name=best.name,
        confirmed=tuple(confirmed),
        study_name=study_name,
        trials=states,
        seconds={"search": round(search_seconds, 1), "confirm": round(confirm_seconds, 1)},
        fingerprint=fingerprint(cores),
        method={
            "trial": f"fresh iterator, {warmup_batches} warm-up batches excluded, "
            f"{windows} windows of {window_batches} batches; objective = median "
            "examples/s over windows",
            "pruning": "25th-percentile pruner on per-window examples/s after one window",
            "sampler": type(study.sampler).__name__,
            "confirmation": f"top {confirm_top} configs, autotune (and current) re-measured "
            f"interleaved, {confirm_windows} windows each, fresh iterator "
            "per window; ratio = median of per-round ratios",
            "one trial per host": "exclusive host file lock during measurement",
        },
        step=_describe(step),
        space=space.to_dict(),
        advice=tuple(advice),
        study=study,
    )


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
                "retried_from": t.system_attrs.get("failed_trial"),
                "duration_s": t.duration.total_seconds() if t.duration else None,
            }
        )
    return rows
