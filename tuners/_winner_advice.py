"""What the tuner says about its winner after the confirmation: a short roofline of its
serial stage, the columnar-format advice, and the advice sentences (the serial stage,
the input bound, the SparseCore feed, the tf.data service workers a target rate needs),
each measured only when it fits in what is left of the timeout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tfinput._src.measurement.target import MeasureOptions, Target
from tfinput.config import PipelineConfig
from tfinput.steps import Step
from tuners._confirm import Progress, Remeasure, note
from tuners._storage import explain_failure

if TYPE_CHECKING:
    from tfinput._src.measurement.compare import ConfigStats
    from tuners._columnar_advice import FormatAdvice

#: Fresh-iterator windows the roofline of the winner is estimated to take (two short
#: windows per stage), and the format advice (the conversion of a sample, then three
#: rounds of two configs), for the timeout: each runs only when its estimate fits.
ROOFLINE_WINDOWS = 8
FORMAT_ADVICE_WINDOWS = 12


def winner_roofline(
    how: Remeasure,
    best_config: PipelineConfig,
    *,
    notes: list[str],
    progress: Progress | None = None,
) -> Any | None:
    """A short `tfinput.bench.roofline` with the winner's serial stage (``winner``), read
    by the format advice and `serial_sentence`; None, with a note, if it raises or does
    not fit in the timeout."""
    from tuners._columnar_advice import quick_roofline

    if not how.fits(how.cost(ROOFLINE_WINDOWS, 1)):
        note(notes, how.budget.skipped("roofline", how.cost(ROOFLINE_WINDOWS, 1)))
        return None
    if progress is not None:
        progress("roofline", {})
    try:
        return quick_roofline(
            how.target.pipeline,
            batch_size=best_config.batch_size,
            cpu_count=how.cpu_count,
            configs={"winner": best_config},
        )
    except Exception as e:
        note(notes, f"roofline not measured: {explain_failure(how.target, e)}")
        return None


def serial_sentence(roofline: Any | None) -> str | None:
    """The advice when the winner's serial stage is its bound (one thread hands over
    every element crossing the consumer side; `tfinput.bench.serial_advice`), else
    None."""
    if roofline is None:
        return None
    from tfinput._src.measurement.roofline import serial_advice

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
    from tuners._columnar_advice import advice_for

    if not how.fits(how.cost(FORMAT_ADVICE_WINDOWS, 1)):
        note(notes, how.budget.skipped("format advice", how.cost(FORMAT_ADVICE_WINDOWS, 1)))
        return None
    if progress is not None:
        progress("format_advice", {})
    try:
        return advice_for(
            how.target,
            best_config,
            schema_path=schema_path,
            measurement=MeasureOptions(cpu_count=how.cpu_count),
            roofline_result=roofline,
        )
    except Exception as e:
        note(notes, f"format advice not measured: {explain_failure(how.target, e)}")
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
