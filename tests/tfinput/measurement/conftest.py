"""Fakes for the bench tests: a clock that moves only when told, a CPU clock tied to
it, batches that take a set time of that clock to produce, and the side-by-side
comparison on that clock (import them:
``from tests.tfinput.measurement.conftest import FakeClock, FakeCpu, batches``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeCpu:
    """A CPU clock that advances ``busy`` CPU-seconds per wall second of a FakeClock."""

    def __init__(self, clock: FakeClock, busy: float) -> None:
        self.clock, self.busy, self.start = clock, busy, clock.now

    def __call__(self) -> float:
        return (self.clock.now - self.start) * self.busy


def batches(
    clock: FakeClock, *, rows: int, produce_s: float, count: int | None = None
) -> Iterator[dict[str, Any]]:
    """Batches of ``rows`` examples, each taking ``produce_s`` of the fake clock."""
    i = 0
    while count is None or i < count:
        clock.sleep(produce_s)
        yield {"features": {"x": np.zeros(rows)}, "label": np.zeros(rows)}
        i += 1


def fake_target(clock: FakeClock, order: list, per_batch: dict[int, float]):
    """config -> batches whose production time depends on map_parallelism."""

    def factory(config: Any):
        order.append(config.map_parallelism)
        return batches(clock, rows=config.batch_size, produce_s=per_batch[config.map_parallelism])

    return factory


def fake_measure(target, configs, clock, *, plan, rss=0, cpu_count=None, **kw):
    """`tfinput.bench.measure` on the fake clock, one CPU-second per second;
    ``plan`` is ``(windows, window_batches, warmup_batches)``."""
    from tfinput._src.measurement import compare
    from tfinput._src.measurement.target import MeasureOptions

    windows, window_batches, warmup_batches = plan
    return compare.measure(
        target,
        configs,
        **kw,
        measurement=MeasureOptions(
            windows=windows,
            window_batches=window_batches,
            warmup_batches=warmup_batches,
            clock=clock,
            cpu_clock=FakeCpu(clock, 1.0),
            rss=lambda: rss,
            cpu_count=cpu_count,
        ),
    )
