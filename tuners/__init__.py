"""tuners: Optuna search of tf.data settings against a real training step.

    import tuners
    result = tuners.tune(pipeline, step=tfinput.steps.simulated_step(0.02), n_trials=30)
    result.best_config.to_json("best.json", **result.record())

The result says whether the winner beats autotune beyond the noise, whether the step is
input-bound at all, the gain by knob, and (tf.Example data bound by parsing) what
converting to columnar records would give: see docs/tuning.md.

``import tuners`` is light: Optuna and TensorFlow load when a study runs. The names
below are the public API (docs/api.md); the modules behind them are private
(``tuners._study``, ``tuners._cli``, ...). `MeasureOptions` is `tfinput.bench`'s.
"""

from typing import TYPE_CHECKING

__all__ = [
    "tune",
    "TuneOptions",
    "SearchOptions",
    "StudyOptions",
    "MeasureOptions",
    "ConfirmOptions",
    "TuneResult",
    "TrialsFailedError",
    "TuneInterrupted",
    "StudyLockedError",
    "resume_record",
    "SearchSpace",
    "make_storage",
    "NoiseAwarePruner",
    "FormatAdvice",
    "KnobContribution",
    "format_advice",
    "knob_breakdown",
]

if TYPE_CHECKING:  # pragma: no cover
    from tfinput._src.measurement.target import MeasureOptions as MeasureOptions
    from tuners._advice import KnobContribution as KnobContribution
    from tuners._advice import knob_breakdown as knob_breakdown
    from tuners._columnar_advice import FormatAdvice as FormatAdvice
    from tuners._columnar_advice import format_advice as format_advice
    from tuners._objective import NoiseAwarePruner as NoiseAwarePruner
    from tuners._options import ConfirmOptions as ConfirmOptions
    from tuners._options import SearchOptions as SearchOptions
    from tuners._options import StudyOptions as StudyOptions
    from tuners._options import TuneOptions as TuneOptions
    from tuners._result import StudyLockedError as StudyLockedError
    from tuners._result import TrialsFailedError as TrialsFailedError
    from tuners._result import TuneInterrupted as TuneInterrupted
    from tuners._result import TuneResult as TuneResult
    from tuners._result import resume_record as resume_record
    from tuners._space import SearchSpace as SearchSpace
    from tuners._storage import make_storage as make_storage
    from tuners._study import tune as tune


def __getattr__(name: str) -> object:
    # Each name imported from its module on first use (Optuna and TensorFlow load then),
    # by an import statement, which tests/test_layers.py sees.
    match name:
        case "tune":
            import tuners._study as module
        case "TuneOptions" | "SearchOptions" | "StudyOptions" | "ConfirmOptions":
            import tuners._options as module
        case "MeasureOptions":  # its home is tfinput.bench; the tuner takes it too
            import tfinput._src.measurement.target as module
        case (
            "TuneResult"
            | "resume_record"
            | "TrialsFailedError"
            | "TuneInterrupted"
            | "StudyLockedError"
        ):
            import tuners._result as module
        case "make_storage":
            import tuners._storage as module
        case "NoiseAwarePruner":
            import tuners._objective as module
        case "SearchSpace":
            import tuners._space as module
        case "FormatAdvice" | "format_advice":
            import tuners._columnar_advice as module
        case "KnobContribution" | "knob_breakdown":
            import tuners._advice as module
        case _:
            raise AttributeError(f"module 'tuners' has no attribute {name!r}")
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted(__all__)
