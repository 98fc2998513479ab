"""What `tuners.tune` says while it runs.

The per-trial line (`trial_line`) is the one ``tfinput tune`` prints
when its progress bar is off; `TrialProgress` computes the time left, watches the first
trial (a note on a slow one), logs the lines on the ``tfinput.tuners`` logger (for
Python callers) and forwards every event to a display (the CLI's).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tfinput._src.measurement.windows import WindowPlan
from tfinput.steps import Step

log = logging.getLogger("tfinput.tuners")

#: A first trial still running after this many seconds says so, with its step time.
SLOW_FIRST_TRIAL_S = 60.0

STAGES = {
    "roofline": "measuring the roofline with the winner's serial stage (a few seconds)",
    "breakdown": "measuring the gain by knob (the winner with each knob group reverted)",
    "format_advice": "parse may bound tf.Example: converting a sample to columnar records",
}


def duration(seconds: float) -> str:
    """``42 s``, ``3.5 min``, ``1.2 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def trial_line(info: dict[str, object], total: int) -> str:
    """One finished trial: number, name, state, rate, trials done, the best so far, the
    time left (when known) and the config searched."""
    label = info.get("baseline") or f"trial {info['number']}"
    value = f"{info['value']:,.0f}/s" if info.get("value") else info.get("error") or ""
    if info.get("duplicate_of") is not None:
        value = f"not measured: trial {info['duplicate_of']}'s config"
    best = f"best {info['best']:,.0f}/s" if info.get("best") else ""
    parts = [f"trial {info['number']} [{label}] {info['state']} {value} ({info['done']}/{total})"]
    parts.append(best)
    if info.get("eta_s") is not None:
        parts.append(f"~{duration(info['eta_s'])} left")
    line = " ".join(p for p in parts if p)
    params = info.get("params")
    if params:
        line += ": " + " ".join(f"{k}={v}" for k, v in sorted(params.items()))
    return line


def stage_line(event: str, info: dict[str, object]) -> str | None:
    """The line for a stage after the search (confirmation, roofline, ...), or None."""
    if event == "confirm":
        return (
            f"confirming {', '.join(info['configs'])} ({info['windows']} windows each, interleaved)"
        )
    if event == "slow_trial":
        return str(info["message"])
    return STAGES.get(event)


