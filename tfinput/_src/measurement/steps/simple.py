"""Steps that need no framework: input only, a user function, a simulated device."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tfinput._src.core.errors import ConfigError
from tfinput._src.measurement.steps.base import FunctionStep, SimulatedStep, Step

__all__ = ["function_step", "input_only", "simulated_step"]


def input_only() -> Step:
    """A step that only consumes the batch (the pipeline's own throughput)."""
    return Step.of(None)


def function_step(fn: Callable[[Any], Any], *, name: str | None = None) -> Step:
    """A user step function. Values it returns are fetched (``numpy()``) so that an
    asynchronous device step is finished before the next batch is requested.

    Raises:
      ConfigError: ``fn`` is not callable.
    """
    if not callable(fn):
        raise ConfigError(f"function_step: expected a callable, got {type(fn).__name__}")

    def run(batch: Any) -> Any:
        out = fn(batch)
        _block_on(out)
        return out

    return FunctionStep(name=name or getattr(fn, "__name__", "step"), fn=run)


def simulated_step(device_time_s: float, *, sleep: Callable[[float], None] = time.sleep) -> Step:
    """An accelerator step taking ``device_time_s`` per batch with the host idle.

    Args:
      device_time_s: Seconds of simulated device time per batch (for example 0.02:
        20 ms per batch of 4096 is about 200k examples/s).
      sleep: Injectable sleep function (tests pass a fake clock's sleep).

    Raises:
      ConfigError: ``device_time_s`` is not > 0.
    """
    if not device_time_s > 0:
        raise ConfigError(f"simulated_step: device_time_s must be > 0, got {device_time_s!r}")
    return SimulatedStep(
        name=f"simulated accelerator {device_time_s * 1e3:g} ms/batch",
        fn=lambda batch: sleep(device_time_s),
        device_time_s=device_time_s,
        accepts_packed=True,
    )


def _block_on(out: Any) -> None:
    """Fetch tensors in ``out`` so an asynchronously dispatched step has completed."""
    if out is None:
        return
    if isinstance(out, (list, tuple)):
        for o in out:
            _block_on(o)
    elif isinstance(out, dict):
        for o in out.values():
            _block_on(o)
    elif hasattr(out, "numpy"):
        out.numpy()
