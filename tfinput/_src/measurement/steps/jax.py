"""The JAX step: a user's jitted ``fn(state, batch) -> state`` fed by tfinput."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfinput._src.core.errors import ConfigError
from tfinput._src.measurement.steps._feed import device_feed, jax_put, loop_windows, to_numpy_tree
from tfinput._src.measurement.steps.base import JaxStep, Step

__all__ = ["jax_step"]


def jax_step(fn: Callable[[Any, Any], Any], state: Any, *, sharding: Any = None) -> Step:
    """A JAX training step ``fn(state, batch) -> state``.

    Each batch is converted to numpy with one tree map and moved with
    ``jax.device_put`` (onto ``sharding`` when given): on the consumer's thread when
    ``config.device_prefetch`` is 0, else that many batches ahead on a background
    thread (`tfinput.device_prefetch`). The state is kept between batches (and between
    measurements: the step trains on); windows block on it at their end so they time
    finished work. Calling the step on one batch runs it and blocks.

    Args:
      fn: The step; jitted here with ``jax.jit`` unless it already is.
      state: The initial state (any pytree: parameters, optimizer state...).
      sharding: A `jax.sharding.Sharding` for every batch array (data parallelism);
        None: the default device.

    Raises:
      ConfigError: JAX is not installed, or ``fn`` is not callable.
    """
    if not callable(fn):
        raise ConfigError(f"jax_step: expected a callable fn(state, batch), got {type(fn)!r}")
    try:
        import jax
    except ImportError as e:
        raise ConfigError("the jax step needs JAX: pip install jax") from e
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    holder = [state]
    put = jax_put(sharding)

    def advance(device_batch: Any) -> None:
        holder[0] = jitted(holder[0], device_batch)

    def sync() -> None:
        jax.block_until_ready(holder[0])

    def one(batch: Any) -> Any:
        advance(put(to_numpy_tree(batch)))
        sync()
        return holder[0]

    name = getattr(fn, "__name__", None) or getattr(
        getattr(fn, "__wrapped__", None), "__name__", "step"
    )

    def make_step(size: int) -> Step:
        return JaxStep(
            name=f"jax {name}",
            fn=one,
            backend="jax",
            feeds_device=True,
            prepare_fn=lambda config: make_step(config.device_prefetch),
            run_windows=lambda source, **kw: loop_windows(
                source,
                feed=lambda s: device_feed(s, size=size, sharding=sharding),
                run=advance,
                sync=sync,
                **kw,
            ),
            details={"device_prefetch": size},
            state_fn=lambda: holder[0],
        )

    return make_step(0)
