"""Configs side by side: `measure`, its `BenchResult`, the configs it compares, and the
statistics of their windows (`ConfigStats`, `summarize`, `stall_fraction`).

`measure` is the side-by-side comparison behind ``tfinput bench`` (`tfinput.bench`) and
the tuner's confirmation. How it measures (and records in ``BenchResult.method``):

- **Windows.** A *window* is consecutive batches consumed from a **fresh iterator**
  (`iter(pipeline.build(config, repeat=True))`) after ``warmup_batches`` batches that
  are not timed; it lasts at least ``window_seconds`` (``DEFAULT_WINDOW_SECONDS``), its
  batches sized from the warm-up's rate, and holds at least ``window_batches``
  (``window_batches`` given alone: exactly that many). A fresh iterator per window makes
  every window pay the same start-up (threads, open files, buffer filling), and the
  warm-up takes that start-up out of the measurement; a continuing iterator would
  let the first config's window absorb it alone and carry buffers filled during
  another config's turn.
- **Interleaving.** Configs take turns, window by window (``A B C A B C ...``,
  `tfinput._src.measurement.windows.interleave`), so slow drift of the machine (other jobs,
  thermal, page cache) touches every config alike; window ``i`` of each config belongs
  to round ``i``, and ratios against the baseline are computed per round, then
  summarized (`summarize`).
- **Statistics.** Per config: the median examples/s over windows (robust to one
  disturbed window), the spread (min-max and coefficient of variation), per-batch
  latency p50/p99 (the time between consecutive batches as the consumer sees it,
  step included), the fraction of time the consumer waited for input (``stall``),
  CPU use of the whole process during windows (``cores_busy``: CPU-seconds per
  second, from `time.process_time`) and the peak resident memory sampled after every batch.
  Runs of one config vary from run to run: differences smaller than the spread are
  not differences.
- **Step.** Each batch is handed to a `tfinput.steps.Step` (default ``input_only``),
  so the same measurement serves a simulated or real training step.

The tuner's `tuners._objective.measure` is the per-config primitive (one iterator, consecutive
windows); this module never calls it, and it never calls this one: both build on
`tfinput._src.measurement.windows` and share `WindowPlan`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tfinput._src.core.config import PipelineConfig
from tfinput._src.core.errors import ConfigError
from tfinput._src.measurement.probes import (
    available_cpus,
    current_rss_bytes,
    machine,
    peak_rss_bytes,
    process_cpu_seconds,
)
from tfinput._src.measurement.roofline import Roofline
from tfinput._src.measurement.steps.base import Step
from tfinput._src.measurement.target import Measurable, MeasureOptions, Target
from tfinput._src.measurement.windows import (
    BENCH_PLAN,
    Clock,
    Progress,
    Window,
    WindowPlan,
    interleave,
    run_window,
)

BENCH_FORMAT = "tfinput.bench/1"

_PRESETS = ("naive", "heuristic", "autotune")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchResult:
    """Everything a benchmark run measured, and how.

    Attributes:
      method: How it was measured (windows, warm-up, order, iterator policy, step).
      machine: CPU model and count, library versions, load average at the start.
      baseline: Name of the config ratios are relative to.
      results: One `ConfigStats` per config, in the order given.
      roofline: The machine's bound, when measured.
    """

    method: dict[str, object]
    machine: dict[str, object]
    baseline: str | None
    results: tuple[ConfigStats, ...]
    roofline: Roofline | None = None

    @property
    def best(self) -> ConfigStats:
        """The config with the highest median examples/s."""
        return max(self.results, key=lambda r: r.median)

    def result(self, name: str) -> ConfigStats:
        """The statistics of config ``name``.

        Raises:
          ConfigError: no config of that name was measured.
        """
        for r in self.results:
            if r.name == name:
                return r
        raise ConfigError(
            f"benchmark: no config {name!r}; configs: {[r.name for r in self.results]}"
        )

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict in the ``tfinput.bench/1`` format (see docs/bench.md)."""
        return {
            "format": BENCH_FORMAT,
            "method": self.method,
            "machine": self.machine,
            "baseline": self.baseline,
            "results": [r.to_dict() for r in self.results],
            "roofline": self.roofline.to_dict() if self.roofline is not None else None,
        }

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The `to_dict` JSON text, also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text


