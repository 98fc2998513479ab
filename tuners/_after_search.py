"""The steps after `tuners.tune`'s search, within what is left of the timeout: the top
configs confirmed side by side against autotune, the winner picked, the gain by knob,
the verdicts, and the advice (`confirm_and_advise`: a `tuners._confirm.Confirmation`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tfinput.config import PipelineConfig
from tuners._confirm import (
    Confirmation,
    Remeasure,
    confirm,
    confirm_longer,
    confirmation_configs,
    gain_by_knob,
    note,
    pick_winner,
    revert_hurting_groups,
    verdicts,
)
from tuners._space import pipeline_key
from tuners._trials import top_configs
from tuners._winner_advice import (
    advice_sentences,
    feed_sentence,
    serial_sentence,
    service_sizing,
    winner_format_advice,
    winner_roofline,
)

if TYPE_CHECKING:  # pragma: no cover
    import optuna

    from tuners._options import ConfirmOptions
    from tuners._search import Tuning


def _format_advice(
    run: Tuning,
    how: Remeasure,
    best_config: PipelineConfig,
    *,
    advise: bool,
    schema_path: str | None,
    notes: list[str],
) -> tuple[Any, str | None]:
    """``(format advice, serial-stage sentence)`` for tf.Example TFRecord data (a short
    roofline of the winner, then the columnar sample measured side by side); ``(None,
    None)`` for other data or when not asked."""
    source = run.target.source
    if not advise or source is None or source.kind != "tfrecord":
        return None, None
    roofline = winner_roofline(how, best_config, notes=notes, progress=run.progress)
    advice = winner_format_advice(
        how,
        best_config,
        schema_path=schema_path,
        progress=run.progress,
        notes=notes,
        roofline=roofline,
    )
    return advice, serial_sentence(roofline)


def confirm_and_advise(
    study: optuna.Study, run: Tuning, options: ConfirmOptions, *, notes: list[str]
) -> Confirmation:
    """Confirm the search's top configs, then the verdicts, the gain by knob and the
    format advice (`tuners._confirm`), within what is left of the timeout: the
    `TuneResult` fields they give, ``seconds`` (without the search's) included."""
    how = run.remeasure(options.confirm_windows)
    progress, autotune = run.progress, run.baselines["autotune"]
    elapsed = run.budget.elapsed
    t1 = elapsed()
    best_trial, confirmed, confirmation_error = _confirm_candidates(
        study, run, how, options, notes=notes
    )
    confirm_seconds = elapsed() - t1
    best_name, best_config = pick_winner(confirmed, best_trial, autotune)
    t2 = elapsed()
    contributions: tuple[Any, ...] = ()
    if options.breakdown and confirmed and best_name != "autotune":
        contributions = gain_by_knob(how, best_config, autotune, progress=progress, notes=notes)
        # A group measured slower in every round is reverted, and the reverted config
        # confirmed against the winner: the one measured best is the winner.
        best_name, best_config, confirmed, contributions = revert_hurting_groups(
            how,
            (best_name, best_config),
            autotune,
            confirmed,
            contributions,
            progress=progress,
            notes=notes,
        )
    t3 = elapsed()
    verdict = verdicts(how, confirmed, best_config, notes=notes, unconfirmed=confirmation_error)
    if verdict.beats_autotune is False:
        # "Keep autotune": the saved config is the verdict; the config measured best
        # stays first in ``confirmed`` with its ratio and range.
        best_name, best_config = "autotune", autotune
    t_verdicts = elapsed()
    format_result, serial = _format_advice(
        run,
        how,
        best_config,
        advise=options.advise_format,
        schema_path=options.schema_path,
        notes=notes,
    )
    t4 = elapsed()
    return Confirmation(
        best_config=best_config,
        best_name=best_name,
        confirmed=tuple(confirmed),
        seconds={
            "confirm": round(confirm_seconds, 1),
            "verdicts": round(t_verdicts - t3, 1),
            "breakdown": round(t3 - t2, 1),
            "format_advice": round(t4 - t_verdicts, 1),
        },
        advice=(
            *advice_sentences(
                format_result,
                input_bound=verdict.input_bound,
                best_config=best_config,
                base=run.base,
                serial=serial,
            ),
            *service_sizing(run.target, best_config, confirmed, options.target_rate),
            *filter(None, [feed_sentence(run.step, best_config, confirmed)]),
        ),
        confirmation_error=confirmation_error,
        breakdown=contributions,
        format_advice=format_result,
        beats_autotune=verdict.beats_autotune,
        input_wait=verdict.input_wait,
        input_wait_source=verdict.input_wait_source,
        input_bound=verdict.input_bound,
        step_bound=verdict.step_bound,
        verdicts=verdict.sentences,
    )


def _confirm_candidates(
    study: optuna.Study,
    run: Tuning,
    how: Remeasure,
    options: ConfirmOptions,
    *,
    notes: list[str],
) -> tuple[Any, list[Any], str | None]:
    """``(the search's best, the configs confirmed, why none was)``: the search's best
    (autotune included: the result when nothing is confirmed), and the candidates
    confirmed against autotune: the best configs building another pipeline than
    autotune's and the current config's."""
    autotune = run.baselines["autotune"]

    def key(config: PipelineConfig) -> str:
        return pipeline_key(config.to_dict(), layout=run.target.layout)

    best_trial = top_configs(study, 1, key=key)
    others = [c for c in (autotune, run.current) if c is not None]
    candidates = top_configs(study, options.confirm_top, key=key, exclude=others)
    configs = confirmation_configs(autotune, run.current, candidates)
    if len(configs) > 1:
        confirmed, error = confirm(how, configs, progress=run.progress, notes=notes)
        confirmed = confirm_longer(how, confirmed, progress=run.progress, notes=notes)
        return best_trial, confirmed, error
    # nothing but autotune completed: there is nothing to compare it with
    error = (
        "autotune is the only config the search completed, so there is nothing to compare it with"
    )
    note(notes, f"the confirmation did not run: {error}")
    return best_trial, [], error
