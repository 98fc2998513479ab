"""Honest side-by-side throughput of pipeline configs: ``tfinput bench``.

    from tfinput import bench
    pipeline = tfinput.tfrecord("data/*.tfrecord", schema)
    result = bench.measure(pipeline, bench.preset_configs(["naive", "heuristic", "autotune"]))
    print(result.to_json())

How a measurement is taken (and recorded in ``result.method``):

- **Windows.** A *window* is ``window_batches`` consecutive batches consumed from a
  **fresh iterator** (`iter(pipeline.build(config).repeat())`) after
  ``warmup_batches`` batches that are not timed. A fresh iterator per window makes
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
  Runs of one config on a 2-core machine vary by 10-20%: differences smaller than
  the spread are not differences.
- **Step.** Each batch is handed to a `tfinput.steps.Step` (default ``input_only``),
  so the same measurement serves a simulated or real training step; this is the
  objective the tuner optimizes.

`measure_window` measures one window of an already-started iterator and is all the
timing logic; `run_window` adds the fresh iterator and the warm-up; `measure`
interleaves configs; `roofline` estimates the machine's upper bound (see its
docstring and ``docs/bench.md``). Clocks, CPU counters, memory probes and the CPU
count are injectable, so all of it is testable without sleeping.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, DataError, SourceError

__all__ = [
    "BENCH_FORMAT",
    "BenchResult",
    "ConfigStats",
    "Roofline",
    "Stage",
    "Window",
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
    "summarize",
]

BENCH_FORMAT = "tfinput.bench/1"

Clock = Callable[[], float]
Progress = Callable[[int, int, "Window"], None]


# --------------------------------------------------------------------- probes
def process_cpu_seconds() -> float:
    """User + system CPU time of this process, all threads (`time.process_time`)."""
    return time.process_time()


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def current_rss_bytes() -> int:
    """Resident memory of this process now (``/proc/self/statm``; else the peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (``ru_maxrss``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask), else `os.cpu_count`."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _tf_version() -> str | None:
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "__version__"):
        return str(tf.__version__)
    from importlib import metadata

    for dist in ("tensorflow", "tensorflow-cpu", "tensorflow-tpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _keras_backend() -> str:
    from tfinput.steps import keras_backend

    return keras_backend()


def machine(*, cpu_count: int | None = None) -> dict[str, Any]:
    """The description recorded next to every measurement.

    Args:
      cpu_count: CPUs to assume (None: the process's affinity mask).
    """
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    import pyarrow

    return {
        "cpu_model": _cpu_model(),
        "cpu_count": cpu_count or available_cpus(),
        "logical_cpus": os.cpu_count(),
        "tensorflow": _tf_version(),
        "keras_backend": _keras_backend(),
        "pyarrow": pyarrow.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "load_average": load,
    }


# -------------------------------------------------------------------- windows
@dataclasses.dataclass(frozen=True, kw_only=True)
class Window:
    """One timed window of consecutive batches.

    Attributes:
      name: Config (or stage) name.
      round: Round number: window ``i`` of every config belongs to round ``i``.
      batches: Batches consumed.
      examples: Examples in those batches.
      seconds: Wall time of the window.
      cpu_seconds: Process CPU time (all threads) during the window.
      batch_seconds: Time between consecutive batches, step included.
      wait_seconds: Time spent waiting for the next batch (input stall); None when
        the step owns the loop and hides it (``model.fit``).
      peak_rss_bytes: Highest resident memory sampled during the window.
    """

    name: str = ""
    round: int = 0
    batches: int
    examples: int
    seconds: float
    cpu_seconds: float
    batch_seconds: tuple[float, ...]
    wait_seconds: float | None
    peak_rss_bytes: int = 0

    @property
    def examples_per_s(self) -> float:
        return self.examples / self.seconds if self.seconds > 0 else float("inf")

    @property
    def cores_busy(self) -> float:
        return self.cpu_seconds / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "batches": self.batches,
            "examples": self.examples,
            "seconds": round(self.seconds, 6),
            "examples_per_s": round(self.examples_per_s, 1),
            "cpu_seconds": round(self.cpu_seconds, 4),
            "wait_seconds": None if self.wait_seconds is None else round(self.wait_seconds, 6),
            "peak_rss_mb": round(self.peak_rss_bytes / 2**20, 1),
        }


