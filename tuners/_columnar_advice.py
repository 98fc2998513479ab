"""Format advice: is parsing tf.Example the bound, and what columnar records would give.

For tf.Example TFRecord data whose parse stage bounds the pipeline (`parse_is_bound`, from
`tfinput.bench.roofline`), `format_advice` converts a sample to columnar records, measures
both side by side and gives the exact ``tfinput convert`` command. Re-exported by
`tuners._advice`. Nothing here needs Optuna.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfinput._src.measurement.target import MeasureOptions, Target
from tfinput._src.measurement.windows import WindowPlan
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError

if TYPE_CHECKING:
    from tfinput._src.measurement.compare import ConfigStats
    from tfinput._src.measurement.roofline import Roofline
    from tfinput.pipeline import Pipeline
    from tfinput.schema import Schema

#: The format advice's side-by-side windows: short, as it runs after the search.
ADVICE_PLAN = WindowPlan(warmup_batches=2, windows=3, window_batches=10)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FormatAdvice:
    """A tf.Example sample converted to columnar records and measured side by side.

    Attributes:
      parse_bound: Whether the parse stage was found to bound the pipeline.
      signal: How that was decided (the roofline's CPU cost per example of each stage).
      sample_files: The files converted.
      rows: Rows in the sample.
      tf_example_examples_per_s: Median input-only rate of the sample as tf.Example.
      columnar_examples_per_s: The same rows as columnar records.
      ratio, ratio_min, ratio_max: Columnar / tf.Example per interleaved round.
      command: The ``tfinput convert`` command for the whole data set.
      out_dir: Where that command writes.
      chunk_rows: Rows per columnar record (the batch size reads without per-row work
        when it is a multiple).
      seconds: Wall time of the conversion and of the measurement.
      method: How it was measured.
    """

    parse_bound: bool
    signal: Mapping[str, object]
    sample_files: tuple[str, ...]
    rows: int
    tf_example_examples_per_s: float
    columnar_examples_per_s: float
    ratio: float
    ratio_min: float
    ratio_max: float
    command: str
    out_dir: str
    chunk_rows: int
    seconds: Mapping[str, float]
    method: str

    def sentence(self) -> str:
        """The advice in one sentence."""
        noise = "" if self.ratio_min > 1.0 else " (within the noise: the spread includes 1)"
        return (
            f"parse is the bound: columnar records read {self.ratio:.2f}x{noise} as fast as "
            f"tf.Example on a {len(self.sample_files)}-file sample "
            f"({self.columnar_examples_per_s:,.0f} vs {self.tf_example_examples_per_s:,.0f} "
            f"examples/s input only, rounds {self.ratio_min:.2f}x-{self.ratio_max:.2f}x); "
            f"convert with: {self.command}"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "parse_bound": self.parse_bound,
            "signal": dict(self.signal),
            "sample_files": list(self.sample_files),
            "rows": self.rows,
            "tf_example_examples_per_s": round(self.tf_example_examples_per_s, 1),
            "columnar_examples_per_s": round(self.columnar_examples_per_s, 1),
            "ratio": round(self.ratio, 3),
            "ratio_min": round(self.ratio_min, 3),
            "ratio_max": round(self.ratio_max, 3),
            "command": self.command,
            "out_dir": self.out_dir,
            "chunk_rows": self.chunk_rows,
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "method": self.method,
        }


def parse_is_bound(
    pipeline: Pipeline,
    *,
    batch_size: int,
    cpu_count: int | None = None,
    roofline_result: Roofline | None = None,
) -> tuple[bool, dict[str, object]]:
    """Whether parsing bounds a tf.Example pipeline, from `tfinput.bench.roofline`.

    The signal: the roofline's stages measured alone on one core (two windows of a few
    batches each: a couple of seconds) give the CPU cost per example of reading,
    parsing (``tf.io.parse_example``) and tfinput's transforms. Parse is the bound
    when the pipeline is CPU-bound (not read-bound) and parsing is the largest of the
    three costs: then no tf.data knob removes it, and only a cheaper format does.

    Args:
      roofline_result: A `tfinput.bench.Roofline` already measured (`quick_roofline`);
        None measures one.

    Returns:
      ``(parse_bound, signal)`` with the costs in microseconds per example.
    """
    rl = roofline_result or quick_roofline(pipeline, batch_size=batch_size, cpu_count=cpu_count)
    cost = rl.cost_us()
    bound = rl.limited_by == "cpu" and cost["parse"] >= max(cost["read"], cost["transform"])
    signal = {
        "source": "tfinput.bench.roofline: stages alone on one core, CPU cost per example",
        "cost_us_per_example": {k: round(v, 3) for k, v in cost.items()},
        "limited_by": rl.limited_by,
        "bound_examples_per_s": round(rl.bound, 1),
    }
    return bound, signal


def quick_roofline(
    pipeline: Pipeline,
    *,
    batch_size: int,
    cpu_count: int | None = None,
    configs: Mapping[str, PipelineConfig] | None = None,
) -> Roofline:
    """The tuner's `tfinput.bench.roofline`: two windows of four batches per stage (a
    couple of seconds), with the serial stage of ``configs`` (default: autotune's)."""
    from tfinput._src.measurement.roofline import roofline

    return roofline(
        pipeline,
        batch_size=batch_size,
        configs=configs,
        measurement=MeasureOptions(
            windows=2, window_batches=4, warmup_batches=1, cpu_count=cpu_count
        ),
    )


def _chunk_rows(batch_size: int) -> int:
    """Rows per columnar record: a divisor of the batch size (whole chunks per batch,
    no per-row work) of at most 1024, or 1024 when the batch size has none >= 64."""
    chunk = math.gcd(batch_size, 1024)
    return chunk if chunk >= 64 else 1024


def _out_dir(files: Sequence[str], paths: Sequence[str]) -> str:
    if len(paths) == 1 and os.path.isdir(paths[0]):
        return os.path.normpath(paths[0]) + "-columnar"
    return os.path.join(os.path.dirname(os.path.abspath(files[0])) + "-columnar")


def format_advice(
    pipeline: Pipeline,
    config: PipelineConfig,
    *,
    schema_path: str | None = None,
    out_dir: str | None = None,
    sample_files: int = 2,
    require_parse_bound: bool = True,
    measurement: MeasureOptions | None = None,
    roofline_result: Roofline | None = None,
) -> FormatAdvice | None:
    """Convert a sample of tf.Example files to columnar records and measure both:
    a short roofline (`parse_is_bound`), at most ``sample_files`` files converted in a
    temporary directory, then interleaved input-only windows of each with ``config``.

    Args:
      pipeline: A `tfinput.Pipeline` over TFRecord files of tf.Example.
      config: The config both are measured with (the tuner's winner).
      schema_path: The schema file the command names (None: ``SCHEMA.json``).
      out_dir: Where the command writes (default: ``<data directory>-columnar``).
      sample_files: Files converted (1 or 2 keep it short).
      require_parse_bound: Return None unless parse is the bound.
      measurement: `tfinput.bench.MeasureOptions`: the windows (`ADVICE_PLAN`),
        the roofline's cores, the clocks.
      roofline_result: The roofline `parse_is_bound` reads (None: measured here).

    Returns:
      A `FormatAdvice`; None for other data, or if parse is not the bound (and required).

    Raises:
      ConfigError: ``sample_files`` < 1.
    """
    return advice_for(
        Target.of(pipeline, what="format advice"),
        config,
        schema_path=schema_path,
        out_dir=out_dir,
        sample_files=sample_files,
        require_parse_bound=require_parse_bound,
        measurement=measurement,
        roofline_result=roofline_result,
    )


def advice_for(
    target: Target,
    config: PipelineConfig,
    *,
    schema_path: str | None = None,
    out_dir: str | None = None,
    sample_files: int = 2,
    require_parse_bound: bool = True,
    measurement: MeasureOptions | None = None,
    roofline_result: Roofline | None = None,
) -> FormatAdvice | None:
    """`format_advice` of a `Target` its entry settled (the tuner's format advice)."""
    if sample_files < 1:
        raise ConfigError(f"format advice: sample_files must be >= 1, got {sample_files}")
    options = measurement or MeasureOptions()
    plan, cpu_count = options.plan(ADVICE_PLAN, what="format advice"), options.cpu_count
    source, pipeline = target.source, target.pipeline
    if source is None or source.kind != "tfrecord":
        return None
    t0 = time.perf_counter()
    parse_bound, signal = parse_is_bound(
        pipeline, batch_size=config.batch_size, cpu_count=cpu_count, roofline_result=roofline_result
    )
    if require_parse_bound and not parse_bound:
        return None
    files = source.files()[:sample_files]
    chunk = _chunk_rows(config.batch_size)
    t1 = time.perf_counter()
    rows, stats, t2 = _convert_and_measure(
        pipeline,
        files,
        chunk,
        config,
        plan,
        clock=options.clock or time.perf_counter,
        cpu_clock=options.cpu_clock,
        cpu_count=cpu_count,
    )
    seconds = {"roofline": t1 - t0, "convert": t2 - t1, "measure": time.perf_counter() - t2}
    out = out_dir or _out_dir(files, list(source.paths))
    return FormatAdvice(
        parse_bound=parse_bound,
        signal=signal,
        sample_files=tuple(files),
        rows=rows,
        command=_convert_command(
            list(source.paths),
            schema=pipeline.schema,
            schema_path=schema_path,
            chunk_rows=chunk,
            out=out,
        ),
        out_dir=out,
        chunk_rows=chunk,
        seconds=seconds,
        **_measured_fields(stats, plan, files=len(files)),
    )


def _measured_fields(stats: Mapping[str, ConfigStats], plan: WindowPlan, *, files: int) -> dict:
    """The `FormatAdvice` fields of the side-by-side measurement: rates, ratio, method."""
    c = stats["columnar"]
    return {
        "tf_example_examples_per_s": stats["tf.Example"].median,
        "columnar_examples_per_s": c.median,
        "ratio": c.ratio or 0.0,
        "ratio_min": c.ratio_min or 0.0,
        "ratio_max": c.ratio_max or 0.0,
        "method": f"{files} file(s) converted to columnar in a temporary directory; both "
        f"measured input only with the winner config, interleaved, {plan.windows} windows "
        f"of {plan.window_batches} batches after {plan.warmup_batches} warm-up batches, "
        "fresh iterator per window; ratio = median of per-round ratios",
    }


def _convert_and_measure(
    pipeline: Pipeline,
    files: Sequence[str],
    chunk_rows: int,
    config: PipelineConfig,
    plan: WindowPlan,
    *,
    clock: Callable[[], float],
    cpu_count: int | None,
    cpu_clock: Callable[[], float] | None,
) -> tuple[int, dict[str, object], float]:
    """Convert ``files`` to columnar records in a temporary directory and measure both
    side by side: ``(rows converted, {name: ConfigStats}, when the conversion ended)``."""
    from tfinput._src.measurement.compare import summarize
    from tfinput._src.measurement.probes import process_cpu_seconds

    with tempfile.TemporaryDirectory(prefix="tfinput-format-advice-") as tmp:
        sample = os.path.join(tmp, "columnar")
        rows = _convert_sample(pipeline, files, sample, chunk_rows)
        converted = time.perf_counter()
        measured = _measure_side_by_side(
            _sample_pipelines(pipeline, files, sample),
            config,
            plan,
            clock=clock,
            cpu_clock=cpu_clock or process_cpu_seconds,
        )
    stats = summarize(measured, baseline="tf.Example", cpu_count=cpu_count or 1)
    return rows, {s.name: s for s in stats}, converted


def _convert_sample(pipeline: Pipeline, files: Sequence[str], out: str, chunk_rows: int) -> int:
    """Convert tf.Example ``files`` to columnar records in ``out``; returns the rows."""
    from tfinput.convert import convert

    converted = convert(
        files,
        out,
        to="columnar",
        schema=pipeline.schema,
        input_format="tfrecord",
        chunk_rows=chunk_rows,
    )
    return converted.rows


def _sample_pipelines(
    pipeline: Pipeline, files: Sequence[str], columnar_dir: str
) -> dict[str, object]:
    """``pipeline`` over the tf.Example sample ``files`` and over their columnar copy."""
    from tfinput.pipeline import columnar

    source = pipeline.source
    example = dataclasses.replace(pipeline, source=dataclasses.replace(source, paths=tuple(files)))
    col = dataclasses.replace(pipeline, source=columnar(columnar_dir, pipeline.schema).source)
    return {"tf.Example": example, "columnar": col}


def _measure_side_by_side(
    pipelines: Mapping[str, object],
    config: PipelineConfig,
    plan: WindowPlan,
    *,
    clock: Callable[[], float],
    cpu_clock: Callable[[], float],
) -> dict[str, list[Any]]:
    """Input-only windows of each pipeline built with ``config``, interleaved round by
    round, a fresh iterator per window: ``{name: [tfinput._src.measurement.windows.Window, ...]}``."""
    from tfinput._src.measurement.windows import run_window

    size = config.batch_size if config.drop_remainder else None
    measured: dict[str, list[Any]] = {n: [] for n in pipelines}
    for r in range(plan.windows):
        for name, p in pipelines.items():
            w = run_window(
                lambda p=p: p.build(config).repeat(),
                warmup_batches=plan.warmup_batches,
                window_batches=plan.window_batches,
                batch_size=size,
                clock=clock,
                cpu_clock=cpu_clock,
                window_seconds=plan.window_seconds,
            )
            measured[name].append(dataclasses.replace(w, name=name, round=r))
    return measured


def _convert_command(
    paths: Sequence[str], *, schema: Schema, schema_path: str | None, chunk_rows: int, out: str
) -> str:
    """The ``tfinput convert`` command that converts the whole data set: its directory
    when the files are all of a local directory's data files (without ``--schema`` when
    the directory's ``schema.json`` is this schema, which ``convert`` then reads)."""
    from tfinput.pipeline import data_files

    inputs = [os.fspath(p) for p in paths]
    folder = None
    if len(inputs) == 1 and os.path.isdir(inputs[0]):  # the source was given a directory
        folder = inputs[0]
    elif inputs and "://" not in inputs[0]:
        parent = os.path.dirname(inputs[0])
        if parent and os.path.isdir(parent) and sorted(inputs) == data_files(parent):
            folder, inputs = parent, [parent]
    schema_args = ["--schema", schema_path or "SCHEMA.json"]
    beside = os.path.join(folder, "schema.json") if folder else None
    if beside and schema_path is None and os.path.isfile(beside):
        from tfinput.schema import Schema

        if Schema.from_json(beside) == schema:
            schema_args = []
    return shlex.join(
        [
            "tfinput",
            "convert",
            *inputs,
            "--input-format",
            "tfrecord",
            *schema_args,
            "--to",
            "columnar",
            "--chunk-rows",
            str(chunk_rows),
            "--out",
            out,
        ]
    )
