"""What the tuner says besides the best config: verdicts, the gain by knob, format advice.

- **Verdicts.** Does the winner beat autotune beyond the noise (`beats_autotune`: every
  round of the interleaved confirmation faster, the paired ratios' whole spread above
  1; otherwise "keep autotune")? Is the step input-bound at all (`input_verdict`: the
  share of the step's time spent waiting for input, judged against its spread over the
  rounds; "input is not your bottleneck" under `INPUT_BOUND_THRESHOLD` or within the
  noise, "cannot tell" when the rounds disagree)? When the step owns the loop
  (``model.fit``) the wait cannot be seen, so it is derived from the step's own bound
  (`step_bound`: the step fed one cached batch over and over): ``1 - fed / bound``,
  input-bound only when every round fed slower than every round of the bound.
- **Gain by knob** (`knob_breakdown`): the winner measured against itself with each
  group of knobs that differs from autotune reverted (leave-one-out), interleaved.
- **Format advice** (`format_advice`, from `tuners._columnar_advice`): for tf.Example
  TFRecord data whose parse stage bounds the pipeline, a sample converted to columnar
  records and measured side by side, with the exact ``tfinput convert`` command.

Nothing here needs Optuna.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfinput._src.measurement.target import Measurable, MeasureOptions, Target
from tfinput._src.measurement.windows import DEFAULT_WINDOW_SECONDS, TUNER_PLAN, WindowPlan
from tfinput.config import PipelineConfig
from tfinput.steps import Step

if TYPE_CHECKING:  # pragma: no cover
    from tfinput._src.measurement.compare import ConfigStats

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
        "autotune_min_parallelism",
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
      confirmed: The confirmation's `tfinput._src.measurement.compare.ConfigStats`, best first, with
        ratios to ``autotune`` per round.

    Returns:
      ``(verdict, sentence)``: True only when the winner is not autotune, its median
      ratio is at least `MIN_GAIN`, and its per-round ratios to autotune are all above 1 (the paired spread excludes 1), or,
      in a confirmation of nine rounds or more, its median ratio is above 1 and no
      more rounds are at or below 1 than `rounds_allowed_below` allows (the same
      chance of a false win as five rounds all above 1);
      False otherwise, with "keep autotune" (the sentence names only configs that were
      confirmed); None when nothing was confirmed, when autotune was the only config
      confirmed (nothing was compared with it), or when the winner was confirmed in one
      round only (one ratio has no spread).
    """
    if not confirmed:
        return None, "not confirmed against autotune: no verdict"
    best = confirmed[0]
    others = [c.name for c in confirmed if c.name != "autotune"]
    if not others:
        return None, (
            "no verdict: autotune was the only config confirmed; no other config was "
            "measured against it"
        )
    if best.name == "autotune":
        return False, (
            f"{KEEP_AUTOTUNE}: it measured best in the confirmation, ahead of "
            f"{', '.join(others)} (paired ratio, round by round)"
        )
    if best.ratio is None:
        return None, f"no verdict: {best.name} was not measured in autotune's rounds"
    low, high = best.ratio_min, best.ratio_max
    if len(best.windows) == 1:
        return None, (
            f"no verdict: one confirmation round cannot tell {best.name}'s "
            f"{best.ratio:.2f}x autotune from the noise (confirm with --confirm-windows 3 "
            "or more)"
        )
    spread = f"{paired_text(best)}, rounds {low:.2f}x-{high:.2f}x"
    if best.ratio < MIN_GAIN and low is not None and low > 1.0:
        return False, (
            f"{KEEP_AUTOTUNE}: {best.name} measured faster in every round, but only "
            f"{spread}: under the {MIN_GAIN - 1:.0%} gain worth changing the config for"
        )
    if low is not None and low > 1.0:
        return True, f"{best.name} beats autotune beyond the noise ({spread})"
    rounds = round_ratios(best, next((c for c in confirmed if c.name == "autotune"), None))
    below = sum(1 for r in rounds if r <= 1.0)
    if best.ratio >= MIN_GAIN and 0 < below <= rounds_allowed_below(len(rounds)):
        return True, (
            f"{best.name} beats autotune beyond the noise ({spread}; "
            f"{len(rounds) - below} of {len(rounds)} rounds above 1)"
        )
    return False, (
        f"{KEEP_AUTOTUNE}: {best.name}'s gain is within the noise ({spread}; the spread includes 1)"
    )


