"""Fakes for the bench tests: a clock that moves only when told, a CPU clock tied to
it, and batches that take a set time of that clock to produce (import them:
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