def batch_rows(batch: Any) -> int:
    """Examples in a batch: the leading dimension of its first non-empty leaf."""
    if hasattr(batch, "num_rows"):  # pyarrow RecordBatch / Table
        return int(batch.num_rows)
    if isinstance(batch, Mapping):
        for value in batch.values():
            n = batch_rows(value)
            if n >= 0:
                return n
        return -1
    if isinstance(batch, (tuple, list)):
        for value in batch:
            n = batch_rows(value)
            if n >= 0:
                return n
        return -1
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        first = shape[0]
        return int(first) if first is not None else -1
    return -1


def measure_window(
    iterator: Iterator[Any],
    *,
    batches: int,
    step: Callable[[Any], Any] | None = None,
    batch_size: int | None = None,
    count: Callable[[Any], int] | None = None,
    clock: Clock = time.perf_counter,
    cpu_clock: Clock = process_cpu_seconds,
    rss: Callable[[], int] = current_rss_bytes,
    sync: Callable[[], None] | None = None,
) -> Window:
    """Time ``batches`` batches from a started iterator.

    Args:
      iterator: Yields batches (warm-up already done).
      batches: Batches to consume; fewer if the iterator ends (at least one needed).
      step: Called on each batch (a `tfinput.steps.Step` or any callable).
      batch_size: Examples per batch when fixed (``drop_remainder``); None counts
        each batch with ``count``.
      count: Examples in a batch (default `batch_rows`).
      clock: Wall clock, seconds.
      cpu_clock: Process CPU time, seconds.
      rss: Resident memory probe, bytes.
      sync: Called after the last batch's step, before the window's end is taken
        (a step that dispatches asynchronously blocks there on its work).

    Returns:
      A `Window` (``name`` and ``round`` are left for the caller).

    Raises:
      DataError: the iterator yielded no batch at all.
    """
    count = count or batch_rows
    intervals: list[float] = []
    examples = 0
    wait = 0.0
    peak = rss()
    cpu0 = cpu_clock()
    start = last = clock()
    for _ in range(batches):
        try:
            batch = next(iterator)
        except StopIteration:
            break
        got = clock()
        wait += got - last
        if step is not None:
            step(batch)
        examples += batch_size if batch_size is not None else max(count(batch), 0)
        now = clock()
        intervals.append(now - last)
        last = now
        peak = max(peak, rss())
    if sync is not None and intervals:
        sync()
        now = clock()
        intervals[-1] += now - last
        last = now
    end = last
    cpu = cpu_clock() - cpu0
    if not intervals:
        raise DataError(
            "benchmark: the dataset produced no batch; it holds fewer examples than one "
            "batch (generate more data or lower the batch size)"
        )
    return Window(
        batches=len(intervals),
        examples=examples,
        seconds=end - start,
        cpu_seconds=cpu,
        batch_seconds=tuple(intervals),
        wait_seconds=wait,
        peak_rss_bytes=peak,
    )


def run_window(
    make_iterable: Callable[[], Iterable[Any]],
    *,
    warmup_batches: int,
    window_batches: int,
    step: Callable[[Any], Any] | None = None,
    batch_size: int | None = None,
    count: Callable[[Any], int] | None = None,
    clock: Clock = time.perf_counter,
    cpu_clock: Clock = process_cpu_seconds,
    rss: Callable[[], int] = current_rss_bytes,
) -> Window:
    """A fresh iterator, ``warmup_batches`` untimed batches, then `measure_window`.

    Raises:
      DataError: the data ran out during warm-up (fewer batches than warm-up).
    """
    iterator = iter(make_iterable())
    try:
        for i in range(warmup_batches):
            try:
                batch = next(iterator)
            except StopIteration:
                raise DataError(
                    f"benchmark: the dataset ended after {i} warm-up batch(es); it needs "
                    f"at least {warmup_batches + 1} batches (repeat it or add data)"
                ) from None
            if step is not None:
                step(batch)
        return measure_window(
            iterator,
            batches=window_batches,
            step=step,
            batch_size=batch_size,
            count=count,
            clock=clock,
            cpu_clock=cpu_clock,
            rss=rss,
        )
    finally:
        close = getattr(iterator, "close", None)
        if callable(close):
            close()
        del iterator


