"""The measurement layer: how tfinput times a pipeline feeding a step.

Above the core (schema, sources, pipeline) and below the applications that compare,
tune and profile (`tfinput.bench`, `tuners`, `profiles`), which all measure with it:

- `tfinput.measure.windows`: `WindowPlan` (warm-up batches, windows, batches per
  window) and the timing of one window (`measure_window`, `run_window`,
  `consecutive_windows`);
- `tfinput.measure.stats`: windows of several configs interleaved and summarised
  (`ConfigStats`, `summarize`);
- `tfinput.measure.options`: `MeasureOptions` (the plan's counts, the CPUs, the
  probes), what bench and the tuner take as ``measurement=``;
- `tfinput.measure.probes`: clocks, CPU and memory counters, the CPU count, the
  machine record.

The training steps measured against (`tfinput.steps`) belong to this layer too.
Clocks, CPU counters and the CPU count are injectable, so every timing is testable
without sleeping.
"""

from __future__ import annotations

from tfinput._src.measurement.options import MeasureOptions
from tfinput._src.measurement.probes import (
    available_cpus,
    current_rss_bytes,
    keras_backend,
    machine,
    peak_rss_bytes,
    process_cpu_seconds,
)
from tfinput._src.measurement.windows import (
    BENCH_PLAN,
    CAPTURE_PLAN,
    ROOFLINE_PLAN,
    TUNER_PLAN,
    Window,
    WindowPlan,
    consecutive_windows,
    measure_window,
    run_window,
)

__all__ = [
    "BENCH_PLAN",
    "CAPTURE_PLAN",
    "MeasureOptions",
    "ROOFLINE_PLAN",
    "TUNER_PLAN",
    "Window",
    "WindowPlan",
    "available_cpus",
    "consecutive_windows",
    "current_rss_bytes",
    "keras_backend",
    "machine",
    "measure_window",
    "peak_rss_bytes",
    "process_cpu_seconds",
    "run_window",
]