def preset_configs(
    names: Sequence[str], *, cpu_count: int | None = None, **overrides: Any
) -> dict[str, PipelineConfig]:
    """``{name: PipelineConfig.preset(name)}`` for ``naive``, ``heuristic``, ``autotune``.

    Args:
      names: Preset names.
      cpu_count: Cores assumed by ``heuristic`` (None: the process's affinity mask).
      overrides: Knobs set on every preset (for example ``batch_size``).

    Returns:
      The presets by name, in the order given.
    """
    out = {}
    for name in names:
        extra = dict(overrides)
        if name == "heuristic":
            extra["cpu_count"] = cpu_count or available_cpus()
        out[name] = PipelineConfig.preset(name, **extra)
    return out


def load_configs(
    specs: Sequence[str], *, cpu_count: int | None = None, batch_size: int | None = None
) -> dict[str, PipelineConfig]:
    """Configs from CLI-style specs: a preset name or a saved config JSON file.

    A file's config is named after the file (``best.json`` -> ``best``); a spec
    ``name=path`` names it explicitly. ``batch_size`` overrides every config's.

    Raises:
      ConfigError: neither a preset nor a readable config file, or a duplicate name.
    """
    out: dict[str, PipelineConfig] = {}
    for spec in specs:
        name, _, path = spec.partition("=") if "=" in spec else ("", "", spec)
        if path in _PRESETS and not name:
            over = {"batch_size": batch_size} if batch_size else {}
            config = preset_configs([path], cpu_count=cpu_count, **over)[path]
            name = path
        else:
            config = _saved_config(path, batch_size)
            name = name or Path(path).stem
        if name in out:
            raise ConfigError(f"config name {name!r} given twice")
        out[name] = config
    return out


def _saved_config(path: str, batch_size: int | None) -> PipelineConfig:
    if not os.path.exists(path):
        raise ConfigError(
            f"config {path!r} is neither a preset {list(_PRESETS)} nor an existing config file"
        )
    config = PipelineConfig.from_json(path)
    return config.replace(batch_size=batch_size) if batch_size else config


def measure(
    target: Measurable,
    configs: Mapping[str, PipelineConfig],
    *,
    step: Step | Callable[[Any], object] | None = None,
    baseline: str | None = None,
    measurement: MeasureOptions | None = None,
    progress: Progress | None = None,
    roofline_result: Roofline | None = None,
) -> BenchResult:
    """Measure configs side by side, interleaved window by window.

    Args:
      target: A `tfinput.Pipeline` (built with each config and repeated), or a
        callable ``config -> iterable of batches``.
      configs: ``{name: PipelineConfig}``, measured in this order every round.
      step: Called on each batch (default: `tfinput.steps.input_only`). A
        `tfinput.steps.Step` is first set up for each config (`Step.prepare`); one
        that owns the loop (``keras_fit``, ``jax``) gets each window's fresh data
        through its ``run_windows`` instead (``model.fit`` hides input waits: their
        stall is None).
      baseline: Config the ratios refer to (default: the first).
      measurement: Window counts, CPUs and probes (`tfinput.bench.MeasureOptions`;
        the window counts default to `BENCH_PLAN`: a fresh iterator per window, so
        the warm-up must cover ``map_parallelism + prefetch``).
      progress: Called as ``progress(done, total, window)`` after each window.
      roofline_result: A `Roofline` to express each config as a fraction of its
        prediction (`Roofline.predict`: the parallel bound, with the serial stage of
        the configs it probed).

    Returns:
      A `BenchResult`.

    Raises:
      ConfigError: no configs, bad counts, or an unknown baseline.
      DataError: the data hold fewer batches than a warm-up plus one.
    """
    options = measurement or MeasureOptions()
    if not configs:
        raise ConfigError("benchmark: no configs to measure")
    plan = options.plan(BENCH_PLAN, what="benchmark")
    baseline = baseline if baseline is not None else next(iter(configs))
    if baseline not in configs:
        raise ConfigError(f"benchmark: baseline {baseline!r} is not one of {list(configs)}")
    the_step = Step.of(step)
    measured_target = Target.of(target, what="benchmark")
    cores = options.cpu_count or available_cpus()
    clock = options.clock or time.perf_counter
    per_config: dict[str, object] = {}
    runs = {
        name: _config_run(
            name,
            config,
            measured_target.batches,
            the_step,
            plan,
            per_config,
            clock=clock,
            cpu_clock=options.cpu_clock or process_cpu_seconds,
            rss=options.rss or current_rss_bytes,
        )
        for name, config in configs.items()
    }
    measured = interleave(runs, plan.windows, progress)
    bound = None
    if roofline_result is not None:
        bound = {name: roofline_result.predict(name).bound for name in configs}
    stats = summarize(measured, configs=configs, baseline=baseline, cpu_count=cores, bound=bound)
    return BenchResult(
        method=_method(plan, the_step, per_config, clock, measured_target),
        machine=machine(cpu_count=cores),
        baseline=baseline,
        results=tuple(stats),
        roofline=roofline_result,
    )


