"""The search's budget: trials of time-sized windows within the user's ``timeout``.

A window lasts at least ``window_seconds``, so a trial of ``windows`` windows lasts at
least ``windows * window_seconds``. When ``n_trials`` such trials do not fit in the
``timeout``, each trial gets fewer windows (never fewer than `MIN_WINDOWS`, nor shorter
ones: a short window is a noisy one); when even that does not fit, the search stops at
the timeout, and the result says so in a note. The budget the user set is never
exceeded, and never silently cut short.
"""

from __future__ import annotations

import dataclasses
import math

from tfinput.measure.windows import WindowPlan

__all__ = ["MIN_WINDOWS", "fit_budget", "stopped_by_timeout"]

#: The fewest windows a trial is cut to: a median of three still drops one outlier.
MIN_WINDOWS = 3


def fit_budget(
    plan: WindowPlan, *, n_trials: int, timeout: float | None
) -> tuple[WindowPlan, str | None]:
    """The trial plan that fits ``n_trials`` trials in ``timeout`` seconds, and the
    note that says what was changed (None when nothing was).

    Only a plan sized by time is changed (its windows' least length is known ahead);
    the warm-up and the confirmation come on top and are not counted.
    """
    if timeout is None or not plan.timed:
        return plan, None
    per_window = plan.window_seconds
    need = n_trials * plan.windows * per_window
    if need <= timeout:
        return plan, None
    fit = math.floor(timeout / (n_trials * per_window))
    windows = min(plan.windows, max(MIN_WINDOWS, fit))
    head = (
        f"budget: {n_trials} trials of {plan.windows} windows of at least "
        f"{per_window:g} s need {need:,.0f} s, more than the timeout of {timeout:g} s"
    )
    if windows < plan.windows and fit >= MIN_WINDOWS:
        return dataclasses.replace(plan, windows=windows), (
            f"{head}: each trial measures {windows} windows instead"
        )
    fitted = dataclasses.replace(plan, windows=windows)
    trials = max(1, math.floor(timeout / (windows * per_window)))
    return fitted, (
        f"{head}: each trial measures {windows} windows and the search stops at the "
        f"timeout after about {trials} of {n_trials} trials (raise --timeout, or lower "
        "--n-trials or --window-seconds)"
    )


def stopped_by_timeout(*, counted: int, n_trials: int, timeout: float | None) -> str | None:
    """The note for a search that the timeout stopped before ``n_trials`` trials."""
    if timeout is None or counted >= n_trials:
        return None
    return (
        f"the search stopped at the timeout of {timeout:g} s after {counted} of {n_trials} trials"
    )
