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
- **Format advice** (`format_advice`, from `tuners.columnar_advice`): for tf.Example
  TFRecord data whose parse stage bounds the pipeline, a sample converted to columnar
  records and measured side by side, with the exact ``tfinput convert`` command.

Nothing here needs Optuna.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfinput.config import PipelineConfig
from tuners.columnar_advice import FormatAdvice, format_advice, parse_is_bound

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

#: Knob groups of the gain breakdown (at most seven measurements): the tf.data threading
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
    "sparsecore feed": ("sparsecore_workers", "sparsecore_prefetch"),
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
      False otherwise, with "keep autotune"; None when nothing was confirmed, or
      when the winner was confirmed in one round only (one ratio has no spread).
    """
    if not confirmed:
        return None, "not confirmed against autotune: no verdict"
    best = confirmed[0]
    if best.name == "autotune" or best.ratio is None:
        return False, f"{KEEP_AUTOTUNE}: no config beat it in the confirmation"
    low, high = best.ratio_min, best.ratio_max
    if len(best.windows) == 1:
        return None, (
            f"no verdict: one confirmation round cannot tell {best.name}'s "
            f"{best.ratio:.2f}x autotune from the noise (confirm with --confirm-windows 3 "
            "or more)"
        )
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


def clock_kwargs(
    clock: Callable[[], float] | None, cpu_clock: Callable[[], float] | None
) -> dict[str, Callable[[], float]]:
    """``clock=`` and ``cpu_clock=`` keyword arguments for a measurement, leaving out
    those that are None (so the measurement's own defaults apply)."""
    clocks = {}
    if clock is not None:
        clocks["clock"] = clock
    if cpu_clock is not None:
        clocks["cpu_clock"] = cpu_clock
    return clocks


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

    clocks = clock_kwargs(clock, cpu_clock)
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
    from tuners.space import canonical

    if knob == "layout" and value is None:
        return getattr(pipeline, "layout", "per_feature")
    return canonical(knob, value)


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
      hurts: Every round measured the winner *slower* with this group than with it
        reverted (``ratio_max < 1``): the search kept knobs that cost throughput, and
        `describe` says how to pin them at autotune.
    """

    group: str
    knobs: Mapping[str, tuple[Any, Any]]
    ratio: float
    ratio_min: float
    ratio_max: float
    without_examples_per_s: float

    @property
    def hurts(self) -> bool:
        return self.ratio_max < 1.0

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
            "hurts": self.hurts,
        }

    def describe(self) -> str:
        """One line: the group, its knobs and its contribution with the spread; for a
        group that `hurts`, the ``--fix`` arguments that keep it at autotune."""
        knobs = ", ".join(f"{k} {a}→{w}" for k, (w, a) in self.knobs.items())
        text = (
            f"{self.group} ({knobs}): {self.ratio:.2f}x "
            f"(rounds {self.ratio_min:.2f}x-{self.ratio_max:.2f}x)"
        )
        if self.hurts:
            fixes = " ".join(f"--fix {k}={_cli_value(a)}" for k, (_, a) in self.knobs.items())
            text += (
                "; slower with these knobs in every round: keep them at autotune "
                f"(tune again with {fixes})"
            )
        return text


def _cli_value(value: Any) -> str:
    """A knob value as ``--fix`` / ``--narrow`` take it."""
    from tuners.space import encode

    value = encode(value)
    if isinstance(value, bool):
        return str(value).lower()
    return "none" if value is None else str(value)


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
    clocks = clock_kwargs(clock, cpu_clock)
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
