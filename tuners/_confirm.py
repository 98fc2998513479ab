"""After the search: the confirmation against autotune, the verdicts, the gain by knob
and the format advice.

The top configs of the search are measured again, interleaved window by window with
``autotune`` (and the current config) by `tfinput.measure.compare.measure`, and the winner is the
best *confirmed* median. If the confirmation raises, it is run once more; if it fails
again, the winner is the best trial of the search, unconfirmed. The step bound, the gain
by knob and the format advice are extras: when one raises it is left out with a note.
Every failure is logged and added to ``notes`` (`tuners.TuneResult.warnings`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfinput.config import PipelineConfig
from tfinput.measure.options import MeasureOptions
from tfinput.measure.target import Target
from tfinput.steps import Step
from tuners._storage import explain_failure

if TYPE_CHECKING:  # pragma: no cover
    from tfinput.measure.stats import ConfigStats
    from tfinput.measure.windows import Window, WindowPlan
    from tuners._advice import KnobContribution
    from tuners._columnar_advice import FormatAdvice

__all__ = [
    "Remeasure",
    "confirmation_configs",
    "confirm",
    "confirm_longer",
    "pick_winner",
    "revert_hurting_groups",
    "verdicts",
    "gain_by_knob",
    "winner_format_advice",
    "winner_roofline",
    "serial_sentence",
    "advice_sentences",
    "feed_sentence",
    "service_sizing",
]

log = logging.getLogger("tfinput.tuners")

Progress = Callable[[str, dict[str, Any]], None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Remeasure:
    """How the steps after the search measure (the confirmation, the step bound and the
    gain by knob all use the same windows).

    Attributes:
      target: The tuned pipeline, as `tuners.tune` settled it.
      step: The training step.
      plan: The trial's `tfinput.measure.windows.WindowPlan`: its window size and warm-up.
      windows: Interleaved windows per config (``confirm_windows`` of `tuners.tune`),
        in place of the plan's.
      cpu_count: Cores the numbers are normalized to.
      clocks: ``clock`` / ``cpu_clock`` overrides (`MeasureOptions.clocks`).
    """

    target: Target
    step: Step
    plan: WindowPlan
    windows: int
    cpu_count: int
    clocks: Mapping[str, Callable[[], float]] = dataclasses.field(default_factory=dict)

    def measurement(self) -> MeasureOptions:
        """The `MeasureOptions` of `tfinput.measure.compare.measure`, `tuners._advice.step_bound`
        and `tuners._advice.knob_breakdown`: the plan's windows, ``windows`` of them."""
        plan = dataclasses.replace(self.plan, windows=self.windows)
        return MeasureOptions(cpu_count=self.cpu_count, **self.clocks).with_plan(plan)


def _note(notes: list[str], text: str) -> None:
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


