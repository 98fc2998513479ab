"""After the search: the confirmation against autotune, the verdicts, the gain by knob
and the format advice.

The top configs of the search are measured again, interleaved window by window with
``autotune`` (and the current config) by `tfinput.bench.measure`, and the
winner is the config with the best *paired ratio* to autotune: the median, over the
rounds, of its examples/s over autotune's in the same round (`rank`), the figure the
verdict is taken on; the median examples/s over the rounds is reported beside it. If the
confirmation raises, it is run once more; if it fails again, the winner is the best
trial of the search, unconfirmed. The step bound, the gain by knob and the format advice
are extras: when one raises it is left out with a note. Every failure is logged and
added to ``notes`` (`tuners.TuneResult.warnings`).

Within a timeout (`tuners._budget.Budget`) each step is sized to what is left: the
confirmation drops its lesser candidates, then the current config, and is left out
when autotune and the search's best do not fit in its rounds (fewer rounds would
weaken the verdict); the extras run only when their estimate fits; a measurement still
running when the timeout passes stops after its window.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfinput._src.measurement.target import MeasureOptions, Target
from tfinput.config import PipelineConfig
from tfinput.steps import Step
from tuners._budget import Budget, DeadlineReached
from tuners._storage import explain_failure

if TYPE_CHECKING:  # pragma: no cover
    from tfinput._src.measurement.compare import ConfigStats
    from tfinput._src.measurement.windows import Window, WindowPlan
    from tuners._advice import KnobContribution
    from tuners._columnar_advice import FormatAdvice

log = logging.getLogger("tfinput.tuners")

Progress = Callable[[str, dict[str, Any]], None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Remeasure:
    """How the steps after the search measure (the confirmation, the step bound and the
    gain by knob all use the same windows).

    Attributes:
      target: The tuned pipeline, as `tuners.tune` settled it.
      step: The training step.
      plan: The trial's `tfinput.bench.WindowPlan`: its window size and warm-up.
      windows: Interleaved windows per config (``confirm_windows`` of `tuners.tune`),
        in place of the plan's.
      cpu_count: Cores the numbers are normalized to.
      clocks: ``clock`` / ``cpu_clock`` overrides (`MeasureOptions.clocks`).
      budget: The run's time (None: no limit).
    """

    target: Target
    step: Step
    plan: WindowPlan
    windows: int
    cpu_count: int
    clocks: Mapping[str, Callable[[], float]] = dataclasses.field(default_factory=dict)
    budget: Budget | None = None

    def cost(self, configs: int, windows: int | None = None) -> float:
        """Estimated seconds of ``configs`` measured interleaved (0 without a budget)."""
        if self.budget is None:
            return 0.0
        return self.budget.measuring_s(configs, self.windows if windows is None else windows)

    def fits(self, seconds: float) -> bool:
        """Whether ``seconds`` fit in what is left of the timeout (always, without one)."""
        return self.budget is None or self.budget.fits(seconds)

    def guard(self, progress: Callable[[int, int, Any], None] | None) -> Any:
        """``progress`` that also counts windows and stops at the timeout."""
        return progress if self.budget is None else self.budget.guard(progress)

    @contextlib.contextmanager
    def measuring(self) -> Iterator[None]:
        """Around an interleaved measurement: its windows count from its start, and what
        runs after its last one (an iterator's deletion) counts with it."""
        if self.budget is not None:
            self.budget.mark()
        try:
            yield
        finally:
            if self.budget is not None:
                self.budget.measurement_done()

    def measurement(self) -> MeasureOptions:
        """The `MeasureOptions` of `tfinput.bench.measure`, `tuners._advice.step_bound`
        and `tuners._advice.knob_breakdown`: the plan's windows, ``windows`` of them."""
        plan = dataclasses.replace(self.plan, windows=self.windows)
        return MeasureOptions(cpu_count=self.cpu_count, **self.clocks).with_plan(plan)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Verdicts:
    """The winner's verdicts (`verdicts`; the `tuners.TuneResult` fields of the same
    names, ``sentences`` its ``verdicts``).

    Attributes:
      beats_autotune: Whether the winner beats autotune (None: no verdict).
      input_wait: The share of the step's time spent waiting for input, or None.
      input_wait_source: How ``input_wait`` was found (``measured``, ``step bound``).
      input_bound: Whether the input bounds the step (None: not known).
      step_bound: Examples/s of the step fed one cached batch, or None.
      sentences: The verdict sentences (against autotune, on the input).
    """

    beats_autotune: bool | None = None
    input_wait: float | None = None
    input_wait_source: str | None = None
    input_bound: bool | None = None
    step_bound: float | None = None
    sentences: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Confirmation:
    """What the steps after the search give the `tuners.TuneResult` (its fields of the
    same names say what each holds).

    Attributes:
      best_config: The config saved as the result.
      best_name: Its name (``autotune``, ``current``, ``trial N``).
      confirmed: The configs measured side by side, best first.
      seconds: Seconds of each step after the search (``confirm``, ``verdicts``,
        ``breakdown``, ``format_advice``).
      advice: The advice sentences.
      confirmation_error: Why nothing was confirmed, or None.
      breakdown: The gain by knob group.
      format_advice: The columnar-format advice, or None.
      beats_autotune: The verdict against autotune (None: no verdict).
      input_wait: The share of the step's time spent waiting for input, or None.
      input_wait_source: How ``input_wait`` was found (``measured``, ``step bound``).
      input_bound: Whether the input bounds the step (None: not known).
      step_bound: Examples/s of the step fed one cached batch, or None.
      verdicts: The verdict sentences.
    """

    best_config: PipelineConfig
    best_name: str
    confirmed: tuple[ConfigStats, ...]
    seconds: dict[str, float]
    advice: tuple[str, ...] = ()
    confirmation_error: str | None = None
    breakdown: tuple[KnobContribution, ...] = ()
    format_advice: FormatAdvice | None = None
    beats_autotune: bool | None = None
    input_wait: float | None = None
    input_wait_source: str | None = None
    input_bound: bool | None = None
    step_bound: float | None = None
    verdicts: tuple[str, ...] = ()


def note(notes: list[str], text: str) -> None:
    """Log ``text`` as a warning and add it to the run's ``notes``."""
    log.warning("%s", text)
    notes.append(text)


def confirmation_configs(
    autotune: PipelineConfig,
    current: PipelineConfig | None,
    candidates: Sequence[tuple[str, PipelineConfig]],
) -> dict[str, PipelineConfig]:
    """``autotune``, ``current`` (when given) and the distinct ``candidates``, in the
    order they are measured each round."""
    configs = {"autotune": autotune}
    if current is not None:
        configs["current"] = current
    for name, config in candidates:
        if config not in configs.values():
            configs[name] = config
    return configs


def rank(stats: ConfigStats, autotune: ConfigStats | None = None) -> tuple[float, float]:
    """The order of the confirmed configs, best first when sorted in reverse: the paired
    ratio to autotune (the median of the per-round ratios, 1 for autotune itself: what
    the verdict reads), then the median examples/s. A config measured without
    autotune's rounds ranks by its median's ratio to autotune's median."""
    ratio = stats.ratio
    if ratio is None:
        ratio = stats.median / autotune.median if autotune and autotune.median else 0.0
    return ratio, stats.median


def ranked(stats: Sequence[ConfigStats]) -> list[ConfigStats]:
    """``stats`` best first (`rank`)."""
    autotune = next((c for c in stats if c.name == "autotune"), None)
    return sorted(stats, key=lambda c: rank(c, autotune), reverse=True)


def fit_confirmation(
    how: Remeasure, configs: Mapping[str, PipelineConfig]
) -> tuple[dict[str, PipelineConfig], str | None]:
    """``configs`` less what does not fit in the timeout: the lesser candidates first,
    then the current config; ``({}, why)`` when autotune and the search's best do not
    fit in the confirmation's rounds (never fewer rounds: the verdict's chance of a
    false win depends on them). ``(configs, None)`` when all fit."""
    kept = dict(configs)
    if how.fits(how.cost(len(kept))):
        return kept, None
    names = [n for n in kept if n not in ("autotune", "current")]
    if not names:
        return kept, None
    dropped = []
    for name in [*reversed(names[1:]), "current"]:
        if name in kept and not how.fits(how.cost(len(kept))):
            del kept[name]
            dropped.append(name)
    budget = how.budget
    assert budget is not None
    left = max(0.0, budget.left())
    if not how.fits(how.cost(len(kept))):
        return {}, (
            f"the confirmation was left out: autotune and {names[0]} in {how.windows} "
            f"rounds need about {how.cost(2):,.0f} s, and {left:,.0f} s of the timeout of "
            f"{budget.timeout:g} s are left; the result is the search's best, not confirmed "
            "against autotune (raise --timeout)"
        )
    return kept, (
        f"the confirmation measures {', '.join(kept)} ({how.cost(len(kept)):,.0f} s of the "
        f"{left:,.0f} s of the timeout left), not {', '.join(reversed(dropped))}"
    )


def confirm(
    how: Remeasure,
    configs: Mapping[str, PipelineConfig],
    *,
    progress: Progress | None,
    notes: list[str],
) -> tuple[list[ConfigStats], str | None]:
    """Measure ``configs`` interleaved, ratios to ``autotune``; one retry on error.

    Within a timeout, only what fits is measured (`fit_confirmation`), and a
    confirmation still running when the timeout passes stops after its window (then
    nothing is confirmed).

    Returns:
      ``(confirmed, error)``: the configs' `tfinput._src.measurement.compare.ConfigStats`, best
      first (`rank`), and None; or ``([], why)`` when both attempts raised, or the
      timeout left no room for them.
    """
    from tfinput._src.measurement import compare

    configs, fitted = fit_confirmation(how, configs)
    if fitted is not None:
        note(notes, fitted)
    if not configs:
        return [], fitted
    if progress is not None:
        progress("confirm", {"configs": list(configs), "windows": how.windows})

    def on_window(done: int, total: int, window: Window) -> None:
        if progress is not None:
            progress(
                "confirm_window",
                {
                    "done": done,
                    "total": total,
                    "name": window.name,
                    "examples_per_s": window.examples_per_s,
                },
            )

    error = None
    for attempt in (1, 2):
        if attempt == 2 and not how.fits(how.cost(len(configs))):
            note(notes, "the confirmation was not run again: it does not fit in the timeout")
            break
        try:
            with how.measuring():
                result = compare.measure(
                    how.target,
                    configs,
                    step=how.step,
                    baseline="autotune",
                    progress=how.guard(on_window),
                    measurement=how.measurement(),
                )
        except DeadlineReached as e:
            error = f"the confirmation {e}"
            note(notes, f"{error}: nothing confirmed")
            break
        except Exception as e:  # a transient step error, out of memory...
            error = explain_failure(how.target, e)
            note(notes, f"confirmation attempt {attempt} of 2 failed: {error}")
            continue
        return ranked(result.results), None
    return [], error


def confirm_longer(
    how: Remeasure,
    confirmed: Sequence[ConfigStats],
    *,
    progress: Progress | None,
    notes: list[str],
) -> list[ConfigStats]:
    """When the confirmation cannot tell: its best (not autotune) measured at least
    `tuners._advice.MIN_GAIN` times autotune at the median, but some round at or below
    it. Autotune (and the current
    config) and that best are measured again, interleaved, in twice as many rounds, and
    that confirmation replaces the first: the verdict is taken on rounds that did not
    pick the best (`tuners._advice.beats_autotune`: with nine rounds or more one round
    at or below autotune is allowed, at the same false-win rate). ``confirmed`` as it
    was when there is nothing to tell or the new confirmation fails.
    """
    from tuners._advice import MIN_GAIN, beats_autotune

    if not confirmed or confirmed[0].name == "autotune" or len(confirmed[0].windows) < 2:
        return list(confirmed)
    best = confirmed[0]
    if best.ratio is None or best.ratio < MIN_GAIN or beats_autotune(confirmed)[0] is not False:
        return list(confirmed)
    keep = ("autotune", "current", best.name)
    configs = {c.name: c.config for c in confirmed if c.name in keep}
    rounds = 2 * how.windows
    if not how.fits(how.cost(len(configs), rounds)):
        note(
            notes,
            f"confirmation: {best.name} measured {best.ratio:.2f}x autotune paired, rounds "
            f"{best.ratio_min:.2f}x-{best.ratio_max:.2f}x, which cannot tell; measuring it "
            f"again in {rounds} rounds (about {how.cost(len(configs), rounds):,.0f} s) does "
            "not fit in the timeout, so the first confirmation stands",
        )
        return list(confirmed)
    again, error = confirm(
        dataclasses.replace(how, windows=rounds), configs, progress=progress, notes=notes
    )
    if not again:
        note(notes, f"the longer confirmation failed ({error}): the first one stands")
        return list(confirmed)
    note(
        notes,
        f"confirmation: {best.name} measured {best.ratio:.2f}x autotune paired, rounds "
        f"{best.ratio_min:.2f}x-{best.ratio_max:.2f}x, which cannot tell; it and autotune "
        f"were measured again in {rounds} rounds, and those decide",
    )
    return again


def pick_winner(
    confirmed: Sequence[ConfigStats],
    candidates: Sequence[tuple[str, PipelineConfig]],
    autotune: PipelineConfig,
) -> tuple[str, PipelineConfig]:
    """``(name, config)`` of the best confirmed config; unconfirmed, the search's best
    trial (autotune when there is none)."""
    if confirmed:
        return confirmed[0].name, confirmed[0].config
    return (list(candidates) or [("autotune", autotune)])[0]


def revert_hurting_groups(
    how: Remeasure,
    winner: tuple[str, PipelineConfig],
    autotune: PipelineConfig,
    confirmed: Sequence[ConfigStats],
    contributions: Sequence[KnobContribution],
    *,
    progress: Progress | None,
    notes: list[str],
) -> tuple[str, PipelineConfig, list[ConfigStats], tuple[KnobContribution, ...]]:
    """The knob groups the gain breakdown measured slower in every round
    (`KnobContribution.hurts`), reverted to autotune's values together, and that
    config confirmed against the winner (with autotune and the current config) in the
    same interleaved windows. The best measured of them is the winner.

    Returns:
      ``(name, config, confirmed, contributions)``: the winner's name and config, the
      new confirmation (best first; the old one when nothing hurts or the new one
      fails), and the contributions with ``reverted`` set on the groups that hurt.
    """
    name, config = winner
    hurting = [c for c in contributions if c.hurts]
    if not hurting:
        return name, config, list(confirmed), tuple(contributions)
    groups = ", ".join(c.group for c in hurting)
    reverted = config.replace(**{k: a for c in hurting for k, (_, a) in c.knobs.items()})
    reverted_name = "autotune" if reverted == autotune else f"{name} with {groups} at autotune"
    configs = {c.name: c.config for c in confirmed if c.name in ("autotune", "current", name)}
    configs = {"autotune": autotune, **configs, reverted_name: reverted}
    if not how.fits(how.cost(len(configs))):
        note(
            notes,
            f"the winner with {groups} reverted was not measured: about "
            f"{how.cost(len(configs)):,.0f} s do not fit in the timeout; kept {name}",
        )
        return name, config, list(confirmed), tuple(contributions)
    again, error = confirm(how, configs, progress=progress, notes=notes)
    if not again:
        note(notes, f"the winner with {groups} reverted was not confirmed ({error}): kept {name}")
        return name, config, list(confirmed), tuple(contributions)
    best = again[0]
    by_name = {c.name: c for c in again}
    if best.name == reverted_name:
        kept, other = by_name[reverted_name], by_name[name]
        note(
            notes,
            f"{groups}: slower in every round of the gain breakdown, so reverted to "
            f"autotune's values; the reverted config measured {_paired(kept)} (median "
            f"{kept.median:,.0f} examples/s) against the search's winner's {_paired(other)} "
            f"(median {other.median:,.0f}) in the same windows, and replaces it",
        )
    flags = {c.group: best.name == reverted_name for c in hurting}
    updated = tuple(
        dataclasses.replace(c, reverted=flags[c.group]) if c.group in flags else c
        for c in contributions
    )
    return best.name, best.config, again, updated


def _paired(stats: ConfigStats) -> str:
    """``1.12x autotune paired`` (the median of the per-round ratios), or the median
    examples/s when there is no ratio."""
    if stats.ratio is None:
        return f"{stats.median:,.0f} examples/s"
    return f"{stats.ratio:.2f}x autotune paired"


def verdicts(
    how: Remeasure,
    confirmed: Sequence[ConfigStats],
    best_config: PipelineConfig,
    *,
    notes: list[str],
    unconfirmed: str | None = None,
) -> Verdicts:
    """The verdicts: beats autotune, input wait (measured, or from the step bound when
    the step owns the loop) and their sentences; ``unconfirmed``: why nothing was
    confirmed, said in the verdict."""
    from tuners._advice import beats_autotune, input_verdict, step_bound_stats

    beats, beats_text = beats_autotune(confirmed)
    if not confirmed and unconfirmed:
        beats_text = f"no verdict: not confirmed against autotune ({unconfirmed})"
    wait = source = bound = None
    input_only = isinstance(how.step, Step) and how.step.kind == "input_only"
    input_bound, input_text = input_verdict(None, input_only=input_only)
    if confirmed:
        winner = confirmed[0]
        if winner.stall is not None:
            wait, source = winner.stall, "measured"
            waits = [
                w.wait_seconds / w.seconds
                for w in winner.windows
                if w.wait_seconds is not None and w.seconds > 0
            ]
            input_bound, input_text = input_verdict(waits or [wait], input_only=input_only)
        elif not how.fits(how.cost(1)):
            note(notes, how.budget.skipped("step bound", how.cost(1)))
        else:
            try:
                bound_stats = step_bound_stats(
                    how.target, best_config, how.step, measurement=how.measurement()
                )
            except Exception as e:
                note(notes, f"step bound not measured: {explain_failure(how.target, e)}")
            else:
                bound = bound_stats.median
            if bound:
                wait, source = max(0.0, 1.0 - winner.median / bound), "step bound"
                input_bound, input_text = input_verdict(
                    fed=[w.examples_per_s for w in winner.windows],
                    bound=[w.examples_per_s for w in bound_stats.windows],
                    input_only=input_only,
                )
    return Verdicts(
        beats_autotune=beats,
        input_wait=wait,
        input_wait_source=source,
        input_bound=input_bound,
        step_bound=bound,
        sentences=(beats_text, input_text),
    )


def gain_by_knob(
    how: Remeasure,
    best_config: PipelineConfig,
    autotune: PipelineConfig,
    *,
    progress: Progress | None,
    notes: list[str],
) -> tuple[KnobContribution, ...]:
    """`tuners._advice.knob_breakdown` of the winner; empty, with a note, if it raises
    or does not fit in the timeout."""
    from tuners._advice import breakdown_of, differing_groups

    configs = 1 + len(differing_groups(best_config, autotune, target=how.target))
    if not how.fits(how.cost(configs)):
        note(notes, how.budget.skipped("gain by knob", how.cost(configs)))
        return ()
    if progress is not None:
        progress("breakdown", {"windows": how.windows})
    try:
        with how.measuring():
            return breakdown_of(
                how.target,
                best_config,
                autotune,
                step=how.step,
                measurement=how.measurement(),
                progress=how.guard(None),
            )
    except DeadlineReached as e:
        note(notes, f"gain by knob not measured: {e}")
        return ()
    except Exception as e:  # the breakdown is extra: never lose the result for it
        note(notes, f"gain by knob not measured: {explain_failure(how.target, e)}")
        return ()
