"""`MeasureOptions`: how a measurement is taken, in one frozen object.

`tfinput.measure.compare.measure`, `tfinput.bench.roofline` (``measurement=``) and `tuners.tune`
(``TuneOptions.measurement``) take it. Each settles its window counts into a
`WindowPlan` once (`MeasureOptions.plan`, with its own default plan) and hands that plan
down.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tfinput._src.measurement.windows import Clock, WindowPlan

__all__ = ["MeasureOptions"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeasureOptions:
    """The window counts, the CPUs and the probes of a measurement.

    Attributes:
      warmup_batches, windows, window_batches: The `WindowPlan` (None: the measuring
        function's own plan, `BENCH_PLAN` for bench and `TUNER_PLAN` for the tuner).
      window_seconds: The least seconds of a window, its batches sized from the
        warm-up's rate (`WindowPlan.window_seconds`; 0: a fixed ``window_batches``).
        None: the plan's own target, except when ``window_batches`` is given alone,
        which asks for that fixed count.
      cpu_count: CPUs the numbers are normalized to and recorded with (None: the
        process's affinity mask).
      clock, cpu_clock, rss: Wall clock, process CPU seconds and resident memory
        probes (None: the real ones; tests pass fakes).
    """

    warmup_batches: int | None = None
    windows: int | None = None
    window_batches: int | None = None
    window_seconds: float | None = None
    cpu_count: int | None = None
    clock: Clock | None = None
    cpu_clock: Clock | None = None
    rss: Callable[[], int] | None = None

    def plan(self, default: WindowPlan, *, what: str) -> WindowPlan:
        """The window plan: the counts given here, the others ``default``'s.

        Raises:
          ConfigError: a bad count, as ``"{what}: windows must be an int >= 1, got 0"``,
            or a negative ``window_seconds``.
        """
        seconds = self.window_seconds
        if seconds is None:
            seconds = default.window_seconds if self.window_batches is None else 0.0
        return WindowPlan.checked(
            what,
            warmup_batches=_given(self.warmup_batches, default.warmup_batches),
            windows=_given(self.windows, default.windows),
            window_batches=_given(self.window_batches, default.window_batches),
            window_seconds=seconds,
        )

    def with_plan(self, plan: WindowPlan) -> MeasureOptions:
        """These options with every window count ``plan``'s: a plan settled by a caller,
        handed to a measurement whose own default plan is another."""
        return dataclasses.replace(
            self,
            warmup_batches=plan.warmup_batches,
            windows=plan.windows,
            window_batches=plan.window_batches,
            window_seconds=plan.window_seconds,
        )

    def clocks(self) -> dict[str, Clock]:
        """``clock`` and ``cpu_clock`` as keywords, only those given (so the
        measurement's own defaults apply to the others)."""
        given = {"clock": self.clock, "cpu_clock": self.cpu_clock}
        return {name: probe for name, probe in given.items() if probe is not None}


def _given(value: int | None, default: int) -> int:
    return default if value is None else value
