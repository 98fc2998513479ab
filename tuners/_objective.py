"""A trial: measuring one config against a step (the tuner's objective, usable without
Optuna), the pruner that stops a trial only when it is a clear loser given the noise,
the budget of trials within the user's ``timeout``, and what `tuners.tune` says per
trial while it runs.

    m = measure(pipeline, config, step=steps.simulated_step(0.02))
    print(m.median, m.cv)

One trial = one fresh iterator over ``pipeline.build(config, repeat=True)``, the plan's
``warmup_batches`` batches that are not timed (thread start, file opening, buffers filling), then its
``windows`` consecutive windows, each handed to the step. A window lasts at least
``window_seconds`` (its batches: that target times the warm-up's rate, at least
``window_batches``; with ``window_seconds=0``, that fixed count).
The objective is the median examples/s over the windows; the spread is kept. After
each window ``report(index, examples_per_s)`` is called; if it returns True the
measurement stops early (the tuner uses this for pruning).

A `tfinput.steps.Step` is set up for the config first (`Step.prepare`: Keras'
``steps_per_execution``, device prefetch). A step that owns the loop (``keras_fit``:
``model.fit``; ``jax`` and Keras-on-JAX steps with device prefetch) is handed the built
data and runs the warm-up and windows itself (`Step.run_windows`); ``model.fit`` hides
when it waits for input, so those measurements record ``stall`` as None.

To measure the *step bound* (the step fed as fast as possible), pass a callable that
repeats one cached batch: ``lambda cfg: pipeline.build(cfg).take(1).cache().repeat()``.

**The pruner** (`NoiseAwarePruner`). A trial reports examples/s after each window. At
window ``i`` it is pruned when its *best* window so far is below the 25th percentile (the bottom quarter) of the other
finished trials at window ``i`` by more than the window-to-window spread measured in
this study:

    best_so_far * (1 + margin) < p25,  margin = max(min_margin, median relative spread)

where a trial's relative spread is ``(max - min) / median`` of its windows (noise is
multiplicative, so even a very noisy study prunes a config ten times slower). Runs of the
same config vary by 10-20% on a busy host; a trial within that band of the bottom
quarter may be as good as the configs above it, so it is measured to the end (pruned
trials are never measured again). Optuna's ``PercentilePruner(25.0)`` keeps the *top*
quarter when maximizing, which prunes three trials in four, near-ties included.

**The budget.** The ``timeout`` bounds the whole run (`Budget`): the search keeps the
time the confirmation needs, and the run ends within the timeout plus one window. A
window lasts at least ``window_seconds``, so a trial of ``windows`` windows lasts at
least ``windows * window_seconds``. When ``n_trials`` such trials do not fit in the
search's share, each trial gets fewer windows (`fit_budget`: never fewer than
`MIN_WINDOWS`, nor shorter ones: a short window is a noisy one); when even that does not
fit, the search stops early, and the result says so in a note (`stopped_by_timeout`).
The budget the user set is never exceeded, and never silently cut short.

**The progress.** The per-trial line (`trial_line`) is the one ``tfinput tune`` prints
when its progress bar is off; `TrialProgress` computes the time left, watches the first
trial (a note on a slow one), logs the lines on the ``tfinput.tuners`` logger (for
Python callers) and forwards every event to a display (the CLI's).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna

from tfinput._src.measurement.probes import process_cpu_seconds
from tfinput._src.measurement.target import Target
from tfinput._src.measurement.windows import TUNER_PLAN, WindowPlan, consecutive_windows
from tfinput.config import PipelineConfig
from tfinput.errors import DataError
from tfinput.steps import Step

if TYPE_CHECKING:
    import optuna

    from tfinput._src.measurement.target import Measurable
    from tfinput._src.measurement.windows import Window

__all__ = [
    "Budget",
    "DeadlineReached",
    "MIN_WINDOWS",
    "Measurement",
    "NoiseAwarePruner",
    "SLOW_FIRST_TRIAL_S",
    "TrialProgress",
    "fit_budget",
    "least_trial_seconds",
    "measure",
    "stage_line",
    "stopped_by_timeout",
    "trial_line",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measurement:
    """Throughput of one config.

    Attributes:
      config: The config measured.
      rates: Examples/s of each window, in order.
      stall: Fraction of the timed time the consumer waited for input; None when the
        step owns the loop and hides it (``model.fit``).
      cores_busy: Process CPU-seconds per wall second during the windows.
      stopped_early: The ``report`` callback asked to stop (pruned).
      seconds: Wall time of the whole measurement, warm-up and build included.
      timed_seconds: Wall time of its windows alone (``seconds`` less the build and
        the warm-up).
    """

    config: PipelineConfig
    rates: tuple[float, ...]
    stall: float | None
    cores_busy: float
    stopped_early: bool = False
    seconds: float = 0.0
    timed_seconds: float = 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.rates), max(self.rates)

    @property
    def cv(self) -> float:
        if len(self.rates) < 2:
            return 0.0
        return statistics.stdev(self.rates) / statistics.mean(self.rates)

    def to_attrs(self) -> dict[str, object]:
        """JSON-ready summary (stored as Optuna trial attributes)."""
        return {
            "median_examples_per_s": round(self.median, 1),
            "min_examples_per_s": round(self.spread[0], 1),
            "max_examples_per_s": round(self.spread[1], 1),
            "cv": round(self.cv, 4),
            "window_rates": [round(r, 1) for r in self.rates],
            "stall_fraction": None if self.stall is None else round(self.stall, 4),
            "cores_busy": round(self.cores_busy, 3),
            "seconds": round(self.seconds, 2),
            "timed_seconds": round(self.timed_seconds, 2),
        }


def measure(
    pipeline: Measurable,
    config: PipelineConfig,
    step: Callable[[Any], Any] | None = None,
    *,
    plan: WindowPlan = TUNER_PLAN,
    report: Callable[[int, float], bool] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] | None = None,
) -> Measurement:
    """Measure ``config`` on ``pipeline`` with ``step`` (see the module docstring).

    This is the per-config primitive: one config, one iterator, consecutive windows
    (`tfinput.measure.windows.consecutive_windows`). `tfinput.measure.compare.measure`, the
    side-by-side comparison of ``tfinput bench``, is a different measurement (a
    fresh iterator per window, configs interleaved) and does not call this one.

    Args:
      pipeline: A `tfinput.Pipeline` (built with ``config`` and repeated), or a
        callable ``config -> iterable of batches`` (a `tf.data.Dataset` included).
      config: The config to build with.
      step: Called on every batch, warm-up included (default: input only); a
        `tfinput.steps.Step` is set up with ``step.prepare(config)`` first, and one
        that owns the loop runs the windows itself.
      plan: The `tfinput.measure.windows.WindowPlan`: untimed warm-up batches, then timed
        windows (the objective is their median) of at least ``window_seconds`` and
        ``window_batches`` (default `tfinput.measure.windows.TUNER_PLAN`; see
        `tfinput.measure.windows.WindowPlan` for why ``tfinput bench`` warms up longer).
      report: ``report(window_index, examples_per_s) -> stop?`` after each window.
      clock: Wall clock (injectable for tests).
      cpu_clock: Process CPU clock (default: `tfinput.measure.probes.process_cpu_seconds`).

    Returns:
      The `Measurement`.

    Raises:
      tfinput.errors.ConfigError: ``pipeline`` is neither a pipeline nor a callable.
      tfinput.errors.DataError: the data hold fewer batches than warm-up plus one.
    """
    cpu_clock = cpu_clock or process_cpu_seconds
    begin = clock()
    iterable = Target.of(pipeline, what="tuner").batches(config)
    prepared = Step.of(step).prepare(config)
    size = config.batch_size if config.drop_remainder else None
    owner = prepared.run_windows
    if owner is not None:
        ws = owner(
            iterable,
            plan=plan,
            batch_size=size,
            clock=clock,
            cpu_clock=cpu_clock,
            report=report,
        )
    else:
        ws = _own_windows(iterable, config, prepared, plan, size, clock, cpu_clock, report)
    return _measurement(config, ws, plan, seconds=clock() - begin)


def _own_windows(
    iterable: Iterable[object],
    config: PipelineConfig,
    step: Step,
    plan: WindowPlan,
    size: int | None,
    clock: Callable[[], float],
    cpu_clock: Callable[[], float],
    report: Callable[[int, float], bool] | None,
) -> list[Window]:
    """The windows of a step called on each batch: one iterator, consecutive windows."""

    def ran_out(done: int) -> DataError:
        return DataError(
            f"tuner: the data ended after {done} warm-up batch(es); it needs "
            f"more than {plan.warmup_batches} batches of {config.batch_size}"
        )

    return consecutive_windows(
        iter(iterable),
        plan,
        step=step,
        batch_size=size,
        ran_out=ran_out,
        clock=clock,
        cpu_clock=cpu_clock,
        report=report,
    )


def _measurement(
    config: PipelineConfig, ws: Sequence[Window], plan: WindowPlan, *, seconds: float
) -> Measurement:
    """The `Measurement` of ``config``'s windows; ``seconds``: the whole run."""
    from tfinput._src.measurement.compare import stall_fraction

    timed = sum(w.seconds for w in ws)
    return Measurement(
        config=config,
        rates=tuple(w.examples_per_s for w in ws),
        stall=stall_fraction(ws),
        cores_busy=sum(w.cpu_seconds for w in ws) / timed if timed > 0 else 0.0,
        stopped_early=len(ws) < plan.windows,
        seconds=seconds,
        timed_seconds=timed,
    )


