"""The tuner's pruner: stop a trial only when it is a clear loser, given the noise.

A trial reports examples/s after each window. At window ``i`` it is pruned when its
*best* window so far is below the 25th percentile (the bottom quarter) of the other
finished trials at window ``i`` by more than the window-to-window spread measured in
this study:

    best_so_far * (1 + margin) < p25,  margin = max(min_margin, median relative spread)

where a trial's relative spread is ``(max - min) / median`` of its windows (noise is
multiplicative, so even a very noisy study prunes a config ten times slower). Runs of the
same config vary by 10-20% on a busy host; a trial within that band of the bottom
quarter may be as good as the configs above it, so it is measured to the end (pruned
trials are never measured again). Optuna's ``PercentilePruner(25.0)`` keeps the *top*
quarter when maximizing, which prunes three trials in four, near-ties included.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

import numpy as np
import optuna

if TYPE_CHECKING:  # pragma: no cover
    import optuna

__all__ = ["NoiseAwarePruner"]


class NoiseAwarePruner(optuna.pruners.BasePruner):
    """Prune the bottom ``quantile`` of trials, beyond the measured noise (maximize).

    Args:
      quantile: Fraction of trials that may be pruned: a trial is compared with this
        quantile of the others (0.25: the bottom quarter). Higher prunes more and
        saves time, at the risk of losing a config whose first windows were unlucky.
      n_startup_trials: Finished trials needed before any pruning: fewer give a
        percentile and a spread that mean little.
      n_warmup_steps: Windows a trial always gets before it can be pruned.
      min_margin: Least relative margin below the percentile (0.05: 5%), used when the
        trials measured so far look quieter than that. Lower prunes near-ties.
    """

    def __init__(
        self,
        *,
        quantile: float = 0.25,
        n_startup_trials: int = 4,
        n_warmup_steps: int = 1,
        min_margin: float = 0.05,
    ) -> None:
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {quantile}")
        if min_margin < 0:
            raise ValueError(f"min_margin must be >= 0, got {min_margin}")
        self.quantile = quantile
        self.n_startup_trials = n_startup_trials
        self.n_warmup_steps = n_warmup_steps
        self.min_margin = min_margin

    def describe(self) -> str:
        return (
            f"prune a trial whose best window so far is below the {self.quantile:.0%} "
            "quantile of the other finished trials at that window by more than the "
            f"study's median window-to-window spread (at least {self.min_margin:.0%}); "
            f"after {self.n_startup_trials} finished trials and {self.n_warmup_steps} "
            "window(s)"
        )

    def threshold(self, study: optuna.Study, step: int) -> tuple[float, float] | None:
        """``(cut, margin)`` at window ``step``, or None while too few trials finished."""
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        finished = study.get_trials(deepcopy=False, states=states)
        at_step = [
            max(v for s, v in t.intermediate_values.items() if s <= step)
            for t in finished
            if step in t.intermediate_values
        ]
        if len(at_step) < max(self.n_startup_trials, 1):
            return None
        spreads = [s for s in (_relative_spread(t) for t in finished) if s is not None]
        margin = max(self.min_margin, statistics.median(spreads) if spreads else 0.0)
        return float(np.percentile(at_step, 100 * self.quantile)), margin

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step < self.n_warmup_steps:
            return False
        if study.direction != optuna.study.StudyDirection.MAXIMIZE:
            raise ValueError("NoiseAwarePruner supports maximized objectives only")
        found = self.threshold(study, step)
        if found is None:
            return False
        cut, margin = found
        best = max(v for s, v in trial.intermediate_values.items() if s <= step)
        return best * (1.0 + margin) < cut


def _relative_spread(trial: optuna.trial.FrozenTrial) -> float | None:
    rates = trial.user_attrs.get("window_rates") or list(trial.intermediate_values.values())
    rates = [r for r in rates if r is not None and r > 0]
    if len(rates) < 2:
        return None
    return (max(rates) - min(rates)) / statistics.median(rates)
