"""Honest side-by-side throughput of pipeline configs: ``tfinput bench``.

    from tfinput import bench
    pipeline = tfinput.tfrecord("data/*.tfrecord", schema)
    result = bench.measure(pipeline, bench.preset_configs(["naive", "heuristic", "autotune"]))
    print(result.to_json())

How a measurement is taken (and recorded in ``result.method``):

- **Windows.** A *window* is consecutive batches consumed from a **fresh iterator**
  (`iter(pipeline.build(config, repeat=True))`) after ``warmup_batches`` batches that
  are not timed; it lasts at least ``window_seconds`` (`DEFAULT_WINDOW_SECONDS`), its
  batches sized from the warm-up's rate, and holds at least ``window_batches``
  (``window_batches`` given alone: exactly that many). A fresh iterator per window makes
  every window pay the same start-up (threads, open files, buffer filling), and the
  warm-up takes that start-up out of the measurement; a continuing iterator would
  let the first config's window absorb it alone and carry buffers filled during
  another config's turn.
- **Interleaving.** Configs take turns, window by window (``A B C A B C ...``), so
  slow drift of the machine (other jobs, thermal, page cache) touches every config
  alike; window ``i`` of each config belongs to round ``i``, and ratios against the
  baseline are computed per round, then summarized.
- **Statistics.** Per config: the median examples/s over windows (robust to one
  disturbed window), the spread (min-max and coefficient of variation), per-batch
  latency p50/p99 (the time between consecutive batches as the consumer sees it,
  step included), the fraction of time the consumer waited for input (``stall``),
  CPU use of the whole process during windows (``cores_busy``: CPU-seconds per
  second, from `time.process_time`) and the peak resident memory sampled after every batch.
  Runs of one config vary from run to run: differences smaller than the spread are
  not differences.
- **Step.** Each batch is handed to a `tfinput.steps.Step` (default ``input_only``),
  so the same measurement serves a simulated or real training step; this is the
  objective the tuner optimizes.

The package, one job per module:

- `tfinput._src.applications.bench.bound`: the `roofline` (the machine's upper bound; see its docstring
  and ``docs/bench.md``) over the source's own stages (`Source.roofline_stages`).
- `tfinput._src.applications.bench.compare`: `measure` (configs side by side), `BenchResult`, presets.

It also re-exports the measurement primitives, which live one layer down in
`tfinput.measure` (shared with `tfinput.steps`, the tuner and the profiler):
`tfinput.measure.windows` (`WindowPlan`: warm-up, windows, batches per window, the one
object bench, tuner and profiler share, with their defaults; `Window`, `measure_window`,
`run_window`, `consecutive_windows`), `tfinput.measure.stats` (configs interleaved
window by window, `ConfigStats`, `summarize`) and `tfinput.measure.probes` (clocks, CPU
counters, memory probes, the machine record).

Two functions are called ``measure``: `tuners.measure` is the per-config primitive
(one config, one iterator, consecutive windows: the tuner's objective) and
`tfinput.bench.measure` the side-by-side comparison (fresh iterator per window,
configs interleaved). Neither calls the other; both build on `measure_window`.

Clocks, CPU counters, memory probes and the CPU count are injectable, so all of it
is testable without sleeping. ``import tfinput.bench`` is light: each name loads its
module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "BENCH_FORMAT",
    "BENCH_PLAN",
    "CAPTURE_PLAN",
    "DEFAULT_WINDOW_SECONDS",
    "ROOFLINE_PLAN",
    "TUNER_PLAN",
    "BenchResult",
    "ConfigStats",
    "Prediction",
    "Roofline",
    "SerialStage",
    "Stage",
    "Window",
    "WindowPlan",
    "available_cpus",
    "batch_rows",
    "current_rss_bytes",
    "load_configs",
    "machine",
    "measure",
    "measure_window",
    "peak_rss_bytes",
    "preset_configs",
    "process_cpu_seconds",
    "roofline",
    "roofline_from_stages",
    "run_window",
    "serial_advice",
    "summarize",
]

if TYPE_CHECKING:  # pragma: no cover
    from tfinput._src.applications.bench.bound import (
        Prediction,
        Roofline,
        SerialStage,
        Stage,
        roofline,
        roofline_from_stages,
        serial_advice,
    )
    from tfinput._src.applications.bench.compare import (
        BENCH_FORMAT,
        BenchResult,
        load_configs,
        measure,
        preset_configs,
    )
    from tfinput._src.measurement.probes import (
        available_cpus,
        current_rss_bytes,
        machine,
        peak_rss_bytes,
        process_cpu_seconds,
    )
    from tfinput._src.measurement.stats import ConfigStats, summarize
    from tfinput._src.measurement.windows import (
        BENCH_PLAN,
        CAPTURE_PLAN,
        DEFAULT_WINDOW_SECONDS,
        ROOFLINE_PLAN,
        TUNER_PLAN,
        Window,
        WindowPlan,
        batch_rows,
        measure_window,
        run_window,
    )


def __getattr__(name: str) -> Any:
    # Each name imported from its module on first use, by an import statement (which
    # tests/test_layers.py sees), then kept here: later lookups skip this function.
    match name:
        case "BENCH_FORMAT" | "BenchResult" | "load_configs" | "measure" | "preset_configs":
            import tfinput._src.applications.bench.compare as module
        case "ConfigStats" | "summarize":
            import tfinput._src.measurement.stats as module
        case (
            "Prediction"
            | "Roofline"
            | "SerialStage"
            | "serial_advice"
            | "Stage"
            | "roofline"
            | "roofline_from_stages"
        ):
            import tfinput._src.applications.bench.bound as module
        case (
            "BENCH_PLAN"
            | "CAPTURE_PLAN"
            | "DEFAULT_WINDOW_SECONDS"
            | "ROOFLINE_PLAN"
            | "TUNER_PLAN"
            | "Window"
            | "WindowPlan"
            | "batch_rows"
            | "measure_window"
            | "run_window"
        ):
            import tfinput._src.measurement.windows as module
        case (
            "available_cpus"
            | "current_rss_bytes"
            | "machine"
            | "peak_rss_bytes"
            | "process_cpu_seconds"
        ):
            import tfinput._src.measurement.probes as module
        case _:
            raise AttributeError(
                f"module 'tfinput._src.applications.bench' has no attribute {name!r}"
            )
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
