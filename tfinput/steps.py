"""Training-step kinds shared by the tuner (`tuners`) and the profiler (`profiles`).

A *step* consumes one batch the way training would. The tuner measures a pipeline
against it and the profiler marks it in traces. Four kinds:

- ``input_only``: consume the batch and do nothing else; measures the pipeline alone.
- ``keras``: ``model.train_on_batch(features, labels)`` on a compiled Keras model, on
  the backend Keras runs on (``KERAS_BACKEND``: TensorFlow tensors are passed as they
  are to the TensorFlow backend and as numpy arrays to JAX and torch).
- ``function``: any user callable ``step(batch)``, for example a custom
  ``strategy.run`` TPU/GPU step. It must block until the step is done (or return
  something we can block on).
- ``simulated``: a fixed device time per batch during which the host CPUs stay free
  (the thread sleeps, releasing the GIL, while tf.data keeps producing). It lets the
  accelerator regime be studied on a CPU-only machine.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from tfinput.errors import ConfigError

__all__ = [
    "Step",
    "input_only",
    "keras_step",
    "function_step",
    "simulated_step",
    "make",
    "STEP_KINDS",
    "CLI_STEPS",
]

STEP_KINDS = ("input_only", "keras", "function", "simulated")
#: Step names accepted on the command line: the kinds, plus ``ranking`` (the built-in
#: DCN-style Keras model of `tfinput.models`, a ``keras`` step).
CLI_STEPS = ("input_only", "ranking", "keras", "function", "simulated")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    """One training step over a batch.

    Attributes:
      kind: One of `STEP_KINDS`.
      name: Human-readable description used in reports.
      fn: Callable run on each batch; returns when the step has finished.
      device_time_s: For simulated steps, the device time per batch, else None.
    """

    kind: str
    name: str
    fn: Callable[[Any], Any]
    device_time_s: float | None = None

    def __call__(self, batch: Any) -> Any:
        return self.fn(batch)

    def describe(self) -> dict[str, Any]:
        """JSON-ready description, recorded next to every measurement."""
        out: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.device_time_s is not None:
            out["device_time_s"] = self.device_time_s
        return out


def input_only() -> Step:
    """A step that only consumes the batch (the pipeline's own throughput)."""
    return Step(kind="input_only", name="input only", fn=lambda batch: None)


def keras_step(model: Any) -> Step:
    """A compiled Keras model trained with ``train_on_batch`` on ``(features, labels)``."""
    if not hasattr(model, "train_on_batch"):
        raise ConfigError(
            f"keras_step: expected a compiled Keras model, got {type(model).__name__}"
        )

    import keras

    backend = keras.config.backend()
    if backend == "tensorflow":

        def run(batch: Any) -> Any:
            features, labels = batch
            return model.train_on_batch(features, labels)

    else:
        # JAX and torch cannot take TensorFlow tensors: hand them numpy arrays (one
        # zero-copy view per tensor; the packed layout makes that a handful per batch).
        import tensorflow as tf

        def to_numpy(t: Any) -> Any:
            return t.numpy() if hasattr(t, "numpy") else t

        def run(batch: Any) -> Any:
            features, labels = tf.nest.map_structure(to_numpy, batch)
            return model.train_on_batch(features, labels)

    return Step(kind="keras", name=f"keras {getattr(model, 'name', 'model')} ({backend})", fn=run)


def function_step(fn: Callable[[Any], Any], *, name: str | None = None) -> Step:
    """A user step function. Values it returns are fetched (``numpy()``) so that an
    asynchronous device step is finished before the next batch is requested."""
    if not callable(fn):
        raise ConfigError(f"function_step: expected a callable, got {type(fn).__name__}")

    def run(batch: Any) -> Any:
        out = fn(batch)
        _block_on(out)
        return out

    return Step(kind="function", name=name or getattr(fn, "__name__", "step"), fn=run)


def simulated_step(device_time_s: float, *, sleep: Callable[[float], None] = time.sleep) -> Step:
    """An accelerator step taking ``device_time_s`` per batch with the host idle.

    Args:
      device_time_s: Seconds of simulated device time per batch (for example 0.02:
        20 ms per batch of 4096 is about 200k examples/s).
      sleep: Injectable sleep function (tests pass a fake clock's sleep).
    """
    if not device_time_s > 0:
        raise ConfigError(f"simulated_step: device_time_s must be > 0, got {device_time_s!r}")
    return Step(
        kind="simulated",
        name=f"simulated accelerator {device_time_s * 1e3:g} ms/batch",
        fn=lambda batch: sleep(device_time_s),
        device_time_s=device_time_s,
    )


def make(
    kind: str,
    *,
    schema: Any = None,
    model: str | None = None,
    step_fn: str | None = None,
    device_time_ms: float | None = None,
) -> Step:
    """A step from command-line choices (shared by ``tfinput tune`` and ``profile``).

    Args:
      kind: One of `CLI_STEPS`.
      schema: The pipeline's `tfinput.Schema` (for ``ranking``, and passed to a
        ``--model`` factory that accepts it).
      model: ``MODULE:FUNCTION`` returning a compiled Keras model (``keras``).
      step_fn: ``MODULE:FUNCTION`` of a step function (``function``).
      device_time_ms: Device time per batch (``simulated``).

    Raises:
      ConfigError: a missing or invalid companion option.
    """
    from tfinput._cli_util import load_object

    if kind == "input_only":
        return input_only()
    if kind == "simulated":
        if not device_time_ms or device_time_ms <= 0:
            raise ConfigError("the simulated step needs --device-time-ms > 0")
        return simulated_step(device_time_ms / 1e3)
    if kind == "ranking":
        if schema is None:
            raise ConfigError(
                "the ranking step needs a tfinput pipeline (it builds its model from the "
                "schema); use --step keras --model MODULE:FUNCTION for other datasets"
            )
        from tfinput import models

        return keras_step(models.ranking_model(schema))
    if kind == "keras":
        if not model:
            raise ConfigError("--step keras needs --model MODULE:FUNCTION")
        factory = load_object(model, "--model")
        if hasattr(factory, "train_on_batch"):
            return keras_step(factory)
        try:
            built = factory(schema) if schema is not None else factory()
        except TypeError:
            built = factory()
        return keras_step(built)
    if kind == "function":
        if not step_fn:
            raise ConfigError("--step function needs --step-fn MODULE:FUNCTION")
        return function_step(load_object(step_fn, "--step-fn"))
    raise ConfigError(f"unknown step {kind!r}; choose from {list(CLI_STEPS)}")


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