def confirm(
    how: Remeasure,
    configs: Mapping[str, PipelineConfig],
    *,
    progress: Progress | None,
    notes: list[str],
) -> tuple[list[ConfigStats], str | None]:
    """Measure ``configs`` interleaved, ratios to ``autotune``; one retry on error.

    Returns:
      ``(confirmed, error)``: the configs' `tfinput.measure.stats.ConfigStats`, best median
      first, and None; or ``([], why)`` when both attempts raised.
    """
    from tfinput.measure import compare

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
        try:
            result = compare.measure(
                how.target,
                configs,
                step=how.step,
                baseline="autotune",
                progress=on_window,
                measurement=how.measurement(),
            )
        except Exception as e:  # a transient step error, out of memory...
            error = explain_failure(how.target, e)
            _note(notes, f"confirmation attempt {attempt} of 2 failed: {error}")
            continue
        return sorted(result.results, key=lambda c: c.median, reverse=True), None
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
    again, error = confirm(
        dataclasses.replace(how, windows=rounds), configs, progress=progress, notes=notes
    )
    if not again:
        _note(notes, f"the longer confirmation failed ({error}): the first one stands")
        return list(confirmed)
    _note(
        notes,
        f"confirmation: {best.name} measured {best.ratio:.2f}x autotune, rounds "
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
    again, error = confirm(how, configs, progress=progress, notes=notes)
    if not again:
        _note(notes, f"the winner with {groups} reverted was not confirmed ({error}): kept {name}")
        return name, config, list(confirmed), tuple(contributions)
    best = again[0]
    by_name = {c.name: c for c in again}
    if best.name == reverted_name:
        kept, other = by_name[reverted_name], by_name[name]
        _note(
            notes,
            f"{groups}: slower in every round of the gain breakdown, so reverted to "
            f"autotune's values; the reverted config measured {kept.median:,.0f} examples/s "
            f"against the search's winner's {other.median:,.0f} in the same windows, and "
            "replaces it",
        )
    flags = {c.group: best.name == reverted_name for c in hurting}
    updated = tuple(
        dataclasses.replace(c, reverted=flags[c.group]) if c.group in flags else c
        for c in contributions
    )
    return best.name, best.config, again, updated


def verdicts(
    how: Remeasure,
    confirmed: Sequence[ConfigStats],
    best_config: PipelineConfig,
    *,
    notes: list[str],
) -> dict[str, object]:
    """The `TuneResult` verdict fields: beats autotune, input wait (measured, or from
    the step bound when the step owns the loop) and their sentences."""
    from tuners._advice import beats_autotune, input_verdict, step_bound_stats

    beats, beats_text = beats_autotune(confirmed)
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
        else:
            try:
                bound_stats = step_bound_stats(
                    how.target, best_config, how.step, measurement=how.measurement()
                )
            except Exception as e:
                _note(notes, f"step bound not measured: {explain_failure(how.target, e)}")
            else:
                bound = bound_stats.median
            if bound:
                wait, source = max(0.0, 1.0 - winner.median / bound), "step bound"
                input_bound, input_text = input_verdict(
                    fed=[w.examples_per_s for w in winner.windows],
                    bound=[w.examples_per_s for w in bound_stats.windows],
                    input_only=input_only,
                )
    return {
        "beats_autotune": beats,
        "input_wait": wait,
        "input_wait_source": source,
        "input_bound": input_bound,
        "step_bound": bound,
        "verdicts": (beats_text, input_text),
    }


def gain_by_knob(
    how: Remeasure,
    best_config: PipelineConfig,
    autotune: PipelineConfig,
    *,
    progress: Progress | None,
    notes: list[str],
) -> tuple[KnobContribution, ...]:
    """`tuners._advice.knob_breakdown` of the winner; empty, with a note, if it raises."""
    from tuners._advice import knob_breakdown

    if progress is not None:
        progress("breakdown", {"windows": how.windows})
    try:
        return knob_breakdown(
            how.target, best_config, autotune, step=how.step, measurement=how.measurement()
        )
    except Exception as e:  # the breakdown is extra: never lose the result for it
        _note(notes, f"gain by knob not measured: {explain_failure(how.target, e)}")
        return ()


def winner_roofline(how: Remeasure, best_config: PipelineConfig, *, notes: list[str]) -> Any | None:
    """A short `tfinput.measure.roofline` with the winner's serial stage (``winner``), read
    by the format advice and `serial_sentence`; None, with a note, if it raises."""
    from tuners._columnar_advice import quick_roofline

    try:
        return quick_roofline(
            how.target.pipeline,
            batch_size=best_config.batch_size,
            cpu_count=how.cpu_count,
            configs={"winner": best_config},
        )
    except Exception as e:
        _note(notes, f"roofline not measured: {explain_failure(how.target, e)}")
        return None


def serial_sentence(roofline: Any | None) -> str | None:
    """The advice when the winner's serial stage is its bound (one thread hands over
    every element crossing the consumer side; `tfinput.measure.roofline.serial_advice`), else
    None."""
    if roofline is None:
        return None
    from tfinput.measure.roofline import serial_advice

    stage = next((s for s in roofline.serial if s.config == "winner"), None)
    prediction = roofline.predict("winner")
    if stage is None or prediction.limited_by != "serial":
        return None
    return (
        f"{serial_advice(stage)} (roofline: the winner can reach about "
        f"{prediction.bound:,.0f} examples/s here; its parallel stages alone "
        f"{prediction.parallel:,.0f})"
    )


def winner_format_advice(
    how: Remeasure,
    best_config: PipelineConfig,
    *,
    schema_path: str | None,
    progress: Progress | None,
    notes: list[str],
    roofline: Any | None = None,
) -> FormatAdvice | None:
    """`tuners._advice.format_advice` for the winner (reading ``roofline`` when given);
    None, with a note, if it raises."""
    from tuners._advice import format_advice

    if progress is not None:
        progress("format_advice", {})
    try:
        return format_advice(
            how.target.pipeline,
            best_config,
            schema_path=schema_path,
            measurement=MeasureOptions(cpu_count=how.cpu_count),
            roofline_result=roofline,
        )
    except Exception as e:
        _note(notes, f"format advice not measured: {explain_failure(how.target, e)}")
        return None


def advice_sentences(
    format_result: FormatAdvice | None,
    *,
    input_bound: bool | None,
    best_config: PipelineConfig,
    base: PipelineConfig,
    serial: str | None = None,
) -> list[str]:
    """`TuneResult.advice`: the serial stage when it bounds the winner
    (`serial_sentence`), the format advice, and learning-rate scaling when the batch
    size changed."""
    advice = [serial] if serial else []
    if format_result is not None:
        advice.append(format_result.sentence())
        if input_bound is False:
            advice.append(
                "the step is not input-bound, so a faster format will not speed up training "
                "on this host (it may on a faster accelerator)"
            )
    if best_config.batch_size != base.batch_size:
        k = best_config.batch_size / base.batch_size
        advice.append(
            f"The batch size changed from {base.batch_size} to {best_config.batch_size}: scale "
            f"the learning rate linearly (x{k:g}) and warm it up over the first epochs "
            "(Goyal et al., 2017), and check the model's quality, not only its speed."
        )
    return advice


#: The training loop's share of a batch's time spent waiting for the SparseCore feed from
#: which the feed is said to bound the step (xprof calls a run input-bound above 10%).
FEED_BOUND_SHARE = 0.10


def feed_sentence(
    step: Step, best_config: PipelineConfig, confirmed: Sequence[ConfigStats]
) -> str | None:
    """Advice when a SparseCore feed (`tfinput.sparsecore.sparsecore_step`) bounds the
    winner: over the measurements with the winner's feed knobs, the training loop waited
    at least `FEED_BOUND_SHARE` of the winner's time per batch for preprocessed batches.
    None for other steps, a winner that preprocesses on the training thread
    (``sparsecore_workers=0``) or one measured without its feed."""
    if not step.feeds_sparsecore or best_config.sparsecore_workers == 0:
        return None
    fed = step.prepare(best_config).details.get("sparsecore_feed") or {}
    batches = int(fed.get("batches") or 0)
    stats = next((c for c in confirmed if c.config == best_config), None)
    if not batches or stats is None or stats.median <= 0:
        return None
    per_batch_s = best_config.batch_size / stats.median
    wait_s = float(fed["wait_seconds"]) / batches
    if wait_s < FEED_BOUND_SHARE * per_batch_s:
        return None
    workers = best_config.sparsecore_workers
    return (
        f"The SparseCore feed bounds the step: the training loop waited {wait_s * 1e3:.1f} ms "
        f"of each {per_batch_s * 1e3:.1f} ms batch ({wait_s / per_batch_s:.0%}) for "
        f"preprocessed batches, with {workers} worker{'s' if workers != 1 else ''} taking "
        f"{float(fed['preprocess_seconds']) / batches * 1e3:.1f} ms per batch. More workers "
        "(sparsecore_workers, on cores tf.data leaves free), worker processes "
        "(sparsecore_step(..., processes=True)) or limits measured from the data (tfinput "
        "schema sparsecore: smaller buffers) raise it; so does a host with more cores."
    )


def service_sizing(
    target: Target,
    best_config: PipelineConfig,
    confirmed: Sequence[ConfigStats],
    target_rate: float | None,
) -> tuple[str, ...]:
    """For a pipeline read through tf.data service: the rate per worker the winner
    measured and, with ``target_rate``, the workers that rate implies for it
    (`tfinput.service.workers_needed`). Empty for a local pipeline."""
    from tfinput.service import workers_needed

    service = target.service
    if service is None or not confirmed:
        return ()
    winner = next((c for c in confirmed if c.config == best_config), confirmed[0])
    workers = service.worker_count(best_config)
    if not workers:
        return (
            f"tf.data service: {winner.median:,.0f} examples/s; pass the address's worker "
            "count (with_service(..., workers=N)) for a per-worker rate",
        )
    per_worker = winner.median / workers
    text = (
        f"tf.data service: {winner.median:,.0f} examples/s from {workers} worker(s), "
        f"{per_worker:,.0f} per worker"
    )
    if target_rate:
        need = workers_needed(winner.median, workers, target_rate)
        text += (
            f"; {target_rate:,.0f} examples/s needs about {need} worker(s) like these "
            "(linear per worker: more where the dispatcher or network binds)"
        )
    return (text,)
