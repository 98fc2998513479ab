"""Measurement windows: the plan (`WindowPlan`), one timed window, and its variants.

A *window* is consecutive batches timed together, after ``warmup_batches`` batches
that are not timed. A plan with a ``window_seconds`` target sizes each window by time:
its batches are the target times the warm-up's rate (at least ``window_batches``), and
a window that is still shorter than the target goes on until it is not. A plan with
no target (``window_seconds=0``) times ``window_batches`` batches per window. `measure_window` times one window of an
already-started iterator and is all the timing logic; `run_window` adds a fresh
iterator and the warm-up (``tfinput bench``, the roofline); `consecutive_windows`
times several windows of one iterator after one warm-up (the tuner's trial, the steps
that own the loop); `interleave` runs several configs' windows in turns, round by round.
`WindowPlan` is the one object that says how many of each.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from tfinput._src.core.errors import ConfigError, DataError
from tfinput._src.measurement.probes import current_rss_bytes, process_cpu_seconds

Clock = Callable[[], float]
Progress = Callable[[int, int, "Window"], None]

#: Fields of `WindowPlan` with their least value, in the order they are checked.
_MINIMUMS = (("windows", 1), ("window_batches", 1), ("warmup_batches", 0))

#: The least seconds of a tuner or bench window (``window_seconds``): the shortest
#: length at which repeated trials of one config stopped spreading less on the 2-core
#: development host (benchmarks/window_length.py, RESULTS.md "How long a tuner window
#: must be"); longer windows cost time without a smaller spread there.
DEFAULT_WINDOW_SECONDS = 0.5


def _is_seconds(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and value >= 0
        and value == value
        and value != float("inf")
    )


def _is_count(value: Any, minimum: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= minimum


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowPlan:
    """How a measurement is cut into windows (shared by bench, tuner and profiler).

    The same numbers drive ``tfinput bench`` (`tfinput.bench.measure`), the
    tuner's trial (`tuners._objective.measure`, `tuners.tune`), the roofline stages and the
    profiler's capture (warm-up steps, then one window of profiled steps). The
    defaults differ only where the measurement differs (see the ``*_PLAN`` constants):

    - `TUNER_PLAN` (5 / 5 windows of at least `DEFAULT_WINDOW_SECONDS` and 20
      batches): one fresh iterator per trial, then all
      windows back to back, so batches buffered during the warm-up can flatter only
      the first window, and the objective is the median over windows; a short
      warm-up keeps trials cheap.
    - `BENCH_PLAN` (8 / 5 windows, timed as the tuner's): a fresh iterator for *every* window, so buffers
      filled while the consumer waited for the first batch would flatter every window
      of a parallel config; the warm-up must cover ``map_parallelism + prefetch``.
    - `ROOFLINE_PLAN` (2 / 3 x 10): each stage runs on one thread with no buffers to
      fill; two batches open the files, and short windows keep the extra run brief.
    - `CAPTURE_PLAN` (5 / 1 x 10): the profiler's warm-up steps (function tracing,
      file opening) and one window of profiled steps; more steps make larger traces.

    Attributes:
      warmup_batches: Untimed batches before the first window (thread start, file
        opening, buffers filling). Too few flatter parallel configs; too many only
        cost time.
      windows: Timed windows. More windows narrow the spread; five is the least that
        makes a median meaningful on a noisy machine.
      window_batches: Batches per window without a time target; with one, the least
        batches per window.
      window_seconds: The least seconds of a window (0: no target, ``window_batches``
        per window). With a target each window's batches come from the warm-up's rate
        (`batches_for`), and a window shorter than the target goes on until it is not:
        a fast pipeline gets as long a window as a slow one, so start-up effects and
        the scheduler's jitter weigh the same on both.

    Raises:
      ConfigError: a count is not an int, or below its least value (``windows`` and
        ``window_batches`` 1, ``warmup_batches`` 0).
    """

    warmup_batches: int = 5
    windows: int = 5
    window_batches: int = 20

    window_seconds: float = 0.0

    def __post_init__(self) -> None:
        for name, minimum in _MINIMUMS:
            value = getattr(self, name)
            if not _is_count(value, minimum):
                raise ConfigError(f"WindowPlan.{name}: expected an int >= {minimum}, got {value!r}")
        if not _is_seconds(self.window_seconds):
            raise ConfigError(
                f"WindowPlan.window_seconds: expected a finite number >= 0, "
                f"got {self.window_seconds!r}"
            )

    @classmethod
    def checked(
        cls,
        what: str,
        *,
        warmup_batches: int,
        windows: int,
        window_batches: int,
        window_seconds: float = 0.0,
    ) -> WindowPlan:
        """A plan whose bad count raises ``"{what}: {name} must be an int >= {minimum},
        got {value!r}"`` (the message of ``tfinput bench``).

        Raises:
          ConfigError: a bad count, named as above, or a ``window_seconds`` that is
            not a finite number >= 0.
        """
        given = {
            "warmup_batches": warmup_batches,
            "windows": windows,
            "window_batches": window_batches,
        }
        for name, minimum in _MINIMUMS:
            if not _is_count(given[name], minimum):
                raise ConfigError(
                    f"{what}: {name} must be an int >= {minimum}, got {given[name]!r}"
                )
        if not _is_seconds(window_seconds):
            raise ConfigError(
                f"{what}: window_seconds must be a finite number >= 0, got {window_seconds!r}"
            )
        return cls(**given, window_seconds=window_seconds)

    @property
    def timed(self) -> bool:
        """Whether windows are sized by time (a ``window_seconds`` target)."""
        return self.window_seconds > 0

    def batches_for(self, warm: Window | None) -> int:
        """Batches per window: ``window_batches`` without a target; with one, the
        target times the warm-up's rate (its first batch, which starts the pipeline,
        left out), never fewer than ``window_batches``."""
        if not self.timed or warm is None or not warm.batch_seconds:
            return self.window_batches
        steady = warm.batch_seconds[1:] or warm.batch_seconds
        seconds = sum(steady)
        if seconds <= 0:
            return self.window_batches
        rate = len(steady) / seconds
        # A hair under the product first: float sums of the intervals overshoot.
        return max(self.window_batches, math.ceil(self.window_seconds * rate * (1 - 1e-9)))

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)


#: `tuners._objective.measure` and `tuners.tune` (see `WindowPlan`).
TUNER_PLAN = WindowPlan(window_seconds=DEFAULT_WINDOW_SECONDS)
#: `tfinput.bench.measure` and ``tfinput bench``.
BENCH_PLAN = WindowPlan(warmup_batches=8, window_seconds=DEFAULT_WINDOW_SECONDS)
#: `tfinput.bench.roofline`, per stage.
ROOFLINE_PLAN = WindowPlan(warmup_batches=2, windows=3, window_batches=10)
#: `profiles._capture`: warm-up steps, then one window of profiled steps.
CAPTURE_PLAN = WindowPlan(warmup_batches=5, windows=1, window_batches=10)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Window:
    """One timed window of consecutive batches.

    Attributes:
      name: Config (or stage) name.
      round: Round number: window ``i`` of every config belongs to round ``i``.
      batches: Batches consumed.
      examples: Examples in those batches.
      seconds: Wall time of the window.
      cpu_seconds: Process CPU time (all threads) during the window.
      batch_seconds: Time between consecutive batches, step included.
      wait_seconds: Time spent waiting for the next batch (input stall); None when
        the step owns the loop and hides it (``model.fit``).
      peak_rss_bytes: Highest resident memory sampled during the window.
    """

    name: str = ""
    round: int = 0
    batches: int
    examples: int
    seconds: float
    cpu_seconds: float
    batch_seconds: tuple[float, ...]
    wait_seconds: float | None
    peak_rss_bytes: int = 0

    @property
    def examples_per_s(self) -> float:
        """Examples per wall second (inf for a window that took no time)."""
        return self.examples / self.seconds if self.seconds > 0 else float("inf")

    @property
    def cores_busy(self) -> float:
        """Process CPU-seconds per wall second."""
        return self.cpu_seconds / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (the ``windows`` entries of the ``tfinput.bench/1`` format)."""
        return {
            "round": self.round,
            "batches": self.batches,
            "examples": self.examples,
            "seconds": round(self.seconds, 6),
            "examples_per_s": round(self.examples_per_s, 1),
            "cpu_seconds": round(self.cpu_seconds, 4),
            "wait_seconds": None if self.wait_seconds is None else round(self.wait_seconds, 6),
            "peak_rss_mb": round(self.peak_rss_bytes / 2**20, 1),
        }


