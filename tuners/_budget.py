"""The run's time: the budget of trials and of the steps after the search within the
user's ``timeout``.

The ``timeout`` bounds the whole run (`Budget`): the search keeps the
time the confirmation needs, and the run ends within the timeout plus one window. A
window lasts at least ``window_seconds``, so a trial of ``windows`` windows lasts at
least ``windows * window_seconds``. When ``n_trials`` such trials do not fit in the
search's share, each trial gets fewer windows (`fit_budget`: never fewer than
`MIN_WINDOWS`, nor shorter ones: a short window is a noisy one); when even that does not
fit, the search stops early, and the result says so in a note (`stopped_by_timeout`).
The budget the user set is never exceeded, and never silently cut short.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tfinput._src.measurement.windows import WindowPlan

if TYPE_CHECKING:
    from tuners._objective import Measurement


#: The fewest windows a trial is cut to: a median of three still drops one outlier.
MIN_WINDOWS = 3


def fit_budget(
    plan: WindowPlan, *, n_trials: int, timeout: float | None
) -> tuple[WindowPlan, str | None]:
    """The trial plan that fits ``n_trials`` trials in ``timeout`` seconds (the search's
    share of the run's timeout: `Budget.search_share`), and the note that says what was
    changed (None when nothing was).

    Only a plan sized by time is changed (its windows' least length is known ahead).
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
        f"{per_window:g} s need {need:,.0f} s, more than the {timeout:,.0f} s of the "
        "timeout left to the search"
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


def least_trial_seconds(plan: WindowPlan) -> float:
    """The least seconds of timed windows a trial of ``plan`` measures when a timeout
    cuts its windows (`fit_budget`: `MIN_WINDOWS`, or fewer when the plan has fewer)."""
    return min(plan.windows, MIN_WINDOWS) * plan.window_seconds


class DeadlineReached(Exception):
    """Raised by a `Budget.guard` progress callback once the run's timeout has passed
    with windows still to measure: the measurement stops after the window that crossed
    it."""


class Budget:
    """The run's time: ``timeout`` seconds from `tuners.tune`'s call, on the
    measurement's clock (injectable, as every measurement's).

    Every stage runs inside it. The search keeps the time the steps after it need
    (`reserve`: the confirmation of the top configs and the gain by knob when they take
    at most `FULL_SHARE` of the timeout, else the confirmation of autotune and the
    search's best) and starts a trial only when the trial's estimate fits in what is
    left; a trial whose next window would not fit in the search's share stops after its
    current window. The confirmation drops its lesser candidates when it does not fit
    whole, and is left out (no verdict) when autotune and the winner do not fit in its
    rounds; it stops after the window that passes the timeout (then it is
    unconfirmed). The gain by knob, the step bound and the format advice run only when
    their estimate fits. So a run ends within the timeout plus one window: the window
    in progress when it passed, counted with what ran since the previous one (a fresh
    iterator's build and warm-up) and after it until the next (the iterator's deletion,
    which can stall TensorFlow for seconds); `longest_window_s`.

    The estimates come from what this run measured (each trial's windows, and its
    build and warm-up); before the first trial, from the plan's windows.

    Args:
      timeout: Seconds (None: no limit; the estimates are still kept).
      clock: The measurement clock.
      plan: The trials' `tfinput.bench.WindowPlan`.
    """

    def __init__(
        self, timeout: float | None, *, clock: Callable[[], float], plan: WindowPlan
    ) -> None:
        self.timeout = timeout
        self.clock = clock
        self.plan = plan
        self.started = clock()
        self._mark = self.started
        self.units: list[float] = []
        self.windows: list[float] = []
        self.overheads: list[float] = []
        self.trials: list[float] = []
        self.level = "full"
        self._after = (0, 0, 0)

    # ------------------------------------------------------------- the clock
    @property
    def limited(self) -> bool:
        """Whether there is a timeout."""
        return self.timeout is not None

    def elapsed(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        """Seconds left (infinite without a timeout)."""
        return math.inf if self.timeout is None else self.timeout - self.elapsed()

    def mark(self) -> None:
        """A measurement starts: its first window counts from here."""
        self._mark = self.clock()

    def window_done(self) -> float:
        """A window ended: it counts, with what ran since the previous mark; its
        seconds so counted."""
        now = self.clock()
        self.units.append(now - self._mark)
        self._mark = now
        return self.units[-1]

    def measurement_done(self) -> None:
        """A measurement ended: what ran after its last window (its iterator's deletion,
        which can stall: docs/tuning.md) counts with that window."""
        now = self.clock()
        if self.units:
            self.units[-1] += now - self._mark
        self._mark = now

    def guard(
        self, progress: Callable[[int, int, Any], None] | None = None
    ) -> Callable[[int, int, Any], None]:
        """A ``progress(done, total, window)`` callback for an interleaved measurement
        (`tfinput.bench.measure`) that counts each window and raises
        `DeadlineReached` once the timeout has passed with windows still to measure;
        ``progress`` is called first."""

        def check(done: int, total: int, window: Any) -> None:
            self.window_done()
            if progress is not None:
                progress(done, total, window)
            if done < total and self.left() < 0:
                raise DeadlineReached(
                    f"stopped at the timeout of {self.timeout:g} s after {done} of {total} windows"
                )

        return check

    # ------------------------------------------------------------ estimates
    def record(self, m: Measurement) -> None:
        """A trial's measurement: its windows, its build and warm-up, its length."""
        if m.rates:
            self.windows += [m.timed_seconds / len(m.rates)] * len(m.rates)
        self.overheads.append(max(0.0, m.seconds - m.timed_seconds))
        self.trials.append(m.seconds)

    def window_s(self) -> float:
        """A timed window: the median measured, else the plan's least length."""
        return statistics.median(self.windows) if self.windows else self.plan.window_seconds

    def fresh_window_s(self) -> float:
        """A window on a fresh iterator (the confirmation's): its build and warm-up,
        then the window."""
        return _typical(self.overheads, 0.0) + self.window_s()

    def trial_s(self) -> float:
        """A trial: the median measured, else the plan's windows."""
        return _typical(self.trials, self.plan.windows * self.window_s())

    #: How much longer than its estimate a measurement after the search is planned to
    #: take: a fresh iterator per window costs more than a trial's share of its build
    #: and warm-up (the deletion of the previous one, a busy host), and a confirmation
    #: cut at the timeout confirms nothing.
    MARGIN = 1.25

    def measuring_s(self, configs: int, rounds: int) -> float:
        """``configs`` measured interleaved in ``rounds`` rounds, a fresh iterator per
        window, with `MARGIN`."""
        return self.MARGIN * configs * rounds * self.fresh_window_s()

    # ------------------------------------------------- the steps after the search
    def settle(self, *, configs: int, rounds: int, breakdown_configs: int) -> str | None:
        """Before the search: what the steps after it measure, ``configs`` (autotune,
        the current config and the top candidates) confirmed in ``rounds`` rounds and
        the gain by knob (``breakdown_configs`` measured with the winner; 0: none), for
        the reserve the search keeps (`reserve`); the note when the timeout cannot hold
        even autotune and the search's best confirmed after one trial (then the search
        keeps nothing). None without a timeout, or when it holds them."""
        self._after = (configs, rounds, breakdown_configs)
        if self.timeout is None:
            return None
        trial = least_trial_seconds(self.plan)
        least = self.measuring_s(min(configs, 2), rounds)
        if self.left() - least >= trial:
            return None
        self.level = "none"
        return (
            f"budget: the timeout of {self.timeout:g} s leaves no time to confirm the "
            f"search's best against autotune ({rounds} rounds of 2 configs need about "
            f"{least:,.0f} s after a trial of about {trial:,.0f} s): the result "
            "is the search's best, not confirmed; raise --timeout to confirm it"
        )

    #: The largest share of the timeout the search keeps for every step after it (the
    #: confirmation of every candidate, the gain by knob); when they need more, it keeps
    #: what autotune and its best confirmed need, and the steps after it measure what
    #: fits then.
    FULL_SHARE = 0.25

    def reserve(self) -> float:
        """Seconds the search keeps for the steps after it, with the estimates as they
        are now: all of them when they take at most `FULL_SHARE` of the timeout (level
        ``full``), else the confirmation of autotune and the search's best (``least``);
        nothing when `settle` found no room for that (``none``)."""
        configs, rounds, breakdown = self._after
        if self.level == "none":
            return 0.0
        full = self.measuring_s(configs, rounds) + self.measuring_s(breakdown, rounds)
        if self.timeout is None or full <= self.FULL_SHARE * self.timeout:
            self.level = "full"
            return full
        self.level = "least"
        return self.measuring_s(min(configs, 2), rounds)

    def search_left(self) -> float:
        """Seconds left to the search (infinite without a timeout)."""
        return self.left() - self.reserve()

    def trial_fits(self) -> bool:
        """Whether one more trial fits in the search's share."""
        return self.search_left() >= self.trial_s()

    def search_share(self) -> float | None:
        """The search's seconds, from now (`fit_budget`'s timeout)."""
        return None if self.timeout is None else max(0.0, self.search_left())

    def fits(self, seconds: float) -> bool:
        """Whether ``seconds`` of work fit in what is left."""
        return seconds <= self.left()

    def skipped(self, what: str, seconds: float) -> str:
        """The note for a step left out because its ``seconds`` do not fit."""
        return (
            f"{what} not measured: it needs about {seconds:,.0f} s and {max(0.0, self.left()):,.0f} s "
            f"of the timeout of {self.timeout:g} s are left (raise --timeout)"
        )

    def to_dict(self) -> dict[str, object]:
        """The run's accounting (``result.json``'s ``budget``): the timeout, the time
        the run took, and its longest window (how far a run may pass the timeout)."""
        return {
            "timeout_s": self.timeout,
            "elapsed_s": round(self.elapsed(), 3),
            "longest_window_s": round(max(self.units, default=0.0), 3),
            "reserve": self.level if self.timeout is not None else None,
        }


def _typical(seconds: list[float], default: float) -> float:
    """The median of ``seconds`` less the first (the process's first measurement also
    pays the start of TensorFlow's runtime and the first tracing), or the first alone,
    or ``default`` when there is none."""
    if not seconds:
        return default
    return statistics.median(seconds[1:] or seconds)


def stopped_by_timeout(*, counted: int, n_trials: int, budget: Budget) -> str | None:
    """The note for a search that the timeout stopped before ``n_trials`` trials."""
    if budget.timeout is None or counted >= n_trials:
        return None
    kept = budget.reserve()
    keep = f", keeping about {kept:,.0f} s for the confirmation" if kept > 0 else ""
    return (
        f"the search stopped after {counted} of {n_trials} trials to end within the "
        f"timeout of {budget.timeout:g} s{keep}"
    )
