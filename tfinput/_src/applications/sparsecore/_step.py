"""`sparsecore_step`: the SparseCore step adapter, a `tfinput.steps.Step` that feeds each
batch through `sparsecore_feed` with a config's ``sparsecore_workers`` and
``sparsecore_prefetch`` before the step (for `tfinput.bench` and `tuners.tune`).
`tfinput.sparsecore` is the public API."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tfinput._src.applications.sparsecore.feed import SparseCoreFeed
from tfinput._src.applications.sparsecore.plan import SparseCorePlan
from tfinput._src.applications.sparsecore.stacks import embedding_module
from tfinput._src.applications.sparsecore.workers import (
    SparseCoreFeedStats,
)
from tfinput._src.core.errors import ConfigError
from tfinput._src.measurement.steps.base import STEP_CLASSES, Step, loop_windows


def sparsecore_step(
    plan: SparseCorePlan,
    step: Step | Callable[[Any], object] | None = None,
    *,
    processes: bool = False,
) -> Step:
    """A step that feeds SparseCore: each batch preprocessed by `sparsecore_feed` (with
    ``config.sparsecore_workers`` and ``config.sparsecore_prefetch``), then ``step``
    run on ``((dense, preprocessed), labels)``. For `tfinput.bench` and `tuners.tune`:
    the tuner searches the two knobs with the tf.data ones, and its baselines
    preprocess on the training thread (``sparsecore_workers=0``).

    Args:
      plan: The `SparseCorePlan`.
      step: A `tfinput.steps.Step` taking the preprocessed batches (for example
        `tfinput.steps.simulated_step`: the device time of a TPU step,
        `tfinput.steps.jax_step` around your JAX training step, run batch by batch on
        the feed's batches, or `tfinput.steps.function_step` around your own); None
        measures the input side alone (the preprocessing included).
      processes: The feed's workers are processes (`sparsecore_feed`).

    Returns:
      A `tfinput.steps.Step` with ``feeds_sparsecore``. Its ``describe()["sparsecore"]``
      holds the feed statistics summed over every measurement (`SparseCoreFeedStats`:
      ids dropped and COO buffer usage per stacked table), which `tuners.tune` stores
      in its result's ``step``. The step made for a config
      (``step.prepare(config)``) has in ``describe()["sparsecore_feed"]`` the feed's
      batches, the training loop's wait and the preprocessing time over every
      measurement with that config's ``sparsecore_workers`` and ``sparsecore_prefetch``:
      `tuners.tune` says when the feed bounds its winner.

    Raises:
      ConfigError: jax-tpu-embedding is missing; ``step`` owns its training loop
        (``model.fit``), so it cannot take the preprocessed batches from the feed.
    """
    inner = Step.of(step)
    embedding_module()
    # A JAX step runs one batch and blocks when called (`jax_step`): it takes the feed's
    # batches that way, the feed doing the prefetching its own windows would do.
    if inner.owns_loop and inner.kind != "jax":
        raise ConfigError(
            f"sparsecore_step: step {inner.name!r} runs its own loop ({inner.kind}); pass a "
            "step called on each batch (simulated_step, function_step, jax_step)"
        )
    steps = _SparseCoreSteps(plan, inner, processes=processes, alone=step is None)
    return steps.make(2, 0)


class _SparseCoreSteps:
    """The steps `sparsecore_step` makes, one per config's feed knobs, sharing the feed
    statistics (summed over every measurement) and the tables already warned about."""

    def __init__(self, plan: SparseCorePlan, inner: Step, *, processes: bool, alone: bool):
        self.plan, self.inner, self.processes, self.alone = plan, inner, processes, alone
        self.totals = SparseCoreFeedStats()
        self.summary: dict[str, Any] = self.totals.to_dict()  # shared, updated in place
        # The feed's times for each (workers, prefetch), updated in place: what the
        # tuner reads to say whether the feed bounds its winner.
        self.by_knobs: dict[tuple[int, int], dict[str, float]] = {}
        self.warned: set[str] = set()  # a table's drops are logged once

    def account(self, stats: SparseCoreFeedStats, knobs: tuple[int, int] | None = None) -> None:
        self.totals.add(stats)
        self.summary.clear()
        self.summary.update(self.totals.to_dict())
        if knobs is not None:
            mine = self._times(knobs)
            mine["batches"] += stats.batches
            mine["wait_seconds"] += stats.wait_seconds
            mine["preprocess_seconds"] += stats.preprocess_seconds

    def _times(self, knobs: tuple[int, int]) -> dict[str, float]:
        return self.by_knobs.setdefault(
            knobs, {"batches": 0, "wait_seconds": 0.0, "preprocess_seconds": 0.0}
        )

    def feed(self, source: Iterable[Any], workers: int, prefetch: int) -> Iterator[Any]:
        """``source``'s batches preprocessed by ``workers`` workers."""
        fed = SparseCoreFeed(
            source,
            self.plan,
            workers=workers,
            prefetch=prefetch,
            processes=self.processes,
            warned=self.warned,
        )
        try:
            yield from fed
        finally:
            fed.close()
            self.account(fed.stats, (workers, prefetch))

    def one(self, batch: Any) -> Any:
        """One batch, preprocessed on this thread (no pool to start and stop for it)."""
        with SparseCoreFeed([batch], self.plan, workers=0, prefetch=1, warned=self.warned) as fed:
            item = next(fed)
        self.account(fed.stats)
        return self.inner.fn(item)

    def make(self, workers: int, prefetch: int) -> Step:
        prefetch = prefetch or max(1, 2 * workers)
        inner = self.inner
        return STEP_CLASSES.get(inner.kind, Step)(
            kind=inner.kind,
            name=f"SparseCore preprocessing, {workers} worker(s)"
            + (" (input only)" if self.alone else f" + {inner.name}"),
            fn=self.one,
            device_time_s=inner.device_time_s,
            backend=inner.backend,
            feeds_sparsecore=True,
            prepare_fn=lambda config: self.make(
                config.sparsecore_workers, config.sparsecore_prefetch
            ),
            run_windows=lambda source, **kw: loop_windows(
                source,
                feed=lambda batches: self.feed(batches, workers, prefetch),
                run=inner.fn,
                sync=None,
                **kw,
            ),
            details={
                "sparsecore_workers": workers,
                "sparsecore_prefetch": prefetch,
                "sparsecore": self.summary,
                # this config's feed: batches, the loop's wait, the preprocessing
                "sparsecore_feed": self._times((workers, prefetch)),
            },
        )
