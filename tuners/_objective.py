"""A trial: measuring one config against a step (the tuner's objective, usable without
Optuna), and the pruner that stops a trial only when it is a clear loser given the noise.
The budget of trials within the user's ``timeout`` is `tuners._budget`'s, what
`tuners.tune` says per trial while it runs `tuners._progress`'s.

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
"""

from __future__ import annotations

import dataclasses
import statistics
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
    (`tfinput._src.measurement.windows.consecutive_windows`). `tfinput.bench.measure`, the
    side-by-side comparison of ``tfinput bench``, is a different measurement (a
    fresh iterator per window, configs interleaved) and does not call this one.

    Args:
      pipeline: A `tfinput.Pipeline` (built with ``config`` and repeated), or a
        callable ``config -> iterable of batches`` (a `tf.data.Dataset` included).
      config: The config to build with.
      step: Called on every batch, warm-up included (default: input only); a
        `tfinput.steps.Step` is set up with ``step.prepare(config)`` first, and one
        that owns the loop runs the windows itself.
      plan: The `tfinput.bench.WindowPlan`: untimed warm-up batches, then timed
        windows (the objective is their median) of at least ``window_seconds`` and
        ``window_batches`` (default `tfinput._src.measurement.windows.TUNER_PLAN`; see
        `tfinput.bench.WindowPlan` for why ``tfinput bench`` warms up longer).
      report: ``report(window_index, examples_per_s) -> stop?`` after each window.
      clock: Wall clock (injectable for tests).
      cpu_clock: Process CPU clock (default: `tfinput._src.measurement.probes.process_cpu_seconds`).

    Returns:
      The `Measurement`.

    Raises:
      tfinput.errors.ConfigError: ``pipeline`` is neither a pipeline nor a callable.
      tfinput.errors.DataError: the data hold fewer batches than warm-up plus one.
    """
    target = Target.of(pipeline, what="tuner")
    return measure_target(
        target, config, step, plan=plan, report=report, clock=clock, cpu_clock=cpu_clock
    )


def measure_target(
    target: Target,
    config: PipelineConfig,
    step: Callable[[Any], Any] | None = None,
    *,
    plan: WindowPlan = TUNER_PLAN,
    report: Callable[[int, float], bool] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] | None = None,
) -> Measurement:
    """`measure` of a `Target` its entry settled (the search's trials)."""
    cpu_clock = cpu_clock or process_cpu_seconds
    begin = clock()
    iterable = target.batches(config)
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