def _interleave(
    runs: Mapping[str, Callable[[], Window]], windows: int, progress: Progress | None
) -> dict[str, list[Window]]:
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


# ------------------------------------------------------------------ statistics
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
    bound: float | None = None,
) -> list[ConfigStats]:
    """Statistics per config, ratios to ``baseline`` per round, roofline fractions.

    Args:
      windows: Windows by config name (round order).
      configs: The configs, for the record.
      baseline: Config the ratios are relative to (None: no ratios).
      cpu_count: CPUs, for utilisation.
      bound: The roofline bound in examples/s, for fractions (None: none).

    Raises:
      ConfigError: ``baseline`` is not one of the configs.
    """
    if baseline is not None and baseline not in windows:
        raise ConfigError(f"benchmark: baseline {baseline!r} is not one of {list(windows)}")
    base = {w.round: w.examples_per_s for w in windows[baseline]} if baseline else {}
    out = []
    for name, ws in windows.items():
        rates = np.array([w.examples_per_s for w in ws], dtype=np.float64)
        intervals = np.array([s for w in ws for s in w.batch_seconds], dtype=np.float64)
        mean = float(rates.mean())
        std = float(rates.std(ddof=1)) if len(rates) > 1 else 0.0
        ratios = [w.examples_per_s / base[w.round] for w in ws if base.get(w.round)]
        seconds = sum(w.seconds for w in ws)
        median = float(np.median(rates))
        cores = statistics.median(w.cores_busy for w in ws)
        out.append(
            ConfigStats(
                name=name,
                config=(configs or {}).get(name),
                windows=tuple(ws),
                median=median,
                minimum=float(rates.min()),
                maximum=float(rates.max()),
                cv=std / mean if mean > 0 else 0.0,
                latency_p50_ms=float(np.percentile(intervals, 50)) * 1e3,
                latency_p99_ms=float(np.percentile(intervals, 99)) * 1e3,
                stall=_stall(ws, seconds),
                cores_busy=cores,
                utilisation=cores / max(cpu_count, 1),
                peak_rss_mb=max(w.peak_rss_bytes for w in ws) / 2**20,
                ratio=float(np.median(ratios)) if ratios else None,
                ratio_min=min(ratios) if ratios else None,
                ratio_max=max(ratios) if ratios else None,
                roofline_fraction=median / bound if bound else None,
            )
        )
    return out


def _stall(windows: Sequence[Window], seconds: float) -> float | None:
    """Fraction of ``seconds`` spent waiting for input; None if a window does not know."""
    waits = [w.wait_seconds for w in windows]
    if any(x is None for x in waits):
        return None
    return sum(x for x in waits if x is not None) / seconds if seconds > 0 else 0.0


