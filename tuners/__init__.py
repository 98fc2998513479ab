"""tuners: Optuna search of tf.data settings against a real training step.

    import tuners
    result = tuners.tune(pipeline, step=tfinput.steps.simulated_step(0.02), n_trials=30)
    result.best_config.to_json("best.json", **result.record())

The result says whether the winner beats autotune beyond the noise, whether the step is
input-bound at all, the gain by knob, and (tf.Example data bound by parsing) what
converting to columnar records would give: see docs/tuning.md.

``import tuners`` is light: Optuna and TensorFlow load when a study runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
    "tune": "tuners.study",
    "TuneOptions": "tuners.options",
    "SearchOptions": "tuners.options",
    "StudyOptions": "tuners.options",
    "MeasureOptions": "tuners.options",
    "ConfirmOptions": "tuners.options",
    "TuneResult": "tuners.result",
    "resume_record": "tuners.result",
    "make_storage": "tuners.storage",
    "TrialsFailedError": "tuners.result",
    "NoiseAwarePruner": "tuners.pruning",
    "SearchSpace": "tuners.space",
    "Measurement": "tuners.objective",
    "measure": "tuners.objective",
    "FormatAdvice": "tuners.columnar_advice",
    "KnobContribution": "tuners.advice",
    "format_advice": "tuners.columnar_advice",
    "knob_breakdown": "tuners.advice",
}

if TYPE_CHECKING:  # pragma: no cover
    from tuners.advice import KnobContribution, knob_breakdown
    from tuners.columnar_advice import FormatAdvice, format_advice
    from tuners.objective import Measurement, measure
    from tuners.options import (
        ConfirmOptions,
        MeasureOptions,
        SearchOptions,
        StudyOptions,
        TuneOptions,
    )
    from tuners.pruning import NoiseAwarePruner
    from tuners.result import TrialsFailedError, TuneResult, resume_record
    from tuners.space import SearchSpace
    from tuners.storage import make_storage
    from tuners.study import tune


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tuners' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
