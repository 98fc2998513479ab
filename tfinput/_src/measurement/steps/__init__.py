"""Training-step kinds shared by the tuner (`tuners`) and the profiler (`profiles`).

A *step* consumes one batch the way training would. The tuner measures a pipeline
against it and the profiler marks it in traces. The kinds:

- ``input_only``: consume the batch and do nothing else; measures the pipeline alone.
- ``keras``: ``model.train_on_batch(features, labels)`` on a compiled Keras model, on
  the backend Keras runs on (``KERAS_BACKEND``: TensorFlow tensors are passed as they
  are to the TensorFlow backend and as numpy arrays to JAX and torch, one tree map per
  batch; on JAX ``config.device_prefetch`` batches are put on the device ahead).
- ``keras_fit``: ``model.fit`` on the pipeline's `tf.data.Dataset` with
  ``config.steps_per_execution``, the way Keras users train. The step owns the loop
  (`Step.run_windows`): a window is one epoch of ``steps_per_epoch`` batches, timed by a
  callback. ``model.fit`` hides when it waits for input, so its input-wait fraction is
  None.
- ``jax``: a user's jitted ``fn(state, batch) -> state``; batches are converted to numpy
  and put on the device (``config.device_prefetch`` batches ahead); the state is kept
  and blocked on at each window's end, so a window times finished work.
- ``function``: any user callable ``step(batch)``, for example a custom
  ``strategy.run`` TPU/GPU step. It must block until the step is done (or return
  something we can block on).
- ``simulated``: a fixed device time per batch during which the host CPUs stay free
  (the thread sleeps, releasing the GIL, while tf.data keeps producing). It lets the
  accelerator regime be studied on a CPU-only machine.

A step is set up for a config's feeding knobs with `Step.prepare` (once per config
measured); measurements then either call it on every batch or, when it has
``run_windows``, hand it the data and let it run the windows itself.

Each kind is a class (`InputOnlyStep`, `FunctionStep`, `SimulatedStep`, `KerasStep`,
`KerasFitStep`, `JaxStep`: a `Step` whose ``kind`` is fixed), made by the constructors
below.

Modules: `tfinput._src.measurement.steps.base` (`Step`, the kind classes and names; the
input-only, function, simulated and JAX steps; the device feeding and the window loop of
steps that feed the device themselves) and `tfinput._src.measurement.steps.keras`. `make`,
here, makes a step from command-line choices (shared by ``tfinput tune`` and ``tfinput
profile``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tfinput._src.core.errors import ConfigError
from tfinput._src.core.options import load_object
from tfinput._src.measurement.steps.base import (
    CLI_STEPS,
    Step,
    function_step,
    input_only,
    jax_step,
    simulated_step,
)
from tfinput._src.measurement.steps.keras import keras_fit_step, keras_step

if TYPE_CHECKING:  # pragma: no cover
    from tfinput._src.core.schema import Schema


def make(
    kind: str,
    *,
    schema: Schema | None = None,
    model: str | None = None,
    step_fn: str | None = None,
    device_time_ms: float | None = None,
) -> Step:
    """A step from command-line choices (shared by ``tfinput tune`` and ``profile``).

    Args:
      kind: One of `CLI_STEPS`.
      schema: The pipeline's `tfinput.Schema` (for ``ranking``/``ranking_fit``, and
        passed to a ``--model`` or ``--step-fn`` factory that accepts it).
      model: ``MODULE:FUNCTION`` returning a compiled Keras model (``keras``,
        ``keras_fit``).
      step_fn: ``MODULE:FUNCTION`` of a step function (``function``), or of a factory
        returning ``(step_fn, initial_state)`` (``jax``).
      device_time_ms: Device time per batch (``simulated``).

    Returns:
      The `Step`.

    Raises:
      ConfigError: a missing or invalid companion option.
    """
    if kind == "input_only":
        return input_only()
    if kind == "simulated":
        if not device_time_ms or device_time_ms <= 0:
            raise ConfigError("the simulated step needs --device-time-ms > 0")
        return simulated_step(device_time_ms / 1e3)
    if kind in ("ranking", "ranking_fit"):
        return _ranking_step(kind, schema)
    if kind == "keras":
        return keras_step(_keras_model(model, schema, "keras"))
    if kind == "keras_fit":
        return keras_fit_step(_keras_model(model, schema, "keras_fit"))
    if kind == "function":
        if not step_fn:
            raise ConfigError("--step function needs --step-fn MODULE:FUNCTION")
        return function_step(load_object(step_fn, "--step-fn"))
    if kind == "jax":
        return _jax_step(step_fn, schema)
    raise ConfigError(f"unknown step {kind!r}; choose from {list(CLI_STEPS)}")


def _ranking_step(kind: str, schema: Schema | None) -> Step:
    """tfinput's ranking model trained with ``train_on_batch`` or ``model.fit``."""
    if schema is None:
        other = "keras" if kind == "ranking" else "keras_fit"
        raise ConfigError(
            f"the {kind} step needs a tfinput pipeline (it builds its model from the "
            f"schema); use --step {other} --model MODULE:FUNCTION for other datasets"
        )
    from tfinput._src.measurement import models

    built = models.ranking_model(schema)
    return keras_step(built) if kind == "ranking" else keras_fit_step(built)


def _jax_step(step_fn: str | None, schema: Schema | None) -> Step:
    """``--step jax``: ``step_fn`` names a factory returning ``(fn, initial_state)``."""
    if not step_fn:
        raise ConfigError(
            "--step jax needs --step-fn MODULE:FUNCTION, a function returning "
            "(step_fn, initial_state)"
        )
    made = _call_factory(load_object(step_fn, "--step-fn"), schema)
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
        raise ConfigError(
            f"--step-fn {step_fn}: for --step jax it must return (step_fn, "
            f"initial_state), got {type(made).__name__}"
        )
    return jax_step(made[0], made[1])


def _call_factory(factory: Callable[..., Any], schema: Schema | None) -> Any:
    """``factory(schema)`` when it takes an argument and a schema is known, else
    ``factory()``."""
    try:
        params = inspect.signature(factory).parameters.values()
        takes = any(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
        )
    except (TypeError, ValueError):
        takes = False
    return factory(schema) if takes and schema is not None else factory()


def _keras_model(model: str | None, schema: Schema | None, option: str) -> Any:
    if not model:
        raise ConfigError(f"--step {option} needs --model MODULE:FUNCTION")
    factory = load_object(model, "--model")
    if hasattr(factory, "train_on_batch"):
        return factory
    return _call_factory(factory, schema)
