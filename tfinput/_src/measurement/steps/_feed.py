"""Feeding batches to a device, and the window loop of steps that feed it themselves.

Shared by the Keras and JAX steps (`tfinput._src.measurement.steps.keras`, `tfinput._src.measurement.steps.jax`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tfinput._src.core.errors import DataError
from tfinput._src.measurement.probes import process_cpu_seconds
from tfinput._src.measurement.windows import Window, WindowPlan, consecutive_windows

__all__ = ["device_feed", "jax_put", "loop_windows", "numpy_source", "to_numpy_tree"]


def to_numpy_tree(batch: Any) -> Any:
    """One tree map: TensorFlow tensors to numpy (zero-copy on CPU), others as they are."""
    import tensorflow as tf

    return tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, batch)


def numpy_source(source: Iterable[Any]) -> Iterable[Any]:
    """numpy batches of a `tf.data.Dataset` (``as_numpy_iterator``) or of any iterable."""
    if hasattr(source, "as_numpy_iterator"):
        return source.as_numpy_iterator()
    return (to_numpy_tree(b) for b in source)


def jax_put(sharding: Any) -> Callable[[Any], Any]:
    """``batch -> jax.device_put(batch, sharding)``."""
    import jax

    return lambda batch: jax.device_put(batch, sharding)


def device_feed(source: Iterable[Any], *, size: int, sharding: Any = None) -> Iterator[Any]:
    """Batches of ``source`` on the JAX device: ``size`` ahead on a thread when > 0,
    else converted and put on the consumer's thread when it asks."""
    from tfinput._src.core.device_prefetch import to_jax

    if size > 0:
        return to_jax(source, size=size, sharding=sharding)
    put = jax_put(sharding)
    return (put(b) for b in numpy_source(source))


def loop_windows(
    source: Iterable[Any],
    *,
    feed: Callable[[Any], Iterator[Any]],
    run: Callable[[Any], Any],
    sync: Callable[[], None] | None,
    batch_size: int | None,
    warmup_batches: int,
    windows: int,
    window_batches: int,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] | None = None,
    report: Callable[[int, float], bool] | None = None,
    window_seconds: float = 0.0,
) -> list[Window]:
    """Windows of a step that feeds the device itself: ``run`` on every batch of
    ``feed(source)``, ``sync()`` before each window's end is taken (the
    `tfinput.steps.Step.run_windows` of such steps); ``window_seconds`` sizes the
    windows by time as `tfinput.measure.windows.WindowPlan` does.

    Raises:
      DataError: the data ended during the warm-up.
    """
    plan = WindowPlan(
        warmup_batches=warmup_batches,
        windows=windows,
        window_batches=window_batches,
        window_seconds=window_seconds,
    )

    def ran_out(done: int) -> DataError:
        return DataError(
            f"step: the data ended after {done} warm-up batch(es); it needs "
            f"more than {warmup_batches} batches"
        )

    return consecutive_windows(
        feed(source),
        plan,
        step=run,
        batch_size=batch_size,
        ran_out=ran_out,
        clock=clock,
        cpu_clock=cpu_clock or process_cpu_seconds,
        sync=sync,
        report=report,
    )