def paired_text(stats: ConfigStats) -> str:
    """``1.07x autotune paired``: the median, over the confirmation's rounds, of the
    config's examples/s over autotune's in the same round (what the verdict reads; the
    median examples/s is another figure, and can order two configs otherwise)."""
    return f"{stats.ratio:.2f}x autotune paired"


#: The least confirmed ratio to autotune called a win: a config that is faster in
#: every round by less (a scheduling difference, not a setting worth keeping) leaves
#: the verdict at "keep autotune".
MIN_GAIN = 1.01

#: The chance, were the config no faster than autotune, that every one of five
#: rounds measures it faster: the false-win rate every verdict is held to.
FALSE_WIN_RATE = 1 / 32


def rounds_allowed_below(rounds: int) -> int:
    """Rounds at or below autotune a win may have among ``rounds``: the most that keep
    the chance of a false win (a one-sided sign test, each round a coin flip when the
    configs are equal) at or under `FALSE_WIN_RATE`. 0 up to 8 rounds, 1 from 9."""
    allowed = 0
    for k in range(rounds):
        tail = sum(math.comb(rounds, i) for i in range(rounds - k, rounds + 1)) / 2**rounds
        if tail > FALSE_WIN_RATE:
            break
        allowed = k
    return allowed


def round_ratios(best: ConfigStats, autotune: ConfigStats | None) -> list[float]:
    """``best``'s examples/s over autotune's, round by round (the confirmation's paired
    windows); empty without autotune's windows."""
    if autotune is None:
        return []
    base = {w.round: w.examples_per_s for w in autotune.windows}
    return [w.examples_per_s / base[w.round] for w in best.windows if base.get(w.round)]


def input_verdict(
    waits: Sequence[float] | None = None,
    *,
    fed: Sequence[float] = (),
    bound: Sequence[float] = (),
    input_only: bool = False,
) -> tuple[bool | None, str]:
    """Whether the step is input-bound, judged against the spread of the rounds the
    wait comes from.

    Two sources of the wait:

    - ``waits``, measured: each confirmation round's share of time spent waiting for
      the next batch. Not input-bound when the median round waited under
      `INPUT_BOUND_THRESHOLD`; input-bound when every round waited at least that;
      cannot tell when the rounds fall on both sides.
    - ``fed`` and ``bound`` (the step owns the loop, so the wait is ``1 - fed /
      bound``): each round's examples/s with the winner, and with the step fed one
      cached batch (`step_bound_stats`). Not input-bound when the wait is under the
      threshold or the median fed rate reaches the bound's slowest round (the step
      bound is reached within its noise); input-bound when every fed round is slower
      than every bound round and the wait is at least the threshold; cannot tell when
      the rounds overlap short of that.

    Fewer than two rounds on a side: no spread, so cannot tell.

    Args:
      waits: Per-round input waits (shares of the round's time).
      fed, bound: Per-round examples/s of the winner and of the step bound.
      input_only: No training step was measured (``input_only``): the wait says
        nothing about training.

    Returns:
      ``(input_bound, sentence)``; ``input_bound`` is None when it cannot be told.
    """
    if input_only:
        return None, (
            "measured input only (no training step): whether input bounds training is "
            "unknown; tune against your training step to find out"
        )
    if waits:
        return _verdict_from_waits(waits, INPUT_BOUND_THRESHOLD)
    if fed and bound:
        return _verdict_from_bound(fed, bound, INPUT_BOUND_THRESHOLD)
    return None, "the input wait could not be measured"


def _verdict_from_waits(waits: Sequence[float], threshold: float) -> tuple[bool | None, str]:
    """`input_verdict` from measured per-round waits."""
    w = sorted(waits)
    median = statistics.median(w)
    spread = f"rounds {w[0]:.1%}-{w[-1]:.1%}"
    if len(w) < 2:
        return None, (
            f"cannot tell whether input bounds training: the step waited {median:.1%} in "
            "one round, and one round has no spread (confirm with --confirm-windows 3)"
        )
    if median < threshold:
        return False, (
            f"{NOT_INPUT_BOUND} (the step waited for input {median:.1%} of the time, {spread})"
        )
    if w[0] >= threshold:
        return True, (
            f"the step waits for input {median:.0%} of the time ({spread}, every round "
            f"at least {threshold:.0%}): the input pipeline bounds training"
        )
    return None, (
        f"cannot tell whether input bounds training: the step waited {median:.1%} of "
        f"the time, but the rounds ({w[0]:.1%}-{w[-1]:.1%}) fall on both sides of "
        f"{threshold:.0%}"
    )