# -------------------------------------------------------------------- roofline
@dataclasses.dataclass(frozen=True, kw_only=True)
class Stage:
    """One roofline stage measured alone on one core.

    Attributes:
      name: ``read``, ``parse`` or ``full``.
      description: What the stage runs.
      examples_per_s: Median wall-clock rate.
      examples_per_cpu_s: Median examples per CPU-second of the process: the inverse
        of the per-example CPU cost, whatever threads did the work. This is the rate
        the bound uses; it equals the wall rate when the stage kept exactly one core
        busy, and is not disturbed by other processes taking the CPU.
      cores_busy: Median CPU-seconds per second while it ran (about 1 when the
        single-thread settings held).
      windows: Its windows.
    """

    name: str
    description: str
    examples_per_s: float
    examples_per_cpu_s: float
    cores_busy: float
    windows: tuple[Window, ...] = ()

    @property
    def us_per_example(self) -> float:
        """CPU cost per example, microseconds."""
        rate = self.examples_per_cpu_s
        return 1e6 / rate if rate > 0 else float("inf")

    @classmethod
    def from_windows(cls, name: str, description: str, windows: Sequence[Window]) -> Stage:
        """Medians over windows; the CPU rate falls back to the wall rate when the CPU
        clock did not advance (fake clocks)."""
        wall = [w.examples_per_s for w in windows]
        cpu = [
            w.examples / w.cpu_seconds if w.cpu_seconds > 0 else w.examples_per_s for w in windows
        ]
        return cls(
            name=name,
            description=description,
            examples_per_s=float(np.median(wall)),
            examples_per_cpu_s=float(np.median(cpu)),
            cores_busy=float(np.median([w.cores_busy for w in windows])),
            windows=tuple(windows),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Roofline:
    """The machine's estimated upper bound for one pipeline (see `roofline`).

    Attributes:
      stages: ``read``, ``parse``, ``full``, each measured alone on one core.
      cores: CPUs assumed.
      files: Input files (reads of one file are sequential).
      bytes_per_example: Average serialized size (TFRecord) or on-disk size (Parquet).
      cpu_bound: ``cores`` x the full pipeline's examples per CPU-second.
      read_bound: ``min(cores, files)`` x the read stage's examples per CPU-second.
      bound: ``min(cpu_bound, read_bound)``, examples/s.
      limited_by: ``cpu`` or ``read``.
    """

    stages: tuple[Stage, ...]
    cores: int
    files: int
    bytes_per_example: float | None
    cpu_bound: float
    read_bound: float
    bound: float
    limited_by: str

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def cost_us(self) -> dict[str, float]:
        """CPU cost per example of each part, microseconds (stage differences)."""
        read = self.stage("read").us_per_example
        parse = self.stage("parse").us_per_example
        full = self.stage("full").us_per_example
        return {
            "read": read,
            "parse": max(parse - read, 0.0),
            "transform": max(full - parse, 0.0),
            "total": full,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "cores": self.cores,
            "files": self.files,
            "bytes_per_example": (
                None if self.bytes_per_example is None else round(self.bytes_per_example, 1)
            ),
            "stages": [
                {
                    "name": s.name,
                    "description": s.description,
                    "examples_per_s": round(s.examples_per_s, 1),
                    "examples_per_cpu_s": round(s.examples_per_cpu_s, 1),
                    "us_per_example": round(s.us_per_example, 3),
                    "cores_busy": round(s.cores_busy, 3),
                    "windows": [w.to_dict() for w in s.windows],
                }
                for s in self.stages
            ],
            "cost_us_per_example": {k: round(v, 3) for k, v in self.cost_us().items()},
            "cpu_bound_examples_per_s": round(self.cpu_bound, 1),
            "read_bound_examples_per_s": round(self.read_bound, 1),
            "bound_examples_per_s": round(self.bound, 1),
            "limited_by": self.limited_by,
        }


def roofline_from_stages(
    stages: Sequence[Stage], *, cores: int, files: int, bytes_per_example: float | None = None
) -> Roofline:
    """The bound from measured stages: ``min(cores x full, min(cores, files) x read)``,
    with per-CPU-second rates."""
    by = {s.name: s for s in stages}
    missing = {"read", "parse", "full"} - set(by)
    if missing:
        raise ConfigError(f"roofline: stages {sorted(missing)} are missing")
    cpu_bound = cores * by["full"].examples_per_cpu_s
    read_bound = max(1, min(cores, files)) * by["read"].examples_per_cpu_s
    bound = min(cpu_bound, read_bound)
    return Roofline(
        stages=tuple(by[n] for n in ("read", "parse", "full")),
        cores=cores,
        files=files,
        bytes_per_example=bytes_per_example,
        cpu_bound=cpu_bound,
        read_bound=read_bound,
        bound=bound,
        limited_by="cpu" if cpu_bound <= read_bound else "read",
    )


def _single_core_options() -> Any:
    import tensorflow as tf

    opts = tf.data.Options()
    opts.threading.private_threadpool_size = 1
    opts.threading.max_intra_op_parallelism = 1
    opts.autotune.enabled = False
    return opts


def _stage_factories(pipeline: Any, batch_size: int) -> tuple[dict, dict, dict, int, float | None]:
    """(factories, descriptions, counters, files, bytes/example) for a pipeline's stages."""
    from tfinput.sources import ParquetSource, TFRecordSource

    source = pipeline.source
    schema = pipeline.schema
    files = source.files()
    single = PipelineConfig.naive(
        batch_size=batch_size, private_threadpool_size=1, max_intra_op_parallelism=1
    )

    def full() -> Iterable[Any]:
        return pipeline.build(single).repeat().with_options(_single_core_options())

    if isinstance(source, TFRecordSource):
        import tensorflow as tf

        from tfinput.transforms import parse_spec

        compression = source.compression_of(files[0])
        spec = parse_spec(schema)
        opts = _single_core_options()

        def read() -> Iterable[Any]:
            ds = tf.data.TFRecordDataset(files, compression)
            return ds.batch(batch_size, drop_remainder=True).repeat().with_options(opts)

        def parse() -> Iterable[Any]:
            ds = tf.data.TFRecordDataset(files, compression).batch(batch_size, drop_remainder=True)
            ds = ds.map(lambda x: tf.io.parse_example(x, spec))
            return ds.repeat().with_options(opts)

        first = next(iter(tf.data.TFRecordDataset(files[0], compression).batch(256)), None)
        per_example = None
        if first is not None:
            per_example = float(np.mean([len(x) for x in first.numpy()]))
        descriptions = {
            "read": "TFRecordDataset over the files in order, batch(B)",
            "parse": "read + tf.io.parse_example (no tfinput transforms)",
            "full": "the tfinput pipeline: naive config, one private thread, autotune off",
        }
        return (
            {"read": read, "parse": parse, "full": full},
            descriptions,
            {},
            len(files),
            per_example,
        )
    if isinstance(source, ParquetSource):
        import pyarrow.parquet as pq

        from tfinput.sources import _ParquetBatches

        columns = schema.columns()

        def read() -> Iterable[Any]:
            import pyarrow.dataset as pads

            def gen() -> Iterator[Any]:
                while True:  # the scan tfinput's reader does, without conversion
                    scanner = pads.dataset(files, format="parquet").scanner(
                        columns=columns,
                        batch_size=max(batch_size, 1 << 14),
                        use_threads=False,
                        fragment_readahead=1,
                        batch_readahead=4,
                    )
                    yield from scanner.to_batches()

            return gen()

        def parse() -> Iterable[Any]:
            def gen() -> Iterator[Any]:
                while True:
                    batches = _ParquetBatches(
                        files=files,
                        schema=schema,
                        config=single,
                        batch_size=batch_size,
                        shuffle_files=False,
                    )
                    yield from batches()

            return gen()

        label = schema.labels[0].source if schema.labels else None

        def count_numpy(batch: Mapping[str, Any]) -> int:
            if label is not None:
                return len(batch[label])
            key = next(k for k in batch if "/" not in k or k.endswith("/lengths"))
            return len(batch[key])

        rows = sum(pq.ParquetFile(p).metadata.num_rows for p in files)
        size = sum(os.path.getsize(p) for p in files)
        descriptions = {
            "read": "pyarrow dataset scan of the schema's columns, one thread",
            "parse": "read + conversion to numpy (tfinput's Parquet reader, one thread)",
            "full": "the tfinput pipeline: naive config, one private thread, autotune off",
        }
        return (
            {"read": read, "parse": parse, "full": full},
            descriptions,
            {"read": batch_rows, "parse": count_numpy},
            len(files),
            size / rows if rows else None,
        )
    if source.kind == "columnar":
        return _columnar_stages(pipeline, batch_size, full, files)
    raise SourceError(
        f"roofline: supported for tfrecord, parquet and columnar sources, not {source.kind!r}"
    )


def _columnar_stages(
    pipeline: Any, batch_size: int, full: Callable[[], Iterable[Any]], files: list[str]
) -> tuple[dict, dict, dict, int, float | None]:
    """Roofline stages of a `tfinput.columnar_records.ColumnarSource`."""
    import tensorflow as tf

    from tfinput.columnar_records import storage_columns
    from tfinput.columnar_records.reader import assembler

    source = pipeline.source
    manifest = source.manifest()
    chunk = manifest.chunk_rows
    k = max(1, batch_size // chunk)
    opts = _single_core_options()
    assemble = assembler(
        storage_columns(pipeline.schema), manifest.columns, verify=False, uniform=False
    )

    def read() -> Iterable[Any]:
        ds = tf.data.TFRecordDataset(files, buffer_size=source.buffer_size)
        return ds.batch(k, drop_remainder=True).repeat().with_options(opts)

    def parse() -> Iterable[Any]:
        ds = tf.data.TFRecordDataset(files, buffer_size=source.buffer_size)
        return ds.batch(k, drop_remainder=True).map(assemble).repeat().with_options(opts)

    def chunk_rows(batch: Any) -> int:
        return int(batch.shape[0]) * chunk  # whole chunks (a partial last one counts full)

    entries = [e for _, _, e in source.resolve()]
    rows = sum(e.rows for e in entries)
    size = sum(e.bytes for e in entries)
    descriptions = {
        "read": f"TFRecordDataset over the files in order, batch({k} chunks of {chunk} rows)",
        "parse": "read + parse_example + decode_raw + ragged assembly (no verification, no "
        "tfinput transforms)",
        "full": "the tfinput pipeline: naive config, one private thread, autotune off",
    }
    return (
        {"read": read, "parse": parse, "full": full},
        descriptions,
        {"read": chunk_rows},
        len(files),
        size / rows if rows else None,
    )


def roofline(
    pipeline: Any,
    *,
    batch_size: int = 4096,
    windows: int = 3,
    window_batches: int = 10,
    warmup_batches: int = 2,
    cpu_count: int | None = None,
    clock: Clock = time.perf_counter,
    cpu_clock: Clock = process_cpu_seconds,
    rss: Callable[[], int] = current_rss_bytes,
    progress: Progress | None = None,
) -> Roofline:
    """Measure each stage alone on one core and derive the machine's upper bound.

    Stages, each measured with a private tf.data thread pool of one thread, intra-op
    parallelism 1 and no parallel calls (pyarrow single-threaded for Parquet):

    - ``read``: the bytes only (TFRecordDataset; or pyarrow record batches).
    - ``parse``: read + ``tf.io.parse_example`` without tfinput transforms (Parquet:
      read + conversion to numpy).
    - ``full``: the whole tfinput pipeline (read + parse + transforms).

    The model: every example costs ``c = cpu_seconds / examples`` of the full stage
    (measured with the process CPU clock, so the work of any helper thread counts and
    other processes' use of the CPU does not), wherever it is processed; ``cores``
    cores cannot exceed ``cores / c`` examples/s. One file is read by one thread at a
    time, so reading cannot exceed ``min(cores, files)`` x the read stage's rate. The
    bound is the smaller of the two. It is an upper
    bound, not a forecast: coordination between threads, the GIL (Parquet's reader
    runs Python), memory bandwidth and other processes keep real pipelines below it.

    Args:
      pipeline: A `tfinput.Pipeline` over TFRecord, Parquet or columnar files.
      batch_size: Batch size of every stage (use the configs' batch size).
      windows, window_batches, warmup_batches: As in `measure`, per stage.
      cpu_count: Cores to scale to (None: the process's affinity mask).
      clock, cpu_clock, rss: Injectable probes.
      progress: Called after each window.

    Returns:
      A `Roofline`.

    Raises:
      SourceError: the pipeline reads none of TFRecord, Parquet, columnar files.
    """
    cores = cpu_count or available_cpus()
    factories, descriptions, counters, files, per_example = _stage_factories(pipeline, batch_size)

    def runner(name: str) -> Callable[[], Window]:
        return lambda: run_window(
            factories[name],
            warmup_batches=warmup_batches,
            window_batches=window_batches,
            batch_size=None if name in counters else batch_size,
            count=counters.get(name),
            clock=clock,
            cpu_clock=cpu_clock,
            rss=rss,
        )

    measured = _interleave({n: runner(n) for n in factories}, windows, progress)
    stages = [Stage.from_windows(n, descriptions[n], ws) for n, ws in measured.items()]
    return roofline_from_stages(stages, cores=cores, files=files, bytes_per_example=per_example)


# ---------------------------------------------------------------------- measure
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

    method: dict[str, Any]
    machine: dict[str, Any]
    baseline: str | None
    results: tuple[ConfigStats, ...]
    roofline: Roofline | None = None

    @property
    def best(self) -> ConfigStats:
        """The config with the highest median examples/s."""
        return max(self.results, key=lambda r: r.median)

    def result(self, name: str) -> ConfigStats:
        for r in self.results:
            if r.name == name:
                return r
        raise ConfigError(
            f"benchmark: no config {name!r}; configs: {[r.name for r in self.results]}"
        )

    def to_dict(self) -> dict[str, Any]:
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
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    def with_roofline(self, rl: Roofline) -> BenchResult:
        """The same result with roofline fractions filled in."""
        results = tuple(
            dataclasses.replace(r, roofline_fraction=r.median / rl.bound if rl.bound else None)
            for r in self.results
        )
        return dataclasses.replace(self, results=results, roofline=rl)


def preset_configs(
    names: Sequence[str], *, cpu_count: int | None = None, **overrides: Any
) -> dict[str, PipelineConfig]:
    """``{name: PipelineConfig.preset(name)}`` for ``naive``, ``heuristic``, ``autotune``.

    Args:
      names: Preset names.
      cpu_count: Cores assumed by ``heuristic`` (None: the process's affinity mask).
      overrides: Knobs set on every preset (for example ``batch_size``).
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
    presets = ("naive", "heuristic", "autotune")
    out: dict[str, PipelineConfig] = {}
    for spec in specs:
        name, _, path = spec.partition("=") if "=" in spec else ("", "", spec)
        if path in presets and not name:
            over = {"batch_size": batch_size} if batch_size else {}
            config = preset_configs([path], cpu_count=cpu_count, **over)[path]
            name = path
        else:
            if not os.path.exists(path):
                raise ConfigError(
                    f"config {path!r} is neither a preset {list(presets)} nor an existing "
                    "config file"
                )
            config = PipelineConfig.from_json(path)
            if batch_size:
                config = config.replace(batch_size=batch_size)
            name = name or Path(path).stem
        if name in out:
            raise ConfigError(f"config name {name!r} given twice")
        out[name] = config
    return out


def measure(
    target: Any,
    configs: Mapping[str, PipelineConfig],
    *,
    step: Callable[[Any], Any] | None = None,
    windows: int = 5,
    window_batches: int = 20,
    warmup_batches: int = 8,
    baseline: str | None = None,
    clock: Clock = time.perf_counter,
    cpu_clock: Clock = process_cpu_seconds,
    rss: Callable[[], int] = current_rss_bytes,
    cpu_count: int | None = None,
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
      windows: Windows per config. More windows narrow the spread; five is the
        least that makes a median meaningful on a noisy machine.
      window_batches: Timed batches per window. Longer windows average out jitter
        but cost time; a window should last at least about a second.
      warmup_batches: Untimed batches at the start of each window (thread start,
        file opening, buffers filling). Keep it at least ``map_parallelism +
        prefetch``: batches made while the consumer waited for the first one sit in
        buffers, and timing them would flatter parallel configs.
      baseline: Config the ratios refer to (default: the first).
      clock, cpu_clock, rss: Injectable probes (tests pass fakes).
      cpu_count: CPUs, for utilisation and the record (None: affinity mask).
      progress: Called as ``progress(done, total, window)`` after each window.
      roofline_result: A `Roofline` to express each config as a fraction of.

    Returns:
      A `BenchResult`.

    Raises:
      ConfigError: no configs, bad counts, or an unknown baseline.
      DataError: the data hold fewer batches than a warm-up plus one.
    """
    if not configs:
        raise ConfigError("benchmark: no configs to measure")
    for name, value in (
        ("windows", windows),
        ("window_batches", window_batches),
        ("warmup_batches", warmup_batches),
    ):
        minimum = 0 if name == "warmup_batches" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"benchmark: {name} must be an int >= {minimum}, got {value!r}")
    baseline = baseline if baseline is not None else next(iter(configs))
    if baseline not in configs:
        raise ConfigError(f"benchmark: baseline {baseline!r} is not one of {list(configs)}")
    if step is None:
        from tfinput.steps import input_only

        step = input_only()
    cores = cpu_count or available_cpus()
    if hasattr(target, "build"):

        def factory(config: PipelineConfig) -> Iterable[Any]:
            return target.build(config).repeat()

    elif callable(target):
        factory = target
    else:
        raise ConfigError(
            f"benchmark: target must be a tfinput Pipeline or a callable config -> batches, "
            f"got {type(target).__name__}"
        )
    machine_info = machine(cpu_count=cores)

    per_config: dict[str, Any] = {}

    def runner(name: str, config: PipelineConfig) -> Callable[[], Window]:
        size = config.batch_size if config.drop_remainder else None
        prepare = getattr(step, "prepare", None)
        prepared = prepare(config) if callable(prepare) else step
        describe_prepared = getattr(prepared, "describe", None)
        if callable(describe_prepared):
            per_config[name] = describe_prepared()
        owner = getattr(prepared, "run_windows", None)
        if owner is not None:
            # The step drives the data itself (model.fit): one fresh source per window.
            def owned() -> Window:
                ws = owner(
                    factory(config),
                    batch_size=size,
                    warmup_batches=warmup_batches,
                    windows=1,
                    window_batches=window_batches,
                    clock=clock,
                    cpu_clock=cpu_clock,
                )
                return dataclasses.replace(ws[0], peak_rss_bytes=max(ws[0].peak_rss_bytes, rss()))

            return owned
        return lambda: run_window(
            lambda: factory(config),
            warmup_batches=warmup_batches,
            window_batches=window_batches,
            step=prepared,
            batch_size=size,
            clock=clock,
            cpu_clock=cpu_clock,
            rss=rss,
        )

    measured = _interleave({n: runner(n, c) for n, c in configs.items()}, windows, progress)
    stats = summarize(
        measured,
        configs=configs,
        baseline=baseline,
        cpu_count=cores,
        bound=roofline_result.bound if roofline_result else None,
    )
    describe = getattr(step, "describe", None)
    method = {
        "windows": windows,
        "window_batches": window_batches,
        "warmup_batches": warmup_batches,
        "order": "interleaved: one window per config per round, configs in the given order",
        "iterator": "fresh iterator per window (pipeline.build(config).repeat()); warm-up "
        "batches excluded",
        "examples_per_s": "median over windows; spread = min-max and CV over windows",
        "latency": "time between consecutive batches seen by the consumer, step included; "
        "all windows pooled",
        "cpu": "process user+system CPU seconds per wall second (time.process_time), median",
        "memory": "resident set size sampled after every batch (/proc/self/statm), max",
        "ratio": "median over rounds of (config / baseline) in the same round",
        "step": describe() if callable(describe) else {"name": str(step)},
        "step_per_config": per_config
        if any(d != per_config[next(iter(per_config))] for d in per_config.values())
        else None,
        "clock": getattr(clock, "__name__", str(clock)),
        "pipeline": _describe(target),
        "process_peak_rss_mb": round(peak_rss_bytes() / 2**20, 1),
    }
    return BenchResult(
        method=method,
        machine=machine_info,
        baseline=baseline,
        results=tuple(stats),
        roofline=roofline_result,
    )


def _describe(target: Any) -> dict[str, Any] | None:
    describe = getattr(target, "describe", None)
    if callable(describe):
        try:
            return describe()
        except Exception:  # a description must never fail a measurement
            return None
    return None
