"""The roofline: the machine's estimated upper bound for one pipeline.

`roofline` measures each stage alone on one core and derives the bound with
`roofline_from_stages`; see `roofline`'s docstring and ``docs/bench.md``. The
``read`` and ``parse`` stages are the source's own (`tfinput._src.core.sources.Source.roofline_stages`);
``full`` is the whole pipeline (`pipeline_stages`). The serial stage, the consumer side
of each config's plan (`tfinput.Pipeline.serial_probe`), gives each config its own
prediction (`Roofline.predict`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tfinput._src.core.config import PipelineConfig
from tfinput._src.core.errors import ConfigError, SourceError
from tfinput._src.measurement.probes import available_cpus, current_rss_bytes, process_cpu_seconds
from tfinput._src.measurement.target import MeasureOptions
from tfinput._src.measurement.windows import ROOFLINE_PLAN, Progress, Window, interleave, run_window

if TYPE_CHECKING:
    from tfinput._src.core.pipeline import Pipeline
    from tfinput._src.core.sources.protocol import ReadStages

#: What the ``full`` stage runs, whatever the source.
FULL_DESCRIPTION = (
    "the tfinput pipeline: naive config with the default read_batch, one private thread, "
    "autotune off"
)


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

    def to_dict(self) -> dict[str, object]:
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
class SerialStage:
    """The consumer side of one config's plan, timed with every thread the config
    allows (`tfinput.Pipeline.serial_probe`: the config's interleave, shuffle and batch
    over records held in memory, no parsing). One thread takes every element that
    crosses it, so however many cores parse, the pipeline cannot exceed its rate.

    Attributes:
      config: The config's name.
      elements_per_batch: Elements crossing the consumer side per batch (records, or
        mini-batches with ``read_batch``).
      batch_size: Examples per batch.
      examples_per_s: Median wall rate: the serial bound.
      examples_per_cpu_s: Median examples per CPU-second of the process (every thread the
        probe kept busy: the consumer and the interleave's branches).
      windows: Its windows.
    """

    config: str
    elements_per_batch: float
    batch_size: int
    examples_per_s: float
    examples_per_cpu_s: float
    windows: tuple[Window, ...] = ()

    @property
    def us_per_element(self) -> float:
        """Wall time per element crossing the consumer side, microseconds."""
        elements_per_s = self.examples_per_s * self.elements_per_batch / self.batch_size
        return 1e6 / elements_per_s if elements_per_s > 0 else float("inf")

    @property
    def cpu_us_per_example(self) -> float:
        """CPU cost per example of the serial stage, microseconds."""
        rate = self.examples_per_cpu_s
        return 1e6 / rate if rate > 0 else float("inf")

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (the ``roofline.serial`` entries of ``tfinput.bench/1``)."""
        return {
            "config": self.config,
            "elements_per_batch": round(self.elements_per_batch, 2),
            "batch_size": self.batch_size,
            "us_per_element": round(self.us_per_element, 3),
            "examples_per_s": round(self.examples_per_s, 1),
            "cpu_us_per_example": round(self.cpu_us_per_example, 3),
            "windows": [w.to_dict() for w in self.windows],
        }


def serial_advice(stage: SerialStage) -> str:
    """What to change when a config's serial stage bounds it, in words that name the
    stage ("one thread handles every record: ...")."""
    rate = f"{stage.examples_per_s:,.0f}"
    if stage.elements_per_batch >= stage.batch_size:
        return (
            f"one thread handles every record of {stage.config}: {stage.us_per_element:.2f} "
            f"us each caps it at {rate} examples/s whatever the cores; batch records inside "
            "the file branches (read_batch=64, the default; the tuner searches it)"
        )
    return (
        f"one thread handles every mini-batch of {stage.config} ({stage.elements_per_batch:,.0f} "
        f"per batch, {stage.us_per_element:.2f} us each: {rate} examples/s whatever the "
        "cores); a larger read_batch hands over fewer, larger elements"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prediction:
    """What one config can reach on this machine (`Roofline.predict`).

    Attributes:
      config: The config's name.
      bound: The prediction, examples/s: ``min(read, 1 / (1 / parallel + 1 / serial))``
        (the roofline's ``bound`` without a serial stage).
      limited_by: ``read`` when reading bounds it; else ``serial`` when the serial
        stage takes more of each example's time than the parallel stages, or ``cpu``.
      parallel: The parallel stages over the cores: the roofline's ``cpu_bound``.
      read: The roofline's read bound.
      serial: The serial stage's rate (None: no serial stage, its elements are batches).
    """

    config: str
    bound: float
    limited_by: str
    parallel: float
    read: float
    serial: float | None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (the ``roofline.predictions`` entries of ``tfinput.bench/1``)."""
        return {
            "config": self.config,
            "bound_examples_per_s": round(self.bound, 1),
            "limited_by": self.limited_by,
            "parallel_examples_per_s": round(self.parallel, 1),
            "read_examples_per_s": round(self.read, 1),
            "serial_examples_per_s": None if self.serial is None else round(self.serial, 1),
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
      bound: ``min(cpu_bound, read_bound)``, examples/s: the parallel stages' bound,
        whatever the config (`predict` adds a config's serial stage).
      limited_by: ``cpu`` or ``read``.
      serial: The serial stage of each config probed (see `SerialStage`); empty for
        sources whose elements are batches.
    """

    stages: tuple[Stage, ...]
    cores: int
    files: int
    bytes_per_example: float | None
    cpu_bound: float
    read_bound: float
    bound: float
    limited_by: str
    serial: tuple[SerialStage, ...] = ()

    def stage(self, name: str) -> Stage:
        """The stage called ``name``."""
        return next(s for s in self.stages if s.name == name)

    def predict(self, config: str) -> Prediction:
        """What config ``config`` can reach: each example takes its share of the
        parallel stages' work over the cores (``1 / cpu_bound``) plus its time on the
        consumer thread, which hands over every element crossing the consumer side (the
        serial stage), so ``min(read_bound, 1 / (1 / cpu_bound + 1 / serial rate))``.
        The sum, not the larger of the two: the serial stage's time is not hidden
        behind the parallel work (``benchmarks/serial_stage.py`` compares the models). A
        config without a serial stage (not probed, or a source whose elements are
        batches) gets the parallel bound, ``bound``."""
        serial = next((s for s in self.serial if s.config == config), None)
        if serial is None or serial.examples_per_s <= 0:
            return Prediction(
                config=config,
                bound=self.bound,
                limited_by=self.limited_by,
                parallel=self.cpu_bound,
                read=self.read_bound,
                serial=None,
            )
        combined = 1.0 / (1.0 / self.cpu_bound + 1.0 / serial.examples_per_s)
        limited_by = "serial" if serial.examples_per_s < self.cpu_bound else "cpu"
        if self.read_bound < combined:
            combined, limited_by = self.read_bound, "read"
        return Prediction(
            config=config,
            bound=combined,
            limited_by=limited_by,
            parallel=self.cpu_bound,
            read=self.read_bound,
            serial=serial.examples_per_s,
        )

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

    def to_dict(self) -> dict[str, object]:
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
            "serial": [s.to_dict() for s in self.serial],
            "predictions": [self.predict(s.config).to_dict() for s in self.serial],
        }


def roofline_from_stages(
    stages: Sequence[Stage],
    *,
    cores: int,
    files: int,
    bytes_per_example: float | None = None,
    serial: Sequence[SerialStage] = (),
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
        serial=tuple(serial),
    )


def roofline(
    pipeline: Pipeline,
    *,
    batch_size: int = 4096,
    configs: Mapping[str, PipelineConfig] | None = None,
    measurement: MeasureOptions | None = None,
    progress: Progress | None = None,
) -> Roofline:
    """Measure each stage alone on one core and derive the machine's upper bound.

    Stages, each measured with a private tf.data thread pool of one thread, intra-op
    parallelism 1 and no parallel calls (pyarrow single-threaded for Parquet):

    - ``read``: the bytes only (TFRecordDataset; or pyarrow record batches).
    - ``parse``: read + ``tf.io.parse_example`` without tfinput transforms (Parquet:
      read + conversion to numpy).
    - ``full``: the whole tfinput pipeline (read + parse + transforms), TFRecord records
      in mini-batches of the default ``read_batch``.

    The bound (an upper bound, not a forecast: coordination, the GIL and memory
    bandwidth keep real pipelines below it) is the smaller of ``cores / c``, where
    ``c`` is the full stage's process CPU seconds per example, and ``min(cores, files)``
    x the read stage's rate (one thread reads a file at a time). For each config
    (TFRecord sources), the serial stage, the elements the consumer thread hands over
    (`tfinput.Pipeline.serial_probe`), is timed alone; `Roofline.predict` combines it
    with that bound (docs/bench.md).

    Args:
      pipeline: A `tfinput.Pipeline` over TFRecord, Parquet or columnar files.
      batch_size: Batch size of every stage (use the configs' batch size).
      configs: ``{name: config}`` whose serial stage to probe (default: ``autotune``,
        `PipelineConfig.autotune` at ``batch_size``); their batch size is used.
      measurement: `tfinput.bench.MeasureOptions`: the window counts per stage
        (default `ROOFLINE_PLAN`), the cores to scale to (None: the affinity mask)
        and the probes.
      progress: Called after each window.

    Returns:
      A `Roofline`.

    Raises:
      SourceError: the pipeline reads none of TFRecord, Parquet, columnar files.
    """
    options = measurement or MeasureOptions()
    plan = options.plan(ROOFLINE_PLAN, what="roofline")
    cores = options.cpu_count or available_cpus()
    stages = pipeline_stages(pipeline, batch_size)
    if configs is None:
        configs = {"autotune": PipelineConfig.autotune(batch_size=batch_size)}
    probes = _serial_probes(pipeline, configs)
    window = functools.partial(
        run_window,
        warmup_batches=plan.warmup_batches,
        window_batches=plan.window_batches,
        window_seconds=plan.window_seconds,
        clock=options.clock or time.perf_counter,
        cpu_clock=options.cpu_clock or process_cpu_seconds,
        rss=options.rss or current_rss_bytes,
    )
    runners = _stage_runners(window, stages, probes, batch_size)
    measured = interleave(runners, plan.windows, progress)
    serial = [
        _serial_stage(n, probes[n][0][1], probes[n][1], measured[_SERIAL + n]) for n in probes
    ]
    return roofline_from_stages(
        [Stage.from_windows(n, stages.descriptions[n], measured[n]) for n in stages.factories],
        cores=cores,
        files=stages.files,
        bytes_per_example=stages.bytes_per_example,
        serial=serial,
    )


def _serial_probes(
    pipeline: Pipeline, configs: Mapping[str, PipelineConfig]
) -> dict[str, tuple[tuple[Any, Any], int]]:
    """``{config name: (Pipeline.serial_probe, batch size)}`` for the configs whose
    source has a serial stage (records crossing the consumer thread)."""
    probes = {}
    for name, config in configs.items():
        probe = pipeline.serial_probe(config)
        if probe is not None:
            probes[name] = (probe, config.batch_size)
    return probes


def _stage_runners(
    window: Callable[..., Window],
    stages: ReadStages,
    probes: Mapping[str, tuple[tuple[Any, Any], int]],
    batch_size: int,
) -> dict[str, Callable[[], Window]]:
    """``() -> Window`` of each stage alone and of each config's serial probe."""

    def stage(name: str) -> Callable[[], Window]:
        return lambda: window(
            stages.factories[name],
            batch_size=None if name in stages.counters else batch_size,
            count=stages.counters.get(name),
        )

    def serial(name: str) -> Callable[[], Window]:
        (dataset, _), size = probes[name]
        return lambda: window(lambda: dataset, batch_size=size)

    runners = {n: stage(n) for n in stages.factories}
    runners.update({_SERIAL + n: serial(n) for n in probes})
    return runners


#: Window names of the serial probes (``serial <config>``).
_SERIAL = "serial "


def _serial_stage(
    config: str, elements: float, batch_size: int, windows: Sequence[Window]
) -> SerialStage:
    stage = Stage.from_windows(_SERIAL + config, "", windows)
    return SerialStage(
        config=config,
        elements_per_batch=elements,
        batch_size=batch_size,
        examples_per_s=stage.examples_per_s,
        examples_per_cpu_s=stage.examples_per_cpu_s,
        windows=tuple(windows),
    )


def pipeline_stages(pipeline: Pipeline, batch_size: int) -> ReadStages:
    """The stages `roofline` measures: the source's ``read`` and ``parse``
    (`tfinput._src.core.sources.RooflineStages.roofline_stages`), then ``full``, the whole pipeline with
    the naive config on one private thread, autotune off, records in mini-batches of
    the default ``read_batch`` (TFRecord: the per-record hand-over is the serial stage's).

    Raises:
      SourceError: the source has no roofline stages (a wrapped dataset).
    """
    from tfinput._src.core.sources.protocol import RooflineStages, single_core_options

    source = pipeline.source
    if not isinstance(source, RooflineStages):
        raise SourceError(
            f"roofline: supported for tfrecord, parquet and columnar sources, not {source.kind!r}"
        )
    files = source.files()
    # Records in mini-batches (TFRecord): what a record costs the consumer side is the
    # serial stage's, measured per config; ``full`` is the work that runs in parallel.
    single = PipelineConfig.naive(
        batch_size=batch_size,
        private_threadpool_size=1,
        max_intra_op_parallelism=1,
        read_batch=PipelineConfig().read_batch,
    )

    def full() -> Iterable[object]:
        return pipeline.build(single).repeat().with_options(single_core_options())

    own = source.roofline_stages(files, pipeline.schema, batch_size)
    return dataclasses.replace(
        own,
        factories={**own.factories, "full": full},
        descriptions={**own.descriptions, "full": FULL_DESCRIPTION},
    )