class NoiseAwarePruner(optuna.pruners.BasePruner):
    """Prune the bottom ``quantile`` of trials, beyond the measured noise (maximize).

    Args:
      quantile: Fraction of trials that may be pruned: a trial is compared with this
        quantile of the others (0.25: the bottom quarter). Higher prunes more and
        saves time, at the risk of losing a config whose first windows were unlucky.
      n_startup_trials: Finished trials needed before any pruning: fewer give a
        percentile and a spread that mean little.
      n_warmup_steps: Windows a trial always gets before it can be pruned.
      min_margin: Least relative margin below the percentile (0.05: 5%), used when the
        trials measured so far look quieter than that. Lower prunes near-ties.
    """

    def __init__(
        self,
        *,
        quantile: float = 0.25,
        n_startup_trials: int = 4,
        n_warmup_steps: int = 1,
        min_margin: float = 0.05,
    ) -> None:
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {quantile}")
        if min_margin < 0:
            raise ValueError(f"min_margin must be >= 0, got {min_margin}")
        self.quantile = quantile
        self.n_startup_trials = n_startup_trials
        self.n_warmup_steps = n_warmup_steps
        self.min_margin = min_margin

    def describe(self) -> str:
        return (
            f"prune a trial whose best window so far is below the {self.quantile:.0%} "
            "quantile of the other finished trials at that window by more than the "
            f"study's median window-to-window spread (at least {self.min_margin:.0%}); "
            f"after {self.n_startup_trials} finished trials and {self.n_warmup_steps} "
            "window(s)"
        )

    def threshold(self, study: optuna.Study, step: int) -> tuple[float, float] | None:
        """``(cut, margin)`` at window ``step``, or None while too few trials finished."""
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        finished = study.get_trials(deepcopy=False, states=states)
        at_step = [
            max(v for s, v in t.intermediate_values.items() if s <= step)
            for t in finished
            if step in t.intermediate_values
        ]
        if len(at_step) < max(self.n_startup_trials, 1):
            return None
        spreads = [s for s in (_relative_spread(t) for t in finished) if s is not None]
        margin = max(self.min_margin, statistics.median(spreads) if spreads else 0.0)
        return float(np.percentile(at_step, 100 * self.quantile)), margin

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step < self.n_warmup_steps:
            return False
        if study.direction != optuna.study.StudyDirection.MAXIMIZE:
            raise ValueError("NoiseAwarePruner supports maximized objectives only")
        found = self.threshold(study, step)
        if found is None:
            return False
        cut, margin = found
        best = max(v for s, v in trial.intermediate_values.items() if s <= step)
        return best * (1.0 + margin) < cut