def batch_rows(batch: Any) -> int:
    """Examples in a batch: the leading dimension of its first non-empty leaf."""
    if hasattr(batch, "num_rows"):  # pyarrow RecordBatch / Table
        return int(batch.num_rows)
    if isinstance(batch, Mapping):
        return _first_rows(batch.values())
    if isinstance(batch, (tuple, list)):
        return _first_rows(batch)
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        first = shape[0]
        return int(first) if first is not None else -1
    return -1


def _first_rows(values: Iterable[object]) -> int:
    for value in values:
        n = batch_rows(value)
        if n >= 0:
            return n
    return -1


def measure_window(
    iterator: Iterator[object],
    *,
    batches: int,
    step: Callable[[Any], Any] | None = None,
    batch_size: int | None = None,
    count: Callable[[Any], int] | None = None,
    clock: Clock = time.perf_counter,
    cpu_clock: Clock = process_cpu_seconds,
    rss: Callable[[], int] = current_rss_bytes,
    sync: Callable[[], None] | None = None,
    min_seconds: float = 0.0,
) -> Window:
    """Time ``batches`` batches from a started iterator (more, up to ``min_seconds``).

    Args:
      iterator: Yields batches (warm-up already done).
      batches: Batches to consume; fewer if the iterator ends (at least one needed).
      step: Called on each batch (a `tfinput.steps.Step` or any callable).
      batch_size: Examples per batch when fixed (``drop_remainder``); None counts
        each batch with ``count``.
      count: Examples in a batch (default `batch_rows`).
      clock: Wall clock, seconds.
      cpu_clock: Process CPU time, seconds.
      rss: Resident memory probe, bytes.
      sync: Called after the last batch's step, before the window's end is taken
        (a step that dispatches asynchronously blocks there on its work).
      min_seconds: After ``batches`` batches, go on while the window is shorter
        than this (a time target; 0: exactly ``batches``).

    Returns:
      A `Window` (``name`` and ``round`` are left for the caller).

    Raises:
      DataError: the iterator yielded no batch at all.
    """
    count = count or batch_rows
    intervals: list[float] = []
    examples = 0
    wait = 0.0
    peak = rss()
    cpu0 = cpu_clock()
    start = last = clock()
    short = min_seconds - 1e-9  # a window as long as the target up to float rounding
    while len(intervals) < batches or (min_seconds > 0 and last - start < short):
        try:
            batch = next(iterator)
        except StopIteration:
            break
        got = clock()
        wait += got - last
        if step is not None:
            step(batch)
        examples += batch_size if batch_size is not None else max(count(batch), 0)
        now = clock()
        intervals.append(now - last)
        last = now
        peak = max(peak, rss())
    if sync is not None and intervals:
        sync()
        now = clock()
        intervals[-1] += now - last
        last = now
    end = last
    cpu = cpu_clock() - cpu0
    if not intervals:
        raise DataError(
            "benchmark: the dataset produced no batch; it holds fewer examples than one "
            "batch (generate more data or lower the batch size)"
        )
    return Window(
        batches=len(intervals),
        examples=examples,
        seconds=end - start,
        cpu_seconds=cpu,
        batch_seconds=tuple(intervals),
        wait_seconds=wait,
        peak_rss_bytes=peak,
    )


