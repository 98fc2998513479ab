"""Measuring one config against a step: the tuner's objective, usable without Optuna.

    m = measure(pipeline, config, step=steps.simulated_step(0.02), windows=5)
    print(m.median, m.cv)

One trial = one fresh iterator over ``pipeline.build(config).repeat()``, ``warmup``
batches that are not timed (thread start, file opening, buffers filling), then
``windows`` consecutive windows of ``window_batches`` batches, each handed to the step.
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
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

from tfinput.config import PipelineConfig

__all__ = ["Measurement", "measure"]


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
    """

    config: PipelineConfig
    rates: tuple[float, ...]
    stall: float | None
    cores_busy: float
    stopped_early: bool = False
    seconds: float = 0.0

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

    def to_attrs(self) -> dict[str, Any]:
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
        }


def measure(
    pipeline: Any,
    config: PipelineConfig,
    step: Callable[[Any], Any] | None = None,
    *,
    windows: int = 5,
    window_batches: int = 20,
    warmup_batches: int = 5,
    report: Callable[[int, float], bool] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] | None = None,
) -> Measurement:
    """Measure ``config`` on ``pipeline`` with ``step`` (see the module docstring).

    Args:
      pipeline: A `tfinput.Pipeline` (built with ``config`` and repeated), or a
        callable ``config -> iterable of batches`` (a `tf.data.Dataset` included).
      config: The config to build with.
      step: Called on every batch, warm-up included (default: input only); a
        `tfinput.steps.Step` is set up with ``step.prepare(config)`` first, and one
        that owns the loop runs the windows itself.
      windows: Timed windows; the objective is their median.
      window_batches: Batches per window.
      warmup_batches: Untimed batches first.
      report: ``report(window_index, examples_per_s) -> stop?`` after each window.
      clock: Wall clock (injectable for tests).
      cpu_clock: Process CPU clock (default: `tfinput.bench.process_cpu_seconds`).

    Raises:
      tfinput.errors.DataError: the data hold fewer batches than warm-up plus one.
    """
    from tfinput import bench

    cpu_clock = cpu_clock or bench.process_cpu_seconds
    begin = clock()
    iterable = pipeline.build(config).repeat() if hasattr(pipeline, "build") else pipeline(config)
    prepare = getattr(step, "prepare", None)
    if callable(prepare):
        step = prepare(config)
    size = config.batch_size if config.drop_remainder else None
    owner = getattr(step, "run_windows", None)
    if owner is not None:
        ws = owner(
            iterable,
            batch_size=size,
            warmup_batches=warmup_batches,
            windows=windows,
            window_batches=window_batches,
            clock=clock,
            cpu_clock=cpu_clock,
            report=report,
        )
        seconds = sum(w.seconds for w in ws)
        waits = [w.wait_seconds for w in ws]
        return Measurement(
            config=config,
            rates=tuple(w.examples_per_s for w in ws),
            stall=None
            if any(x is None for x in waits)
            else (sum(x or 0.0 for x in waits) / seconds if seconds > 0 else 0.0),
            cores_busy=sum(w.cpu_seconds for w in ws) / seconds if seconds > 0 else 0.0,
            stopped_early=len(ws) < windows,
            seconds=clock() - begin,
        )
    iterator = iter(iterable)
    rates: list[float] = []
    waits = seconds = cpu = 0.0
    stopped = False
    try:
        if warmup_batches:
            warm = bench.measure_window(
                iterator,
                batches=warmup_batches,
                step=step,
                batch_size=size,
                clock=clock,
                cpu_clock=cpu_clock,
            )
            if warm.batches < warmup_batches:
                from tfinput.errors import DataError

                raise DataError(
                    f"tuner: the data ended after {warm.batches} warm-up batch(es); it needs "
                    f"more than {warmup_batches} batches of {config.batch_size}"
                )
        for i in range(windows):
            w = bench.measure_window(
                iterator,
                batches=window_batches,
                step=step,
                batch_size=size,
                clock=clock,
                cpu_clock=cpu_clock,
            )
            rates.append(w.examples_per_s)
            waits += w.wait_seconds
            seconds += w.seconds
            cpu += w.cpu_seconds
            if report is not None and i < windows - 1 and report(i, w.examples_per_s):
                stopped = True
                break
    finally:
        close = getattr(iterator, "close", None)
        if callable(close):
            close()
        del iterator
    return Measurement(
        config=config,
        rates=tuple(rates),
        stall=waits / seconds if seconds > 0 else 0.0,
        cores_busy=cpu / seconds if seconds > 0 else 0.0,
        stopped_early=stopped,
        seconds=clock() - begin,
    )