def _config_run(
    name: str,
    config: PipelineConfig,
    factory: Callable[[PipelineConfig], Iterable[object]],
    step: Step,
    plan: WindowPlan,
    per_config: dict[str, object],
    *,
    clock: Clock,
    cpu_clock: Clock,
    rss: Callable[[], int],
) -> Callable[[], Window]:
    """``() -> Window`` measuring one window of ``config``: the step is set up for it
    now (its description recorded in ``per_config[name]``); each window then takes a
    fresh iterator, or hands fresh data to a step that owns the loop."""
    size = config.batch_size if config.drop_remainder else None
    prepared = step.prepare(config)
    per_config[name] = prepared.describe()
    owner = prepared.run_windows
    if owner is not None:
        # The step drives the data itself (model.fit): one fresh source per window.
        one = dataclasses.replace(plan, windows=1)

        def owned() -> Window:
            ws = owner(factory(config), plan=one, batch_size=size, clock=clock, cpu_clock=cpu_clock)
            return dataclasses.replace(ws[0], peak_rss_bytes=max(ws[0].peak_rss_bytes, rss()))

        return owned
    return lambda: run_window(
        lambda: factory(config),
        warmup_batches=plan.warmup_batches,
        window_batches=plan.window_batches,
        window_seconds=plan.window_seconds,
        step=prepared,
        batch_size=size,
        clock=clock,
        cpu_clock=cpu_clock,
        rss=rss,
    )


def _method(
    plan: WindowPlan, step: Step, per_config: Mapping[str, object], clock: Clock, target: Target
) -> dict[str, object]:
    """The ``method`` record of a `BenchResult`: how every number was taken."""
    first = next(iter(per_config), None)
    return {
        "windows": plan.windows,
        "window_batches": plan.window_batches,
        "window_seconds": plan.window_seconds,
        "warmup_batches": plan.warmup_batches,
        "order": "interleaved: one window per config per round, configs in the given order",
        "iterator": "fresh iterator per window (pipeline.build(config, repeat=True)); warm-up "
        "batches excluded",
        "examples_per_s": "median over windows; spread = min-max and CV over windows",
        "latency": "time between consecutive batches seen by the consumer, step included; "
        "all windows pooled",
        "cpu": "process user+system CPU seconds per wall second (time.process_time), median",
        "memory": "resident set size sampled after every batch (/proc/self/statm), max",
        "ratio": "median over rounds of (config / baseline) in the same round",
        "step": step.describe(),
        "step_per_config": per_config
        if any(d != per_config[first] for d in per_config.values())
        else None,
        "clock": getattr(clock, "__name__", str(clock)),
        "pipeline": _describe(target),
        "process_peak_rss_mb": round(peak_rss_bytes() / 2**20, 1),
    }


def _describe(target: Target) -> dict[str, object] | None:
    if target.pipeline is None:
        return None
    try:
        return target.pipeline.describe()
    except Exception:  # a description must never fail a measurement
        return None


