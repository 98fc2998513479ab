"""Keras steps: ``train_on_batch`` (`keras_step`) and ``model.fit`` (`keras_fit_step`).

Keras is imported when a step is made, never when this module is.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tfinput._src.core.errors import ConfigError, DataError
from tfinput._src.measurement.probes import current_rss_bytes, process_cpu_seconds
from tfinput._src.measurement.steps.base import (
    KerasFitStep,
    KerasStep,
    Step,
    device_feed,
    loop_windows,
    to_numpy_tree,
)
from tfinput._src.measurement.windows import Window, WindowPlan

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

    from tfinput._src.core.config import PipelineConfig


def keras_step(model: keras.Model) -> Step:
    """A compiled Keras model trained with ``train_on_batch`` on ``(features, labels)``.

    On the TensorFlow backend batches go in as they are. On JAX and torch they are
    converted to numpy with one tree map per batch (no per-feature Python); on JAX,
    ``config.device_prefetch > 0`` (see `Step.prepare`) moves that many batches onto the
    device ahead of the step on a background thread.

    Raises:
      ConfigError: ``model`` is not a compiled Keras model.
    """
    if not hasattr(model, "train_on_batch"):
        raise ConfigError(
            f"keras_step: expected a compiled Keras model, got {type(model).__name__}"
        )

    import keras

    backend = keras.config.backend()
    name = f"keras {getattr(model, 'name', 'model')} ({backend})"

    def train(batch: Any) -> Any:
        features, labels = batch
        return model.train_on_batch(features, labels)

    packed = _takes_packed(model)
    if backend == "tensorflow":
        return KerasStep(name=name, fn=train, backend=backend, accepts_packed=packed)

    def run(batch: Any) -> Any:
        return train(to_numpy_tree(batch))

    def prepare(config: PipelineConfig) -> Step:
        size = config.device_prefetch
        if backend != "jax" or size <= 0:
            return base
        return dataclasses.replace(
            base,
            prepare_fn=None,
            details={"device_prefetch": size},
            run_windows=lambda source, **kw: loop_windows(
                source,
                feed=lambda s: device_feed(s, size=size),
                run=train,
                sync=None,  # train_on_batch returns numpy logs: the step has finished
                **kw,
            ),
        )

    base = KerasStep(
        name=name,
        fn=run,
        backend=backend,
        feeds_device=backend == "jax",
        prepare_fn=prepare,
        accepts_packed=packed,
    )
    return base


def _takes_packed(model: keras.Model) -> bool:
    """Whether ``model`` unpacks packed batches itself (`tfinput.models.RankingModel`)."""
    return getattr(model, "packed_layout", None) is not None


def keras_fit_step(model: keras.Model) -> Step:
    """A compiled Keras model trained with ``model.fit`` on the pipeline's dataset.

    The step owns the loop (`Step.run_windows`): one ``fit`` call per measurement, with
    ``steps_per_epoch`` = the window's batches rounded up to a multiple of
    ``steps_per_execution``, untimed warm-up epoch(s) first (tracing, compiling, buffers
    filling) and a callback timing every later epoch; each epoch is a window. Examples
    are ``batches x batch_size`` (the config's batch size, or the dataset's static one).
    ``run_windows`` also takes ``callbacks``: more Keras callbacks for the ``fit`` call
    (the profiler's step markers). ``steps_per_execution`` comes from the config
    (`Step.prepare`): the model's
    attribute is set and its ``train_function`` reset, so the next ``fit`` retraces the
    train function with the new value and keeps the compile (optimizer, loss, metrics).
    Keras converts the batches for its backend and, on JAX, prefetches them to the
    device itself. Calling the step on one batch runs ``train_on_batch``.

    What ``steps_per_execution`` trades: k steps per call into the compiled function
    save k-1 host round trips (Python, dispatch, callbacks), but callbacks and
    ``stop_training`` act only every k batches.

    Raises:
      ConfigError: ``model`` is not a compiled Keras model.
    """
    if not hasattr(model, "fit") or not hasattr(model, "train_on_batch"):
        raise ConfigError(
            f"keras_fit_step: expected a compiled Keras model, got {type(model).__name__}"
        )
    import keras

    backend = keras.config.backend()
    per_batch = keras_step(model)

    def make_step(k: int) -> Step:
        return KerasFitStep(
            name=f"keras fit {getattr(model, 'name', 'model')} ({backend})",
            fn=per_batch.fn,
            backend=backend,
            run_windows=functools.partial(_fit_windows, model, k),
            prepare_fn=lambda config: make_step(config.steps_per_execution),
            details={"steps_per_execution": k},
            accepts_packed=_takes_packed(model),
        )

    return make_step(int(getattr(model, "steps_per_execution", 1) or 1))


def _fit_windows(
    model: keras.Model,
    k: int,
    source: tf.data.Dataset,
    *,
    plan: WindowPlan,
    batch_size: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] | None = None,
    report: Callable[[int, float], bool] | None = None,
    callbacks: Iterable[keras.callbacks.Callback] = (),
) -> list[Window]:
    """The ``run_windows`` of a fit step with ``steps_per_execution`` ``k``: one
    ``model.fit`` call, warm-up epoch(s), then one epoch per window. ``fit`` fixes
    ``steps_per_epoch`` before the first epoch, so ``plan``'s ``window_seconds`` target is
    not applied: every window is ``window_batches`` batches (rounded up to ``k``).

    Raises:
      ConfigError: ``source`` is no `tf.data.Dataset`, or its batches cannot be counted.
      DataError: ``fit`` ran no timed epoch.
    """
    size = _fit_batch_size(source, batch_size)
    batches = max(k, math.ceil(plan.window_batches / k) * k)
    warmup_epochs = max(1, math.ceil(plan.warmup_batches / batches))
    out: list[Window] = []
    timer = _FitTimer.make(
        warmup_epochs=warmup_epochs,
        batches=batches,
        batch_size=size,
        clock=clock,
        cpu_clock=cpu_clock or process_cpu_seconds,
        report=report,
        out=out,
    )
    if model.steps_per_execution != k:
        model.steps_per_execution = k
        model.train_function = None  # retraced by fit with the new k
    model.fit(
        source,
        epochs=warmup_epochs + plan.windows,
        steps_per_epoch=batches,
        callbacks=[timer, *callbacks],
        shuffle=False,
        verbose=0,
    )
    if not out:
        raise DataError(
            f"keras_fit step: model.fit ran no timed epoch; the data must hold more "
            f"than {warmup_epochs * batches} batches (repeat the dataset)"
        )
    return out


def _fit_batch_size(source: object, batch_size: int | None) -> int:
    """Examples per batch of ``model.fit``'s dataset: ``batch_size`` or its static one.

    Raises:
      ConfigError: ``source`` is no `tf.data.Dataset`, or neither size is known.
    """
    import tensorflow as tf

    if not isinstance(source, tf.data.Dataset):
        raise ConfigError(
            "keras_fit step: model.fit needs a tf.data.Dataset (a tfinput Pipeline "
            f"or a callable config -> Dataset), got {type(source).__name__}"
        )
    size = batch_size or _static_batch_size(source)
    if size is None:
        raise ConfigError(
            "keras_fit step: cannot count the examples of model.fit's batches: "
            "build with PipelineConfig.drop_remainder=True (or give a dataset with a "
            "static batch dimension)"
        )
    return size


def _static_batch_size(source: tf.data.Dataset) -> int | None:
    import tensorflow as tf

    for s in tf.nest.flatten(source.element_spec):
        shape = getattr(s, "shape", None)
        if shape is not None and shape.rank and shape[0] is not None:
            return int(shape[0])
    return None


class _FitTimer:
    """A Keras callback timing each epoch of a ``fit`` call (built lazily: Keras is
    imported only when a fit step is made)."""

    @staticmethod
    def make(
        *,
        warmup_epochs: int,
        batches: int,
        batch_size: int | None,
        clock: Callable[[], float],
        cpu_clock: Callable[[], float],
        report: Callable[[int, float], bool] | None,
        out: list[Any],
    ) -> Any:
        import keras

        class FitTimer(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                self._t0 = clock()
                self._c0 = cpu_clock()

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                # Fetching the logs waits for the epoch's last step (JAX dispatches
                # asynchronously).
                for value in (logs or {}).values():
                    float(value)
                seconds = clock() - self._t0
                cpu = cpu_clock() - self._c0
                if epoch < warmup_epochs:
                    return
                i = epoch - warmup_epochs
                w = Window(
                    round=i,
                    batches=batches,
                    examples=batches * (batch_size or 0),
                    seconds=seconds,
                    cpu_seconds=cpu,
                    batch_seconds=(seconds / batches,) * batches,
                    wait_seconds=None,
                    peak_rss_bytes=current_rss_bytes(),
                )
                out.append(w)
                if report is not None and report(i, w.examples_per_s):
                    self.model.stop_training = True

        return FitTimer()