def warm_up(iterator: Iterator[object], batches: int, step: Callable[[Any], Any] | None) -> int:
    """Hand up to ``batches`` untimed batches to ``step``; returns how many there were
    (fewer when the iterator ends: the caller says what that means)."""
    for i in range(batches):
        try:
            batch = next(iterator)
        except StopIteration:
            return i
        if step is not None:
            step(batch)
    return batches


def close_iterator(iterator: Any) -> None:
    """Close an iterator that can be closed (a generator, a tf.data iterator wrapper)."""
    close = getattr(iterator, "close", None)
    if callable(close):
        close()


def run_window(
    make_iterable: Callable[[], Iterable[object]],
    *,
    warmup_batches: int,
    window_batches: int,
    step: Callable[[Any], Any] | None = None,
    batch_size: int | None = None,
    count: Callable[[Any], int] | None = None,
    clock: Clock = time.perf_counter,
    cpu_clock: Clock = process_cpu_seconds,
    rss: Callable[[], int] = current_rss_bytes,
    window_seconds: float = 0.0,
) -> Window:
    """A fresh iterator, ``warmup_batches`` untimed batches, then `measure_window`.

    With ``window_seconds`` the window is sized by time (`WindowPlan.batches_for`:
    the warm-up's rate, at least ``window_batches`` batches, at least that long).

    Raises:
      DataError: the data ran out during warm-up (fewer batches than warm-up).
    """
    plan = WindowPlan(
        warmup_batches=warmup_batches,
        window_batches=window_batches,
        window_seconds=window_seconds,
    )
    iterator = iter(make_iterable())
    try:
        warm = None
        if plan.timed and warmup_batches:
            try:
                warm = measure_window(
                    iterator, batches=warmup_batches, step=step, clock=clock, cpu_clock=cpu_clock
                )
            except DataError:  # no batch at all: said below as a short warm-up
                warm = None
            done = warm.batches if warm is not None else 0
        else:
            done = warm_up(iterator, warmup_batches, step)
        if done < warmup_batches:
            raise DataError(
                f"benchmark: the dataset ended after {done} warm-up batch(es); it needs "
                f"at least {warmup_batches + 1} batches (repeat it or add data)"
            )
        return measure_window(
            iterator,
            batches=plan.batches_for(warm),
            min_seconds=plan.window_seconds,
            step=step,
            batch_size=batch_size,
            count=count,
            clock=clock,
            cpu_clock=cpu_clock,
            rss=rss,
        )
    finally:
        close_iterator(iterator)
        del iterator