def _relative_spread(trial: optuna.trial.FrozenTrial) -> float | None:
    rates = trial.user_attrs.get("window_rates") or list(trial.intermediate_values.values())
    rates = [r for r in rates if r is not None and r > 0]
    if len(rates) < 2:
        return None
    return (max(rates) - min(rates)) / statistics.median(rates)


log = logging.getLogger("tfinput.tuners")

#: A first trial still running after this many seconds says so, with its step time.
SLOW_FIRST_TRIAL_S = 60.0

STAGES = {
    "roofline": "measuring the roofline with the winner's serial stage (a few seconds)",
    "breakdown": "measuring the gain by knob (the winner with each knob group reverted)",
    "format_advice": "parse may bound tf.Example: converting a sample to columnar records",
}


def duration(seconds: float) -> str:
    """``42 s``, ``3.5 min``, ``1.2 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def trial_line(info: dict[str, object], total: int) -> str:
    """One finished trial: number, name, state, rate, trials done, the best so far, the
    time left (when known) and the config searched."""
    label = info.get("baseline") or f"trial {info['number']}"
    value = f"{info['value']:,.0f}/s" if info.get("value") else info.get("error") or ""
    if info.get("duplicate_of") is not None:
        value = f"not measured: trial {info['duplicate_of']}'s config"
    best = f"best {info['best']:,.0f}/s" if info.get("best") else ""
    parts = [f"trial {info['number']} [{label}] {info['state']} {value} ({info['done']}/{total})"]
    parts.append(best)
    if info.get("eta_s") is not None:
        parts.append(f"~{duration(info['eta_s'])} left")
    line = " ".join(p for p in parts if p)
    params = info.get("params")
    if params:
        line += ": " + " ".join(f"{k}={v}" for k, v in sorted(params.items()))
    return line


def stage_line(event: str, info: dict[str, object]) -> str | None:
    """The line for a stage after the search (confirmation, roofline, ...), or None."""
    if event == "confirm":
        return (
            f"confirming {', '.join(info['configs'])} ({info['windows']} windows each, interleaved)"
        )
    if event == "slow_trial":
        return str(info["message"])
    return STAGES.get(event)


class TrialProgress:
    """``progress(event, info)`` for `tuners.tune`: adds the time left to each ``trial``
    event, watches the first trial, logs the lines (``verbose``) and forwards every
    event to ``display``.

    Used as a context manager around the search: it starts the watchdog thread (which
    wakes every ``poll`` seconds) and, when ``verbose`` and the ``tfinput.tuners``
    logger would drop INFO records (no level set, no handler anywhere), sets the
    logger to INFO and gives it a stderr handler for the call.

    Args:
      total: The trials the search runs.
      plan: Each trial's windows, for the step count in the slow-trial note.
      display: Receives every event (the CLI's progress bar), ``slow_trial`` included.
      verbose: Log the lines on the ``tfinput.tuners`` logger.
      clock: Seconds (the measurement's clock).
      slow_after: Seconds after which a still running first trial says so.
      poll: Seconds between the watchdog's checks (default: a quarter of
        ``slow_after``, at most 5).
      left: Seconds left of the run's timeout (`Budget.left`): the time left said
        never goes past it.
    """

    def __init__(
        self,
        *,
        total: int,
        plan: WindowPlan,
        display: Callable[[str, dict[str, object]], None] | None = None,
        verbose: bool = True,
        clock: Callable[[], float] = time.perf_counter,
        slow_after: float = SLOW_FIRST_TRIAL_S,
        poll: float | None = None,
        left: Callable[[], float] | None = None,
    ) -> None:
        self.total = total
        self.left = left
        self.plan = plan
        self.display = display
        self.verbose = verbose
        self.clock = clock
        self.slow_after = slow_after
        self.poll = poll if poll is not None else min(5.0, slow_after / 4)
        self.started = clock()
        self.trials_seen = 0
        self.step_seconds: list[float] = []
        self.step_started: float | None = None
        self.warned = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._restore: Callable[[], None] = lambda: None

    # ---------------------------------------------------------- the step
    def watch(self, step: Any) -> Step:
        """``step`` (a `Step` or callable) with each call timed, prepared steps too."""
        step = Step.of(step)
        fn = step.fn

        def timed(batch: Any) -> Any:
            self.step_started = self.clock()
            try:
                return fn(batch)
            finally:
                self.step_seconds.append(self.clock() - self.step_started)
                self.step_started = None
                self.check()

        prepare = step.prepare_fn
        return dataclasses.replace(
            step,
            fn=timed,
            prepare_fn=None if prepare is None else (lambda config: self.watch(prepare(config))),
        )

    # ---------------------------------------------------------- the events
    def __call__(self, event: str, info: dict[str, object]) -> None:
        if event == "trial":
            self.trials_seen += 1
            self._stop.set()
            left = max(self.total - info["done"], 0)
            per_trial = (self.clock() - self.started) / self.trials_seen
            eta = per_trial * left if left else None
            if eta is not None and self.left is not None:
                eta = max(0.0, min(eta, self.left()))
            info = {**info, "eta_s": eta}
            if self.verbose:
                log.info("%s", trial_line(info, self.total))
        elif self.verbose and (line := stage_line(event, info)) is not None:
            log.info("%s", line)
        if self.display is not None:
            self.display(event, info)

    def check(self) -> None:
        """Say once, while the first trial runs, that it has run past ``slow_after``."""
        if self.trials_seen or self.warned:
            return
        elapsed = self.clock() - self.started
        if elapsed < self.slow_after:
            return
        with self._lock:
            if self.warned:
                return
            self.warned = True
        message = self.slow_message(elapsed)
        if self.verbose:
            log.warning("%s", message)
        if self.display is not None:
            self.display("slow_trial", {"message": message, "elapsed_s": elapsed})

    def slow_message(self, elapsed: float) -> str:
        """What the slow-first-trial note says: the step time, the trial's and the
        search's expected length, and what makes it faster."""
        head = f"trial 0 still running after {duration(elapsed)}"
        done = sorted(self.step_seconds)
        if not done:
            running = (
                "" if self.step_started is None else " (tracing and compiling, or a slow step)"
            )
            return f"{head}: its first step has not returned yet{running}"
        per_step = done[len(done) // 2]
        per_window = self.plan.window_batches
        if self.plan.timed and per_step > 0:
            per_window = max(per_window, math.ceil(self.plan.window_seconds / per_step))
        steps = self.plan.warmup_batches + self.plan.windows * per_window
        return (
            f"{head}: each step takes ~{per_step:.2g} s, so a trial of {steps} steps "
            f"({self.plan.warmup_batches} warm-up + {self.plan.windows} windows of "
            f"{per_window}) takes ~{duration(per_step * steps)} and "
            f"{self.total} trials ~{duration(per_step * steps * self.total)} (plus the "
            "confirmation). Fewer windows/window_batches or n_trials, or a cheaper step, "
            "finish sooner"
        )

    # ---------------------------------------------------------- the watchdog
    def __enter__(self) -> TrialProgress:
        self.started = self.clock()
        if self.verbose:
            self._restore = _show_info_records()
        self._thread = threading.Thread(target=self._watch, name="tune-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._restore()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll):
            self.check()
            if self.warned:
                return


def _show_info_records() -> Callable[[], None]:
    """Make ``tfinput.tuners``'s INFO records reach stderr when nothing is configured:
    the logger's level INFO if neither it nor ``tfinput`` has one, a stderr handler if no logger up the tree has
    one. Returns what undoes it."""
    undo: list[Callable[[], None]] = []
    if log.level == logging.NOTSET and logging.getLogger("tfinput").level == logging.NOTSET:
        log.setLevel(logging.INFO)
        undo.append(lambda: log.setLevel(logging.NOTSET))
    if not log.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("tune: %(message)s"))
        log.addHandler(handler)
        undo.append(lambda: log.removeHandler(handler))

    def restore() -> None:
        for f in reversed(undo):
            f()

    return restore


#: The fewest windows a trial is cut to: a median of three still drops one outlier.
MIN_WINDOWS = 3


def fit_budget(
    plan: WindowPlan, *, n_trials: int, timeout: float | None
) -> tuple[WindowPlan, str | None]:
    """The trial plan that fits ``n_trials`` trials in ``timeout`` seconds (the search's
    share of the run's timeout: `Budget.search_share`), and the note that says what was
    changed (None when nothing was).

    Only a plan sized by time is changed (its windows' least length is known ahead).
    """
    if timeout is None or not plan.timed:
        return plan, None
    per_window = plan.window_seconds
    need = n_trials * plan.windows * per_window
    if need <= timeout:
        return plan, None
    fit = math.floor(timeout / (n_trials * per_window))
    windows = min(plan.windows, max(MIN_WINDOWS, fit))
    head = (
        f"budget: {n_trials} trials of {plan.windows} windows of at least "
        f"{per_window:g} s need {need:,.0f} s, more than the {timeout:,.0f} s of the "
        "timeout left to the search"
    )
    if windows < plan.windows and fit >= MIN_WINDOWS:
        return dataclasses.replace(plan, windows=windows), (
            f"{head}: each trial measures {windows} windows instead"
        )
    fitted = dataclasses.replace(plan, windows=windows)
    trials = max(1, math.floor(timeout / (windows * per_window)))
    return fitted, (
        f"{head}: each trial measures {windows} windows and the search stops at the "
        f"timeout after about {trials} of {n_trials} trials (raise --timeout, or lower "
        "--n-trials or --window-seconds)"
    )


def least_trial_seconds(plan: WindowPlan) -> float:
    """The least seconds of timed windows a trial of ``plan`` measures when a timeout
    cuts its windows (`fit_budget`: `MIN_WINDOWS`, or fewer when the plan has fewer)."""
    return min(plan.windows, MIN_WINDOWS) * plan.window_seconds


class DeadlineReached(Exception):
    """Raised by a `Budget.guard` progress callback once the run's timeout has passed
    with windows still to measure: the measurement stops after the window that crossed
    it."""


class Budget:
    """The run's time: ``timeout`` seconds from `tuners.tune`'s call, on the
    measurement's clock (injectable, as every measurement's).

    Every stage runs inside it. The search keeps the time the steps after it need
    (`reserve`: the confirmation of the top configs and the gain by knob when they take
    at most `FULL_SHARE` of the timeout, else the confirmation of autotune and the
    search's best) and starts a trial only when the trial's estimate fits in what is
    left; a trial whose next window would not fit in the search's share stops after its
    current window. The confirmation drops its lesser candidates when it does not fit
    whole, and is left out (no verdict) when autotune and the winner do not fit in its
    rounds; it stops after the window that passes the timeout (then it is
    unconfirmed). The gain by knob, the step bound and the format advice run only when
    their estimate fits. So a run ends within the timeout plus one window: the window
    in progress when it passed, counted with what ran since the previous one (a fresh
    iterator's build and warm-up) and after it until the next (the iterator's deletion,
    which can stall TensorFlow for seconds); `longest_window_s`.

    The estimates come from what this run measured (each trial's windows, and its
    build and warm-up); before the first trial, from the plan's windows.

    Args:
      timeout: Seconds (None: no limit; the estimates are still kept).
      clock: The measurement clock.
      plan: The trials' `tfinput.measure.windows.WindowPlan`.
    """

    def __init__(
        self, timeout: float | None, *, clock: Callable[[], float], plan: WindowPlan
    ) -> None:
        self.timeout = timeout
        self.clock = clock
        self.plan = plan
        self.started = clock()
        self._mark = self.started
        self.units: list[float] = []
        self.windows: list[float] = []
        self.overheads: list[float] = []
        self.trials: list[float] = []
        self.level = "full"
        self._after = (0, 0, 0)

    # ------------------------------------------------------------- the clock
    @property
    def limited(self) -> bool:
        """Whether there is a timeout."""
        return self.timeout is not None

    def elapsed(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        """Seconds left (infinite without a timeout)."""
        return math.inf if self.timeout is None else self.timeout - self.elapsed()

    def mark(self) -> None:
        """A measurement starts: its first window counts from here."""
        self._mark = self.clock()

    def window_done(self) -> float:
        """A window ended: it counts, with what ran since the previous mark; its
        seconds so counted."""
        now = self.clock()
        self.units.append(now - self._mark)
        self._mark = now
        return self.units[-1]

    def measurement_done(self) -> None:
        """A measurement ended: what ran after its last window (its iterator's deletion,
        which can stall: docs/tuning.md) counts with that window."""
        now = self.clock()
        if self.units:
            self.units[-1] += now - self._mark
        self._mark = now

    def guard(
        self, progress: Callable[[int, int, Any], None] | None = None
    ) -> Callable[[int, int, Any], None]:
        """A ``progress(done, total, window)`` callback for an interleaved measurement
        (`tfinput.measure.compare.measure`) that counts each window and raises
        `DeadlineReached` once the timeout has passed with windows still to measure;
        ``progress`` is called first."""

        def check(done: int, total: int, window: Any) -> None:
            self.window_done()
            if progress is not None:
                progress(done, total, window)
            if done < total and self.left() < 0:
                raise DeadlineReached(
                    f"stopped at the timeout of {self.timeout:g} s after {done} of {total} windows"
                )

        return check

    # ------------------------------------------------------------ estimates
    def record(self, m: Measurement) -> None:
        """A trial's measurement: its windows, its build and warm-up, its length."""
        if m.rates:
            self.windows += [m.timed_seconds / len(m.rates)] * len(m.rates)
        self.overheads.append(max(0.0, m.seconds - m.timed_seconds))
        self.trials.append(m.seconds)

    def window_s(self) -> float:
        """A timed window: the median measured, else the plan's least length."""
        return statistics.median(self.windows) if self.windows else self.plan.window_seconds

    def fresh_window_s(self) -> float:
        """A window on a fresh iterator (the confirmation's): its build and warm-up,
        then the window."""
        return _typical(self.overheads, 0.0) + self.window_s()

    def trial_s(self) -> float:
        """A trial: the median measured, else the plan's windows."""
        return _typical(self.trials, self.plan.windows * self.window_s())

    #: How much longer than its estimate a measurement after the search is planned to
    #: take: a fresh iterator per window costs more than a trial's share of its build
    #: and warm-up (the deletion of the previous one, a busy host), and a confirmation
    #: cut at the timeout confirms nothing.
    MARGIN = 1.25

    def measuring_s(self, configs: int, rounds: int) -> float:
        """``configs`` measured interleaved in ``rounds`` rounds, a fresh iterator per
        window, with `MARGIN`."""
        return self.MARGIN * configs * rounds * self.fresh_window_s()

    # ------------------------------------------------- the steps after the search
    def settle(self, *, configs: int, rounds: int, breakdown_configs: int) -> str | None:
        """Before the search: what the steps after it measure, ``configs`` (autotune,
        the current config and the top candidates) confirmed in ``rounds`` rounds and
        the gain by knob (``breakdown_configs`` measured with the winner; 0: none), for
        the reserve the search keeps (`reserve`); the note when the timeout cannot hold
        even autotune and the search's best confirmed after one trial (then the search
        keeps nothing). None without a timeout, or when it holds them."""
        self._after = (configs, rounds, breakdown_configs)
        if self.timeout is None:
            return None
        trial = least_trial_seconds(self.plan)
        least = self.measuring_s(min(configs, 2), rounds)
        if self.left() - least >= trial:
            return None
        self.level = "none"
        return (
            f"budget: the timeout of {self.timeout:g} s leaves no time to confirm the "
            f"search's best against autotune ({rounds} rounds of 2 configs need about "
            f"{least:,.0f} s after a trial of about {trial:,.0f} s): the result "
            "is the search's best, not confirmed; raise --timeout to confirm it"
        )

    #: The largest share of the timeout the search keeps for every step after it (the
    #: confirmation of every candidate, the gain by knob); when they need more, it keeps
    #: what autotune and its best confirmed need, and the steps after it measure what
    #: fits then.
    FULL_SHARE = 0.25

    def reserve(self) -> float:
        """Seconds the search keeps for the steps after it, with the estimates as they
        are now: all of them when they take at most `FULL_SHARE` of the timeout (level
        ``full``), else the confirmation of autotune and the search's best (``least``);
        nothing when `settle` found no room for that (``none``)."""
        configs, rounds, breakdown = self._after
        if self.level == "none":
            return 0.0
        full = self.measuring_s(configs, rounds) + self.measuring_s(breakdown, rounds)
        if self.timeout is None or full <= self.FULL_SHARE * self.timeout:
            self.level = "full"
            return full
        self.level = "least"
        return self.measuring_s(min(configs, 2), rounds)

    def search_left(self) -> float:
        """Seconds left to the search (infinite without a timeout)."""
        return self.left() - self.reserve()

    def trial_fits(self) -> bool:
        """Whether one more trial fits in the search's share."""
        return self.search_left() >= self.trial_s()

    def search_share(self) -> float | None:
        """The search's seconds, from now (`fit_budget`'s timeout)."""
        return None if self.timeout is None else max(0.0, self.search_left())

    def fits(self, seconds: float) -> bool:
        """Whether ``seconds`` of work fit in what is left."""
        return seconds <= self.left()

    def skipped(self, what: str, seconds: float) -> str:
        """The note for a step left out because its ``seconds`` do not fit."""
        return (
            f"{what} not measured: it needs about {seconds:,.0f} s and {max(0.0, self.left()):,.0f} s "
            f"of the timeout of {self.timeout:g} s are left (raise --timeout)"
        )

    def to_dict(self) -> dict[str, object]:
        """The run's accounting (``result.json``'s ``budget``): the timeout, the time
        the run took, and its longest window (how far a run may pass the timeout)."""
        return {
            "timeout_s": self.timeout,
            "elapsed_s": round(self.elapsed(), 3),
            "longest_window_s": round(max(self.units, default=0.0), 3),
            "reserve": self.level if self.timeout is not None else None,
        }


def _typical(seconds: list[float], default: float) -> float:
    """The median of ``seconds`` less the first (the process's first measurement also
    pays the start of TensorFlow's runtime and the first tracing), or the first alone,
    or ``default`` when there is none."""
    if not seconds:
        return default
    return statistics.median(seconds[1:] or seconds)


def stopped_by_timeout(*, counted: int, n_trials: int, budget: Budget) -> str | None:
    """The note for a search that the timeout stopped before ``n_trials`` trials."""
    if budget.timeout is None or counted >= n_trials:
        return None
    kept = budget.reserve()
    keep = f", keeping about {kept:,.0f} s for the confirmation" if kept > 0 else ""
    return (
        f"the search stopped after {counted} of {n_trials} trials to end within the "
        f"timeout of {budget.timeout:g} s{keep}"
    )
