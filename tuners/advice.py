"""What the tuner says besides the best config: verdicts, the gain by knob, format advice.

- **Verdicts.** Does the winner beat autotune beyond the noise (`beats_autotune`: every
  round of the interleaved confirmation faster, the paired ratios' whole spread above
  1; otherwise "keep autotune")? Is the step input-bound at all (`input_verdict`: the
  share of the step's time spent waiting for input; under `INPUT_BOUND_THRESHOLD`
  "input is not your bottleneck")? When the step owns the loop (``model.fit``) the wait
  cannot be seen, so it is derived from the step's own bound (`step_bound`: the step
  fed one cached batch over and over): ``1 - fed / bound``.
- **Gain by knob** (`knob_breakdown`): the winner measured against itself with each
  group of knobs that differs from autotune reverted (leave-one-out), interleaved.
- **Format advice** (`format_advice`): for tf.Example TFRecord data whose parse stage
  bounds the pipeline, a sample converted to columnar records and measured side by side,
  with the exact ``tfinput convert`` command.

Nothing here needs Optuna.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import shlex
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from tfinput.bench import ConfigStats

__all__ = [
    "INPUT_BOUND_THRESHOLD",
    "KEEP_AUTOTUNE",
    "NOT_INPUT_BOUND",
    "KNOB_GROUPS",
    "FormatAdvice",
    "KnobContribution",
    "beats_autotune",
    "input_verdict",
    "step_bound",
    "differing_groups",
    "knob_breakdown",
    "parse_is_bound",
    "format_advice",
]

#: Below this share of the step's time spent waiting for input, tuning the input
#: cannot speed training up noticeably.
INPUT_BOUND_THRESHOLD = 0.03
NOT_INPUT_BOUND = "input is not your bottleneck: tuning it will not speed up training"
KEEP_AUTOTUNE = "keep autotune"

#: Knob groups of the gain breakdown (at most six measurements): the tf.data threading
#: knobs act together, so they are reverted together.
KNOB_GROUPS: dict[str, tuple[str, ...]] = {
    "tf.data threading": (
        "interleave_cycle_length",
        "interleave_block_length",
        "interleave_parallelism",
        "map_parallelism",
        "private_threadpool_size",
        "max_intra_op_parallelism",
        "deterministic",
    ),
    "buffering": ("prefetch", "cache"),
    "batch_size": ("batch_size",),
    "layout": ("layout",),
    "steps_per_execution": ("steps_per_execution",),
    "device_prefetch": ("device_prefetch",),
}


# ------------------------------------------------------------------ verdicts
def beats_autotune(confirmed: Sequence[ConfigStats]) -> tuple[bool | None, str]:
    """Whether the confirmed winner beats autotune beyond the noise.

    Args:
      confirmed: The confirmation's `tfinput.bench.ConfigStats`, best first, with
        ratios to ``autotune`` per round.

    Returns:
      ``(verdict, sentence)``: True only when the winner is not autotune and its
      per-round ratios to autotune are all above 1 (the paired spread excludes 1);
      False otherwise, with "keep autotune"; None when nothing was confirmed.
    """
    if not confirmed:
        return None, "not confirmed against autotune: no verdict"
    best = confirmed[0]
    if best.name == "autotune" or best.ratio is None:
        return False, f"{KEEP_AUTOTUNE}: no config beat it in the confirmation"
    low, high = best.ratio_min, best.ratio_max
    spread = f"{best.ratio:.2f}x autotune, rounds {low:.2f}x-{high:.2f}x"
    if low is not None and low > 1.0:
        return True, f"{best.name} beats autotune beyond the noise ({spread})"
    return False, (
        f"{KEEP_AUTOTUNE}: {best.name}'s gain is within the noise ({spread}; the spread includes 1)"
    )


def input_verdict(wait: float | None, *, input_only: bool = False) -> tuple[bool | None, str]:
    """Whether the step is input-bound, from the share of its time spent waiting.

    Args:
      wait: Share of the step's time spent waiting for the next batch.
      input_only: No training step was measured (``input_only``): the wait says
        nothing about training.

    Returns:
      ``(input_bound, sentence)``; ``input_bound`` is None when it is unknown.
    """
    if input_only:
        return None, (
            "measured input only (no training step): whether input bounds training is "
            "unknown; tune against your training step to find out"
        )
    if wait is None:
        return None, "the input wait could not be measured"
    if wait < INPUT_BOUND_THRESHOLD:
        return False, f"{NOT_INPUT_BOUND} (the step waited for input {wait:.1%} of the time)"
    return True, (
        f"the step waits for input {wait:.0%} of the time: the input pipeline bounds training"
    )


def cached_source(pipeline: Any) -> Callable[[PipelineConfig], Iterable[Any]]:
    """``config -> one batch repeated``: the step fed without any input cost."""

    def source(config: PipelineConfig) -> Iterable[Any]:
        if hasattr(pipeline, "build"):
            return pipeline.build(config).take(1).cache().repeat()
        batch = next(iter(pipeline(config)))
        return itertools.repeat(batch)

    return source


def step_bound(
    pipeline: Any,
    config: PipelineConfig,
    step: Any,
    *,
    windows: int = 3,
    window_batches: int = 20,
    warmup_batches: int = 5,
    cpu_count: int | None = None,
    clock: Callable[[], float] | None = None,
    cpu_clock: Callable[[], float] | None = None,
) -> float:
    """Examples/s of ``step`` fed one cached batch over and over (no input cost): the
    most the step can take, measured with `tfinput.bench.measure` (which lets a step
    that owns the loop, ``model.fit``, drive the data)."""
    from tfinput import bench

    clocks: dict[str, Any] = {}
    if clock is not None:
        clocks["clock"] = clock
    if cpu_clock is not None:
        clocks["cpu_clock"] = cpu_clock
    result = bench.measure(
        cached_source(pipeline),
        {"step bound": config},
        step=step,
        windows=windows,
        window_batches=window_batches,
        warmup_batches=warmup_batches,
        cpu_count=cpu_count,
        **clocks,
    )
    return result.results[0].median


# ------------------------------------------------------------- gain by knob
def _norm(knob: str, value: Any, pipeline: Any) -> Any:
    from tuners.space import _EQUIVALENT, encode

    if knob == "layout" and value is None:
        return getattr(pipeline, "layout", "per_feature")
    return _EQUIVALENT.get((knob, encode(value)), value)


def differing_groups(
    winner: PipelineConfig, autotune: PipelineConfig, *, pipeline: Any = None
) -> dict[str, dict[str, tuple[Any, Any]]]:
    """``{group: {knob: (winner value, autotune value)}}`` for the `KNOB_GROUPS` in which
    the two configs build different pipelines."""
    out: dict[str, dict[str, tuple[Any, Any]]] = {}
    for group, knobs in KNOB_GROUPS.items():
        diff = {
            k: (getattr(winner, k), getattr(autotune, k))
            for k in knobs
            if _norm(k, getattr(winner, k), pipeline) != _norm(k, getattr(autotune, k), pipeline)
        }
        if diff:
            out[group] = diff
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class KnobContribution:
    """One knob group's share of the winner's gain (leave-one-out).

    Attributes:
      group: The `KNOB_GROUPS` name.
      knobs: ``{knob: (winner value, autotune value)}``.
      ratio: Winner / winner-without-this-group, median over interleaved rounds
        (above 1: the group helps).
      ratio_min, ratio_max: The spread of the per-round ratios.
      without_examples_per_s: Median examples/s of the winner with the group reverted.
    """

    group: str
    knobs: Mapping[str, tuple[Any, Any]]
    ratio: float
    ratio_min: float
    ratio_max: float
    without_examples_per_s: float

    def to_dict(self) -> dict[str, Any]:
        from tuners.space import encode

        return {
            "group": self.group,
            "knobs": {
                k: {"winner": encode(w), "autotune": encode(a)} for k, (w, a) in self.knobs.items()
            },
            "ratio": round(self.ratio, 3),
            "ratio_min": round(self.ratio_min, 3),
            "ratio_max": round(self.ratio_max, 3),
            "without_examples_per_s": round(self.without_examples_per_s, 1),
        }

    def describe(self) -> str:
        """One line: the group, its knobs and its contribution with the spread."""
        knobs = ", ".join(f"{k} {a}→{w}" for k, (w, a) in self.knobs.items())
        return (
            f"{self.group} ({knobs}): {self.ratio:.2f}x "
            f"(rounds {self.ratio_min:.2f}x-{self.ratio_max:.2f}x)"
        )


def knob_breakdown(
    pipeline: Any,
    winner: PipelineConfig,
    autotune: PipelineConfig,
    *,
    step: Any = None,
    windows: int = 5,
    window_batches: int = 20,
    warmup_batches: int = 5,
    cpu_count: int | None = None,
    clock: Callable[[], float] | None = None,
    cpu_clock: Callable[[], float] | None = None,
    progress: Callable[[int, int, Any], None] | None = None,
) -> tuple[KnobContribution, ...]:
    """The gain by knob group: the winner and, for each group of knobs that differs
    from ``autotune``, the winner with that group reverted to autotune's values, all
    measured interleaved over the same windows (`tfinput.bench.measure`, the winner as
    the baseline of the per-round ratios).

    Returns:
      One `KnobContribution` per differing group, largest contribution first; empty
      when the winner builds the same pipeline as autotune.
    """
    from tfinput import bench

    groups = differing_groups(winner, autotune, pipeline=pipeline)
    if not groups:
        return ()
    configs = {"winner": winner}
    for group, knobs in groups.items():
        configs[f"without {group}"] = winner.replace(**{k: a for k, (_, a) in knobs.items()})
    clocks: dict[str, Any] = {}
    if clock is not None:
        clocks["clock"] = clock
    if cpu_clock is not None:
        clocks["cpu_clock"] = cpu_clock
    result = bench.measure(
        pipeline,
        configs,
        step=step,
        windows=windows,
        window_batches=window_batches,
        warmup_batches=warmup_batches,
        baseline="winner",
        cpu_count=cpu_count,
        progress=progress,
        **clocks,
    )
    out = []
    for group, knobs in groups.items():
        stats = result.result(f"without {group}")
        ratios = [1.0 / r for r in (stats.ratio, stats.ratio_min, stats.ratio_max)]
        out.append(
            KnobContribution(
                group=group,
                knobs=knobs,
                ratio=ratios[0],
                ratio_min=ratios[2],
                ratio_max=ratios[1],
                without_examples_per_s=stats.median,
            )
        )
    return tuple(sorted(out, key=lambda c: c.ratio, reverse=True))


# ------------------------------------------------------------ format advice
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
    signal: Mapping[str, Any]
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

    def to_dict(self) -> dict[str, Any]:
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
    pipeline: Any, *, batch_size: int, cpu_count: int | None = None
) -> tuple[bool, dict[str, Any]]:
    """Whether parsing bounds a tf.Example pipeline, from `tfinput.bench.roofline`.

    The signal: the roofline's stages measured alone on one core (two windows of a few
    batches each: a couple of seconds) give the CPU cost per example of reading,
    parsing (``tf.io.parse_example``) and tfinput's transforms. Parse is the bound
    when the pipeline is CPU-bound (not read-bound) and parsing is the largest of the
    three costs: then no tf.data knob removes it, and only a cheaper format does.

    Returns:
      ``(parse_bound, signal)`` with the costs in microseconds per example.
    """
    from tfinput import bench

    rl = bench.roofline(
        pipeline,
        batch_size=batch_size,
        windows=2,
        window_batches=4,
        warmup_batches=1,
        cpu_count=cpu_count,
    )
    cost = rl.cost_us()
    bound = rl.limited_by == "cpu" and cost["parse"] >= max(cost["read"], cost["transform"])
    signal = {
        "source": "tfinput.bench.roofline: stages alone on one core, CPU cost per example",
        "cost_us_per_example": {k: round(v, 3) for k, v in cost.items()},
        "limited_by": rl.limited_by,
        "bound_examples_per_s": round(rl.bound, 1),
    }
    return bound, signal


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
    pipeline: Any,
    config: PipelineConfig,
    *,
    schema_path: str | None = None,
    out_dir: str | None = None,
    sample_files: int = 2,
    windows: int = 3,
    window_batches: int = 10,
    warmup_batches: int = 2,
    require_parse_bound: bool = True,
    cpu_count: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] | None = None,
) -> FormatAdvice | None:
    """Convert a sample of tf.Example files to columnar records and measure both.

    Bounded in time: a roofline of a few batches per stage (`parse_is_bound`), at most
    ``sample_files`` files converted into a temporary directory (deleted afterwards),
    then ``windows`` interleaved input-only windows of each with ``config``.

    Args:
      pipeline: A `tfinput.Pipeline` over TFRecord files of tf.Example.
      config: The config both are measured with (the tuner's winner).
      schema_path: The schema JSON file, for the command (None: ``SCHEMA.json``, to be
        written with ``pipeline.schema.to_json``).
      out_dir: Where the command writes (default: ``<data directory>-columnar``).
      sample_files: Files converted (1 or 2 keep it short).
      windows, window_batches, warmup_batches: The side-by-side measurement.
      require_parse_bound: Return None unless parse is the bound.
      cpu_count: Cores for the roofline.
      clock, cpu_clock: Injectable clocks for the measurement.

    Returns:
      A `FormatAdvice`, or None: not a tf.Example source, or (with
      ``require_parse_bound``) parse is not the bound.

    Raises:
      ConfigError: ``sample_files`` < 1.
    """
    from tfinput import bench
    from tfinput.columnar_records import columnar
    from tfinput.convert import convert

    if sample_files < 1:
        raise ConfigError(f"format advice: sample_files must be >= 1, got {sample_files}")
    source = getattr(pipeline, "source", None)
    if getattr(source, "kind", None) != "tfrecord" or not hasattr(pipeline, "schema"):
        return None
    t0 = time.perf_counter()
    parse_bound, signal = parse_is_bound(
        pipeline, batch_size=config.batch_size, cpu_count=cpu_count
    )
    if require_parse_bound and not parse_bound:
        return None
    files = source.files()[:sample_files]
    chunk = _chunk_rows(config.batch_size)
    t1 = time.perf_counter()
    cpu = cpu_clock or bench.process_cpu_seconds
    with tempfile.TemporaryDirectory(prefix="tfinput-format-advice-") as tmp:
        converted = convert(
            files,
            os.path.join(tmp, "columnar"),
            to="columnar",
            schema=pipeline.schema,
            input_format="tfrecord",
            chunk_rows=chunk,
        )
        t2 = time.perf_counter()
        example = dataclasses.replace(
            pipeline, source=dataclasses.replace(source, paths=tuple(files))
        )
        col = dataclasses.replace(
            pipeline, source=columnar(os.path.join(tmp, "columnar"), pipeline.schema).source
        )
        size = config.batch_size if config.drop_remainder else None
        names = {"tf.Example": example, "columnar": col}
        measured: dict[str, list[Any]] = {n: [] for n in names}
        for r in range(windows):
            for name, p in names.items():
                w = bench.run_window(
                    lambda p=p: p.build(config).repeat(),
                    warmup_batches=warmup_batches,
                    window_batches=window_batches,
                    batch_size=size,
                    clock=clock,
                    cpu_clock=cpu,
                )
                measured[name].append(dataclasses.replace(w, name=name, round=r))
        t3 = time.perf_counter()
    stats = {
        s.name: s
        for s in bench.summarize(measured, baseline="tf.Example", cpu_count=cpu_count or 1)
    }
    paths = list(getattr(source, "paths", files))
    target = out_dir or _out_dir(files, paths)
    command = shlex.join(
        [
            "tfinput",
            "convert",
            *paths,
            "--input-format",
            "tfrecord",
            "--schema",
            schema_path or "SCHEMA.json",
            "--to",
            "columnar",
            "--chunk-rows",
            str(chunk),
            "--out",
            target,
        ]
    )
    c = stats["columnar"]
    return FormatAdvice(
        parse_bound=parse_bound,
        signal=signal,
        sample_files=tuple(files),
        rows=converted.rows,
        tf_example_examples_per_s=stats["tf.Example"].median,
        columnar_examples_per_s=c.median,
        ratio=c.ratio or 0.0,
        ratio_min=c.ratio_min or 0.0,
        ratio_max=c.ratio_max or 0.0,
        command=command,
        out_dir=target,
        chunk_rows=chunk,
        seconds={"roofline": t1 - t0, "convert": t2 - t1, "measure": t3 - t2},
        method=f"{len(files)} file(s) converted to columnar in a temporary directory; both "
        f"measured input only with the winner config, interleaved, {windows} windows of "
        f"{window_batches} batches after {warmup_batches} warm-up batches, fresh iterator "
        "per window; ratio = median of per-round ratios",
    )
