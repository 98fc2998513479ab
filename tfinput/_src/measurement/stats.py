"""Configs taking turns window by window, and the statistics of their windows.

Configs are measured interleaved (``A B C A B C ...``, `interleave`) so that slow
drift of the machine touches every config alike; window ``i`` of each config belongs
to round ``i``, and ratios against the baseline are computed per round, then
summarized (`summarize`).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tfinput._src.core.config import PipelineConfig
from tfinput._src.core.errors import ConfigError
from tfinput._src.measurement.windows import Progress, Window

__all__ = ["ConfigStats", "interleave", "stall_fraction", "summarize"]


def interleave(
    runs: Mapping[str, Callable[[], Window]], windows: int, progress: Progress | None
) -> dict[str, list[Window]]:
    """Run ``windows`` rounds of one window per entry of ``runs``, in order.

    Args:
      runs: ``{name: run}``; each call of ``run`` measures one window.
      windows: Rounds.
      progress: Called as ``progress(done, total, window)`` after each window.

    Returns:
      ``{name: windows}`` in round order, each named and numbered.
    """
    out: dict[str, list[Window]] = {name: [] for name in runs}
    total = windows * len(runs)
    done = 0
    for r in range(windows):
        for name, run in runs.items():
            w = dataclasses.replace(run(), name=name, round=r)
            out[name].append(w)
            done += 1
            if progress is not None:
                progress(done, total, w)
    return out


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

    def to_dict(self) -> dict[str, Any]:
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
        ``{name: bound}`` (`tfinput.measure.roofline.Roofline.predict` per config; a config
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
