"""tuners: Optuna search of tf.data settings against a real training step.

    import tuners
    result = tuners.tune(pipeline, step=tfinput.steps.simulated_step(0.02), n_trials=30)
    result.best_config.to_json("best.json", **result.record())

The result says whether the winner beats autotune beyond the noise, whether the step is
input-bound at all, the gain by knob, and (tf.Example data bound by parsing) what
converting to columnar records would give: see docs/tuning.md.

``import tuners`` is light: Optuna and TensorFlow load when a study runs. The names
below are the public API (docs/api.md); the modules behind them are private
(``tuners._study``, ...), except `tuners.options` and `tuners.cli`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tfinput.deprecation import MovedModules

__all__ = [
    "tune",
    "TuneOptions",
    "SearchOptions",
    "StudyOptions",
    "MeasureOptions",
    "ConfirmOptions",
    "TuneResult",
    "TrialsFailedError",
    "resume_record",
    "SearchSpace",
    "Measurement",
    "measure",
    "make_storage",
    "NoiseAwarePruner",
    "FormatAdvice",
    "KnobContribution",
    "format_advice",
    "knob_breakdown",
]

_LAZY = {
    "tune": "tuners._study",
    "TuneOptions": "tuners.options",
    "SearchOptions": "tuners.options",
    "StudyOptions": "tuners.options",
    "MeasureOptions": "tuners.options",
    "ConfirmOptions": "tuners.options",
    "TuneResult": "tuners._result",
    "resume_record": "tuners._result",
    "make_storage": "tuners._storage",
    "TrialsFailedError": "tuners._result",
    "NoiseAwarePruner": "tuners._pruning",
    "SearchSpace": "tuners._space",
    "Measurement": "tuners._objective",
    "measure": "tuners._objective",
    "FormatAdvice": "tuners._columnar_advice",
    "KnobContribution": "tuners._advice",
    "format_advice": "tuners._columnar_advice",
    "knob_breakdown": "tuners._advice",
}

if TYPE_CHECKING:  # pragma: no cover
    from tuners._advice import KnobContribution, knob_breakdown
    from tuners._columnar_advice import FormatAdvice, format_advice
    from tuners._objective import Measurement, measure
    from tuners._pruning import NoiseAwarePruner
    from tuners._result import TrialsFailedError, TuneResult, resume_record
    from tuners._space import SearchSpace
    from tuners._storage import make_storage
    from tuners._study import tune
    from tuners.options import (
        ConfirmOptions,
        MeasureOptions,
        SearchOptions,
        StudyOptions,
        TuneOptions,
    )


#: Modules that became private (docs/api.md): their old names import, with a warning,
#: for one release.
_MOVED = (
    "advice",
    "columnar_advice",
    "confirm",
    "objective",
    "pruning",
    "report",
    "result",
    "space",
    "storage",
    "study",
    "trials",
    "workers",
)
MovedModules({f"tuners.{m}": f"tuners._{m}" for m in _MOVED}, public="tuners").install()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tuners' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