def _verdict_from_bound(
    fed: Sequence[float], bound: Sequence[float], threshold: float
) -> tuple[bool | None, str]:
    """`input_verdict` from the fed rounds against the step bound's rounds."""
    f, b = sorted(fed), sorted(bound)
    fed_median, bound_median = statistics.median(f), statistics.median(b)
    wait = max(0.0, 1.0 - fed_median / bound_median) if bound_median > 0 else 0.0
    numbers = (
        f"fed {fed_median:,.0f} examples/s (rounds {f[0]:,.0f}-{f[-1]:,.0f}) against a "
        f"step bound of {bound_median:,.0f} (rounds {b[0]:,.0f}-{b[-1]:,.0f})"
    )
    if len(f) < 2 or len(b) < 2:
        return None, (
            f"cannot tell whether input bounds training: {numbers}; one round has no "
            "spread (confirm with --confirm-windows 3)"
        )
    if wait < threshold or fed_median >= b[0]:
        return False, (f"{NOT_INPUT_BOUND} ({numbers}: the step bound is reached within its noise)")
    if f[-1] < b[0]:
        return True, (
            f"the step waits for input about {wait:.0%} of the time ({numbers}: every "
            "round fed slower than every round of the bound): the input pipeline bounds "
            "training"
        )
    return None, (
        f"cannot tell whether input bounds training: {numbers}; about {wait:.0%} short, "
        "but the rounds overlap (measure longer: --confirm-windows)"
    )


#: The step bound's windows: the step alone on one cached batch, briefly.
STEP_BOUND_PLAN = WindowPlan(
    warmup_batches=5, windows=3, window_batches=20, window_seconds=DEFAULT_WINDOW_SECONDS
)


def _settled(given: MeasureOptions | None, default: WindowPlan, *, what: str) -> MeasureOptions:
    """``given`` with its window counts settled: the unset ones ``default``'s."""
    options = given or MeasureOptions()
    return options.with_plan(options.plan(default, what=what))


def step_bound(
    target: Target,
    config: PipelineConfig,
    step: Step | Callable[[Any], object] | None,
    *,
    measurement: MeasureOptions | None = None,
) -> float:
    """Examples/s of ``step`` fed one cached batch over and over (no input cost): the
    most the step can take; the median of `step_bound_stats`."""
    return step_bound_stats(target, config, step, measurement=measurement).median


def step_bound_stats(
    target: Target,
    config: PipelineConfig,
    step: Step | Callable[[Any], object] | None,
    *,
    measurement: MeasureOptions | None = None,
) -> ConfigStats:
    """``step`` fed one cached batch of ``target`` over and over (no input cost,
    `Target.one_batch_repeated`), measured with `tfinput.bench.measure` (which lets a
    step that owns the loop, ``model.fit``, drive the data): its
    `tfinput._src.measurement.compare.ConfigStats`, one window per round. ``measurement`` as for
    `tfinput.bench.measure`; the counts default to `STEP_BOUND_PLAN`."""
    from tfinput._src.measurement import compare

    options = _settled(measurement, STEP_BOUND_PLAN, what="step_bound_stats")
    result = compare.measure(
        target.one_batch_repeated, {"step bound": config}, step=step, measurement=options
    )
    return result.results[0]


# ------------------------------------------------------------- gain by knob
def _norm(knob: str, value: Any, target: Target | None) -> Any:
    from tuners._space import canonical

    if knob == "layout" and value is None:
        return "per_feature" if target is None else target.layout
    return canonical(knob, value)