def consecutive_windows(
    iterator: Iterator[object],
    plan: WindowPlan,
    *,
    step: Callable[[Any], Any] | None,
    batch_size: int | None,
    ran_out: Callable[[int], Exception],
    clock: Clock = time.perf_counter,
    cpu_clock: Clock = process_cpu_seconds,
    sync: Callable[[], None] | None = None,
    report: Callable[[int, float], bool] | None = None,
) -> list[Window]:
    """``plan.windows`` windows of one iterator after one timed-but-dropped warm-up.

    With a time target (``plan.window_seconds``) every window holds the batches the
    warm-up's rate gives for the target (`WindowPlan.batches_for`), and goes on while
    it is shorter than the target. The warm-up runs through `measure_window` like the windows (the step's ``sync``
    included), so its work is finished before the first window starts. The iterator
    is closed at the end, however it ends.

    Args:
      iterator: The started iterator (every window continues it).
      plan: Warm-up batches, windows and batches per window.
      step: Called on each batch (None: consume only).
      batch_size: Examples per batch when fixed; None counts them (`batch_rows`).
      ran_out: ``done -> exception`` raised when the warm-up got only ``done``
        batches.
      clock, cpu_clock: Wall and process CPU clocks.
      sync: Called before each window's end is taken (asynchronous steps).
      report: ``report(index, examples_per_s) -> stop?`` after each window but the
        last; True stops early (the tuner's pruning).

    Returns:
      The windows, ``round`` numbered from 0; fewer than ``plan.windows`` when
      ``report`` stopped the measurement.

    Raises:
      DataError: the iterator yielded no batch in a window.
    """

    def window(batches: int, min_seconds: float = 0.0) -> Window:
        return measure_window(
            iterator,
            batches=batches,
            step=step,
            batch_size=batch_size,
            clock=clock,
            cpu_clock=cpu_clock,
            sync=sync,
            min_seconds=min_seconds,
        )

    out: list[Window] = []
    try:
        warm = None
        if plan.warmup_batches:
            warm = window(plan.warmup_batches)
            if warm.batches < plan.warmup_batches:
                raise ran_out(warm.batches)
        batches = plan.batches_for(warm)
        for i in range(plan.windows):
            w = window(batches, plan.window_seconds)
            out.append(dataclasses.replace(w, round=i))
            if report is not None and i < plan.windows - 1 and report(i, w.examples_per_s):
                break
    finally:
        close_iterator(iterator)
    return out


def interleave(
    runs: Mapping[str, Callable[[], Window]], windows: int, progress: Progress | None
) -> dict[str, list[Window]]:
    """Run ``windows`` rounds of one window per entry of ``runs``, in order.

    Args:
      runs: ``{name: run}``; each call of ``run`` measures one window.
      windows: Rounds.
      progress: Called as ``progress(done, total, window)`` after each window.

    Returns:
      ``{name: windows}`` in round order, each named and numbered.
    """
    out: dict[str, list[Window]] = {name: [] for name in runs}
    total = windows * len(runs)
    done = 0
    for r in range(windows):
        for name, run in runs.items():
            w = dataclasses.replace(run(), name=name, round=r)
            out[name].append(w)
            done += 1
            if progress is not None:
                progress(done, total, w)
    return out
