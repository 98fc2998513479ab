"""The roofline: the machine's estimated upper bound for one pipeline.

`roofline` measures each stage alone on one core and derives the bound with
`roofline_from_stages`; see `roofline`'s docstring and ``docs/bench.md``. The
``read`` and ``parse`` stages are the source's own (`tfinput.sources.Source.roofline_stages`);
``full`` is the whole pipeline (`pipeline_stages`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tfinput.bench.probes import available_cpus, current_rss_bytes, process_cpu_seconds
from tfinput.bench.stats import interleave
from tfinput.bench.windows import ROOFLINE_PLAN, Clock, Progress, Window, run_window
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError

if TYPE_CHECKING:
    from tfinput.sources import ReadStages

__all__ = [
    "FULL_DESCRIPTION",
    "Roofline",
    "Stage",
    "pipeline_stages",
    "roofline",
    "roofline_from_stages",
]

#: What the ``full`` stage runs, whatever the source.
FULL_DESCRIPTION = "the tfinput pipeline: naive config, one private thread, autotune off"


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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``roofline.stages`` entries of ``tfinput.bench/1``)."""
        return {
            "name": self.name,
            "description": self.description,
            "examples_per_s": round(self.examples_per_s, 1),
            "examples_per_cpu_s": round(self.examples_per_cpu_s, 1),
            "us_per_example": round(self.us_per_example, 3),
            "cores_busy": round(self.cores_busy, 3),
            "windows": [w.to_dict() for w in self.windows],
        }


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
        """The stage called ``name``."""
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
        """JSON-ready dict (the ``roofline`` entry of the ``tfinput.bench/1`` format)."""
        return {
            "cores": self.cores,
            "files": self.files,
            "bytes_per_example": (
                None if self.bytes_per_example is None else round(self.bytes_per_example, 1)
            ),
            "stages": [s.to_dict() for s in self.stages],
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
    with per-CPU-second rates.

    Raises:
      ConfigError: a stage of ``read``, ``parse``, ``full`` is missing.
    """
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


def roofline(
    pipeline: Any,
    *,
    batch_size: int = 4096,
    windows: int = ROOFLINE_PLAN.windows,
    window_batches: int = ROOFLINE_PLAN.window_batches,
    warmup_batches: int = ROOFLINE_PLAN.warmup_batches,
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
      windows, window_batches, warmup_batches: As in `measure`, per stage (defaults:
        `ROOFLINE_PLAN`).
      cpu_count: Cores to scale to (None: the process's affinity mask).
      clock, cpu_clock, rss: Injectable probes.
      progress: Called after each window.

    Returns:
      A `Roofline`.

    Raises:
      SourceError: the pipeline reads none of TFRecord, Parquet, columnar files.
    """
    cores = cpu_count or available_cpus()
    stages = pipeline_stages(pipeline, batch_size)

    def runner(name: str) -> Callable[[], Window]:
        return lambda: run_window(
            stages.factories[name],
            warmup_batches=warmup_batches,
            window_batches=window_batches,
            batch_size=None if name in stages.counters else batch_size,
            count=stages.counters.get(name),
            clock=clock,
            cpu_clock=cpu_clock,
            rss=rss,
        )

    measured = interleave({n: runner(n) for n in stages.factories}, windows, progress)
    return roofline_from_stages(
        [Stage.from_windows(n, stages.descriptions[n], ws) for n, ws in measured.items()],
        cores=cores,
        files=stages.files,
        bytes_per_example=stages.bytes_per_example,
    )


def pipeline_stages(pipeline: Any, batch_size: int) -> ReadStages:
    """The stages `roofline` measures: the source's ``read`` and ``parse``
    (`tfinput.sources.Source.roofline_stages`), then ``full``, the whole pipeline with
    the naive config on one private thread, autotune off.

    Raises:
      SourceError: the source has no roofline stages (a wrapped dataset).
    """
    from tfinput.sources.skeleton import single_core_options

    source = pipeline.source
    files = source.files()
    single = PipelineConfig.naive(
        batch_size=batch_size, private_threadpool_size=1, max_intra_op_parallelism=1
    )

    def full() -> Iterable[Any]:
        return pipeline.build(single).repeat().with_options(single_core_options())

    own = source.roofline_stages(files, pipeline.schema, batch_size)
    return dataclasses.replace(
        own,
        factories={**own.factories, "full": full},
        descriptions={**own.descriptions, "full": FULL_DESCRIPTION},
    )