def differing_groups(
    winner: PipelineConfig, autotune: PipelineConfig, *, target: Target | None = None
) -> dict[str, dict[str, tuple[Any, Any]]]:
    """``{group: {knob: (winner value, autotune value)}}`` for the `KNOB_GROUPS` in which
    the two configs build different pipelines."""
    out: dict[str, dict[str, tuple[Any, Any]]] = {}
    for group, knobs in KNOB_GROUPS.items():
        diff = {
            k: (getattr(winner, k), getattr(autotune, k))
            for k in knobs
            if _norm(k, getattr(winner, k), target) != _norm(k, getattr(autotune, k), target)
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
        reverted (``ratio_max < 1``): the search kept knobs that cost throughput.
      reverted: For a group that `hurts`, after `tuners.tune` confirmed the winner
        with such groups reverted against it: True when that measured best (the saved
        config has this group at autotune's values), False when not (kept); None when
        not tried.
    """

    group: str
    knobs: Mapping[str, tuple[Any, Any]]
    ratio: float
    ratio_min: float
    ratio_max: float
    without_examples_per_s: float
    reverted: bool | None = None

    @property
    def hurts(self) -> bool:
        return self.ratio_max < 1.0

    def to_dict(self) -> dict[str, object]:
        from tuners._space import encode

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
            "reverted": self.reverted,
        }

    def describe(self) -> str:
        """One line: the group, its knobs and its contribution with the spread; for a
        group that `hurts`, whether the best measured config reverted it (or, when no revert was
        tried, the ``--fix`` arguments that keep it at autotune)."""
        from tuners._space import label

        knobs = ", ".join(f"{k} {label(a)}→{label(w)}" for k, (w, a) in self.knobs.items())
        text = (
            f"{self.group} ({knobs}): {self.ratio:.2f}x "
            f"(rounds {self.ratio_min:.2f}x-{self.ratio_max:.2f}x)"
        )
        if self.hurts and self.reverted:
            text += (
                "; slower with these knobs in every round: reverted to autotune's values in "
                "the best measured config (confirmed faster in the same windows)"
            )
        elif self.hurts and self.reverted is False:
            text += (
                "; slower with these knobs in every round, but reverting them measured no "
                "faster when confirmed: kept"
            )
        elif self.hurts:
            fixes = " ".join(f"--fix {k}={_cli_value(a)}" for k, (_, a) in self.knobs.items())
            text += (
                "; slower with these knobs in every round: keep them at autotune "
                f"(tune again with {fixes})"
            )
        return text


def _cli_value(value: Any) -> str:
    """A knob value as ``--fix`` / ``--narrow`` take it."""
    from tuners._space import encode

    value = encode(value)
    if isinstance(value, bool):
        return str(value).lower()
    return "none" if value is None else str(value)


def knob_breakdown(
    pipeline: Measurable,
    winner: PipelineConfig,
    autotune: PipelineConfig,
    *,
    step: Step | Callable[[Any], object] | None = None,
    measurement: MeasureOptions | None = None,
    progress: Callable[[int, int, Any], None] | None = None,
) -> tuple[KnobContribution, ...]:
    """The gain by knob group: the winner and, for each group of knobs that differs
    from ``autotune``, the winner with that group reverted to autotune's values, all
    measured interleaved over the same windows (`tfinput.bench.measure`, the winner as
    the baseline of the per-round ratios). ``measurement`` as for
    `tfinput.bench.measure`; the counts default to `TUNER_PLAN`.

    Returns:
      One `KnobContribution` per differing group, largest contribution first; empty
      when the winner builds the same pipeline as autotune.
    """
    target = Target.of(pipeline, what="knob_breakdown")
    return breakdown_of(
        target, winner, autotune, step=step, measurement=measurement, progress=progress
    )


def breakdown_of(
    target: Target,
    winner: PipelineConfig,
    autotune: PipelineConfig,
    *,
    step: Step | Callable[[Any], object] | None = None,
    measurement: MeasureOptions | None = None,
    progress: Callable[[int, int, Any], None] | None = None,
) -> tuple[KnobContribution, ...]:
    """`knob_breakdown` of a `Target` its entry settled (the tuner's gain by knob)."""
    from tfinput._src.measurement import compare

    groups = differing_groups(winner, autotune, target=target)
    if not groups:
        return ()
    configs = {"winner": winner}
    for group, knobs in groups.items():
        configs[f"without {group}"] = winner.replace(**{k: a for k, (_, a) in knobs.items()})
    options = _settled(measurement, TUNER_PLAN, what="knob_breakdown")
    result = compare.measure(
        target, configs, step=step, baseline="winner", progress=progress, measurement=options
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
