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

Modules: `tfinput._src.measurement.steps.base` (`Step`, the kind classes and names), `tfinput._src.measurement.steps.simple`
(input only, function, simulated), `tfinput._src.measurement.steps.keras`, `tfinput._src.measurement.steps.jax`,
`tfinput._src.measurement.steps.cli` (`make`, from command-line choices); the device feeding and the
window loop of steps that feed the device themselves are in ``_feed``.
"""

from __future__ import annotations

from tfinput._src.measurement.steps.base import (
    CLI_STEPS,
    STEP_CLASSES,
    STEP_KINDS,
    FunctionStep,
    InputOnlyStep,
    JaxStep,
    KerasFitStep,
    KerasStep,
    SimulatedStep,
    Step,
)
from tfinput._src.measurement.steps.base import (
    RunWindows as RunWindows,  # the type of Step.run_windows
)
from tfinput._src.measurement.steps.cli import make
from tfinput._src.measurement.steps.jax import jax_step
from tfinput._src.measurement.steps.keras import keras_backend, keras_fit_step, keras_step
from tfinput._src.measurement.steps.simple import function_step, input_only, simulated_step

__all__ = [
    "Step",
    "InputOnlyStep",
    "FunctionStep",
    "SimulatedStep",
    "KerasStep",
    "KerasFitStep",
    "JaxStep",
    "STEP_CLASSES",
    "input_only",
    "keras_step",
    "keras_fit_step",
    "jax_step",
    "function_step",
    "simulated_step",
    "make",
    "keras_backend",
    "STEP_KINDS",
    "CLI_STEPS",
]