class TrialProgress:
    """``progress(event, info)`` for `tuners.tune`: adds the time left to each ``trial``
    event, watches the first trial, logs the lines (``verbose``) and forwards every
    event to ``display``.

    Used as a context manager around the search: it starts the watchdog thread (which
    wakes every ``poll`` seconds) and, when ``verbose`` and the ``tfinput.tuners``
    logger would drop INFO records (no level set, no handler anywhere), sets the
    logger to INFO and gives it a stderr handler for the call.

    Args:
      total: The trials the search runs.
      plan: Each trial's windows, for the step count in the slow-trial note.
      display: Receives every event (the CLI's progress bar), ``slow_trial`` included.
      verbose: Log the lines on the ``tfinput.tuners`` logger.
      clock: Seconds (the measurement's clock).
      slow_after: Seconds after which a still running first trial says so.
      poll: Seconds between the watchdog's checks (default: a quarter of
        ``slow_after``, at most 5).
      left: Seconds left of the run's timeout (`Budget.left`): the time left said
        never goes past it.
    """

    def __init__(
        self,
        *,
        total: int,
        plan: WindowPlan,
        display: Callable[[str, dict[str, object]], None] | None = None,
        verbose: bool = True,
        clock: Callable[[], float] = time.perf_counter,
        slow_after: float = SLOW_FIRST_TRIAL_S,
        poll: float | None = None,
        left: Callable[[], float] | None = None,
    ) -> None:
        self.total = total
        self.left = left
        self.plan = plan
        self.display = display
        self.verbose = verbose
        self.clock = clock
        self.slow_after = slow_after
        self.poll = poll if poll is not None else min(5.0, slow_after / 4)
        self.started = clock()
        self.trials_seen = 0
        self.step_seconds: list[float] = []
        self.step_started: float | None = None
        self.warned = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._restore: Callable[[], None] = lambda: None

    # ---------------------------------------------------------- the step
    def watch(self, step: Any) -> Step:
        """``step`` (a `Step` or callable) with each call timed, prepared steps too."""
        step = Step.of(step)
        fn = step.fn

        def timed(batch: Any) -> Any:
            self.step_started = self.clock()
            try:
                return fn(batch)
            finally:
                self.step_seconds.append(self.clock() - self.step_started)
                self.step_started = None
                self.check()

        prepare = step.prepare_fn
        return dataclasses.replace(
            step,
            fn=timed,
            prepare_fn=None if prepare is None else (lambda config: self.watch(prepare(config))),
        )

    # ---------------------------------------------------------- the events
    def __call__(self, event: str, info: dict[str, object]) -> None:
        if event == "trial":
            self.trials_seen += 1
            self._stop.set()
            left = max(self.total - info["done"], 0)
            per_trial = (self.clock() - self.started) / self.trials_seen
            eta = per_trial * left if left else None
            if eta is not None and self.left is not None:
                eta = max(0.0, min(eta, self.left()))
            info = {**info, "eta_s": eta}
            if self.verbose:
                log.info("%s", trial_line(info, self.total))
        elif self.verbose and (line := stage_line(event, info)) is not None:
            log.info("%s", line)
        if self.display is not None:
            self.display(event, info)

    def check(self) -> None:
        """Say once, while the first trial runs, that it has run past ``slow_after``."""
        if self.trials_seen or self.warned:
            return
        elapsed = self.clock() - self.started
        if elapsed < self.slow_after:
            return
        with self._lock:
            if self.warned:
                return
            self.warned = True
        message = self.slow_message(elapsed)
        if self.verbose:
            log.warning("%s", message)
        if self.display is not None:
            self.display("slow_trial", {"message": message, "elapsed_s": elapsed})

    def slow_message(self, elapsed: float) -> str:
        """What the slow-first-trial note says: the step time, the trial's and the
        search's expected length, and what makes it faster."""
        head = f"trial 0 still running after {duration(elapsed)}"
        done = sorted(self.step_seconds)
        if not done:
            running = (
                "" if self.step_started is None else " (tracing and compiling, or a slow step)"
            )
            return f"{head}: its first step has not returned yet{running}"
        per_step = done[len(done) // 2]
        per_window = self.plan.window_batches
        if self.plan.timed and per_step > 0:
            per_window = max(per_window, math.ceil(self.plan.window_seconds / per_step))
        steps = self.plan.warmup_batches + self.plan.windows * per_window
        return (
            f"{head}: each step takes ~{per_step:.2g} s, so a trial of {steps} steps "
            f"({self.plan.warmup_batches} warm-up + {self.plan.windows} windows of "
            f"{per_window}) takes ~{duration(per_step * steps)} and "
            f"{self.total} trials ~{duration(per_step * steps * self.total)} (plus the "
            "confirmation). Fewer windows/window_batches or n_trials, or a cheaper step, "
            "finish sooner"
        )

    # ---------------------------------------------------------- the watchdog
    def __enter__(self) -> TrialProgress:
        self.started = self.clock()
        if self.verbose:
            self._restore = _show_info_records()
        self._thread = threading.Thread(target=self._watch, name="tune-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._restore()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll):
            self.check()
            if self.warned:
                return


def _show_info_records() -> Callable[[], None]:
    """Make ``tfinput.tuners``'s INFO records reach stderr when nothing is configured:
    the logger's level INFO if neither it nor ``tfinput`` has one, a stderr handler if no logger up the tree has
    one. Returns what undoes it."""
    undo: list[Callable[[], None]] = []
    if log.level == logging.NOTSET and logging.getLogger("tfinput").level == logging.NOTSET:
        log.setLevel(logging.INFO)
        undo.append(lambda: log.setLevel(logging.NOTSET))
    if not log.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("tune: %(message)s"))
        log.addHandler(handler)
        undo.append(lambda: log.removeHandler(handler))

    def restore() -> None:
        for f in reversed(undo):
            f()

    return restore