def stall_fraction(windows: Sequence[Window]) -> float | None:
    """Fraction of the windows' time spent waiting for input; None when a window does
    not know it (the step owns the loop, ``model.fit``)."""
    waits = [w.wait_seconds for w in windows]
    if any(x is None for x in waits):
        return None
    seconds = sum(w.seconds for w in windows)
    return sum(x for x in waits if x is not None) / seconds if seconds > 0 else 0.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfigStats:
    """Summary of one config's windows.

    Attributes:
      name: Config name.
      config: The config (None for a plain dataset factory).
      windows: Its windows, in round order.
      median, minimum, maximum: Examples/s over windows.
      cv: Coefficient of variation of examples/s over windows (std / mean).
      latency_p50_ms, latency_p99_ms: Per-batch latency percentiles, all windows pooled.
      stall: Fraction of window time spent waiting for the next batch; None when a
        window could not know it (the step owns the loop, ``model.fit``).
      cores_busy: Median process CPU-seconds per second.
      utilisation: ``cores_busy / cpu_count``.
      peak_rss_mb: Highest resident memory sampled during its windows.
      ratio, ratio_min, ratio_max: Examples/s over the baseline's: median of the
        per-round ratios, and their range.
      roofline_fraction: The median over the roofline's bound, when one was measured.
    """

    name: str
    config: PipelineConfig | None
    windows: tuple[Window, ...]
    median: float
    minimum: float
    maximum: float
    cv: float
    latency_p50_ms: float
    latency_p99_ms: float
    stall: float | None
    cores_busy: float
    utilisation: float
    peak_rss_mb: float
    ratio: float | None = None
    ratio_min: float | None = None
    ratio_max: float | None = None
    roofline_fraction: float | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (the ``results`` entries of the ``tfinput.bench/1`` format)."""

        def r(x: float | None, nd: int = 3) -> float | None:
            return None if x is None else round(x, nd)

        return {
            "name": self.name,
            "config": self.config.to_dict() if self.config is not None else None,
            "examples_per_s": {
                "median": r(self.median, 1),
                "min": r(self.minimum, 1),
                "max": r(self.maximum, 1),
                "cv": r(self.cv, 4),
            },
            "latency_ms": {"p50": r(self.latency_p50_ms), "p99": r(self.latency_p99_ms)},
            "stall_fraction": r(self.stall, 4),
            "cpu": {"cores_busy": r(self.cores_busy), "utilisation": r(self.utilisation)},
            "peak_rss_mb": r(self.peak_rss_mb, 1),
            "vs_baseline": {
                "ratio": r(self.ratio),
                "min": r(self.ratio_min),
                "max": r(self.ratio_max),
            },
            "roofline_fraction": r(self.roofline_fraction),
            "windows": [w.to_dict() for w in self.windows],
        }


def summarize(
    windows: Mapping[str, Sequence[Window]],
    *,
    configs: Mapping[str, PipelineConfig | None] | None = None,
    baseline: str | None = None,
    cpu_count: int = 1,
    bound: float | Mapping[str, float] | None = None,
) -> list[ConfigStats]:
    """Statistics per config, ratios to ``baseline`` per round, roofline fractions.

    Args:
      windows: Windows by config name (round order).
      configs: The configs, for the record.
      baseline: Config the ratios are relative to (None: no ratios).
      cpu_count: CPUs, for utilisation.
      bound: The roofline bound in examples/s, for fractions: one for every config, or
        ``{name: bound}`` (`tfinput.bench.Roofline.predict` per config; a config
        missing from it gets no fraction). None: no fractions.

    Returns:
      One `ConfigStats` per config, in the order of ``windows``.

    Raises:
      ConfigError: ``baseline`` is not one of the configs.
    """
    if baseline is not None and baseline not in windows:
        raise ConfigError(f"benchmark: baseline {baseline!r} is not one of {list(windows)}")
    base = {w.round: w.examples_per_s for w in windows[baseline]} if baseline else {}
    return [
        _config_stats(
            name,
            ws,
            config=(configs or {}).get(name),
            base=base,
            cpu_count=cpu_count,
            bound=bound.get(name) if isinstance(bound, Mapping) else bound,
        )
        for name, ws in windows.items()
    ]


def _config_stats(
    name: str,
    ws: Sequence[Window],
    *,
    config: PipelineConfig | None,
    base: Mapping[int, float],
    cpu_count: int,
    bound: float | None,
) -> ConfigStats:
    """One config's `ConfigStats`; ``base`` holds the baseline's rate per round."""
    rates = np.array([w.examples_per_s for w in ws], dtype=np.float64)
    intervals = np.array([s for w in ws for s in w.batch_seconds], dtype=np.float64)
    mean = float(rates.mean())
    std = float(rates.std(ddof=1)) if len(rates) > 1 else 0.0
    ratios = [w.examples_per_s / base[w.round] for w in ws if base.get(w.round)]
    median = float(np.median(rates))
    cores = statistics.median(w.cores_busy for w in ws)
    return ConfigStats(
        name=name,
        config=config,
        windows=tuple(ws),
        median=median,
        minimum=float(rates.min()),
        maximum=float(rates.max()),
        cv=std / mean if mean > 0 else 0.0,
        latency_p50_ms=float(np.percentile(intervals, 50)) * 1e3,
        latency_p99_ms=float(np.percentile(intervals, 99)) * 1e3,
        stall=stall_fraction(ws),
        cores_busy=cores,
        utilisation=cores / max(cpu_count, 1),
        peak_rss_mb=max(w.peak_rss_bytes for w in ws) / 2**20,
        ratio=float(np.median(ratios)) if ratios else None,
        ratio_min=min(ratios) if ratios else None,
        ratio_max=max(ratios) if ratios else None,
        roofline_fraction=median / bound if bound else None,
    )
