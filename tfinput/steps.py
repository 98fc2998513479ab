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
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tfinput.errors import ConfigError, DataError

if TYPE_CHECKING:
    from tfinput.bench import Window
    from tfinput.config import PipelineConfig

__all__ = [
    "Step",
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

STEP_KINDS = ("input_only", "keras", "keras_fit", "jax", "function", "simulated")
#: Step names accepted on the command line: the kinds, plus ``ranking`` and
#: ``ranking_fit`` (the built-in DCN-style Keras model of `tfinput.models`, trained with
#: ``train_on_batch`` and with ``model.fit``).
CLI_STEPS = (
    "input_only",
    "ranking",
    "ranking_fit",
    "keras",
    "keras_fit",
    "jax",
    "function",
    "simulated",
)

#: ``run_windows(source, *, batch_size, warmup_batches, windows, window_batches, clock,
#: cpu_clock, report) -> list[Window]``.
RunWindows = Callable[..., "list[Window]"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    """One training step over a batch.

    Attributes:
      kind: One of `STEP_KINDS`.
      name: Human-readable description used in reports.
      fn: Callable run on each batch; returns when the step has finished.
      device_time_s: For simulated steps, the device time per batch, else None.
      backend: The Keras (or JAX) backend the step runs on; None when it has none.
      feeds_device: The step puts batches on the device itself and honours
        ``config.device_prefetch``.
      prepare_fn: ``config -> Step``: the step set up for a config's feeding knobs
        (`prepare`); None: the step is the same for every config.
      run_windows: When set, the step owns the training loop (``model.fit``, a JAX loop
        with device prefetch): ``run_windows(source, *, batch_size, warmup_batches,
        windows, window_batches, clock, cpu_clock, report) -> list[bench.Window]``
        where ``source`` is a `tf.data.Dataset` or an iterable of batches.
      details: Extra fields for `describe` (``steps_per_execution``, ...).
      state_fn: For steps that carry a state (``jax``), returns the current one.
      accepts_packed: The step takes batches in the ``packed`` layout as well as per
        feature (input only, simulated, tfinput's ranking model), so the tuner may
        search ``layout``. A step of your own that unpacks (`tfinput.layout.unpack`,
        `tfinput.layout.UnpackFeatures`) can say so with
        ``dataclasses.replace(step, accepts_packed=True)``.
    """

    kind: str
    name: str
    fn: Callable[[Any], Any]
    device_time_s: float | None = None
    backend: str | None = None
    feeds_device: bool = False
    prepare_fn: Callable[[PipelineConfig], Step] | None = None
    run_windows: RunWindows | None = None
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    state_fn: Callable[[], Any] | None = None
    accepts_packed: bool = False

    @property
    def state(self) -> Any:
        """The current state of a stateful step (``jax``: the last ``fn`` output).

        Raises:
          ConfigError: the step carries no state.
        """
        if self.state_fn is None:
            raise ConfigError(f"step {self.name!r} ({self.kind}) carries no state")
        return self.state_fn()

    def __call__(self, batch: Any) -> Any:
        return self.fn(batch)

    def prepare(self, config: PipelineConfig) -> Step:
        """The step set up for ``config``'s feeding knobs (``steps_per_execution``,
        ``device_prefetch``); the step itself for kinds that ignore them."""
        return self.prepare_fn(config) if self.prepare_fn is not None else self

    @property
    def owns_loop(self) -> bool:
        """Whether measurements must hand the data to `run_windows`."""
        return self.run_windows is not None

    def describe(self) -> dict[str, Any]:
        """JSON-ready description, recorded next to every measurement."""
        out: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.device_time_s is not None:
            out["device_time_s"] = self.device_time_s
        if self.backend is not None:
            out["backend"] = self.backend
        if self.feeds_device:
            out["feeds_device"] = True
        out.update(self.details)
        return out


def keras_backend() -> str:
    """The Keras backend of this process (``KERAS_BACKEND``, else ``~/.keras/keras.json``,
    else ``tensorflow``), read without importing Keras when it is not imported yet."""
    import sys

    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "config"):
        return str(keras.config.backend())
    env = os.environ.get("KERAS_BACKEND")
    if env:
        return env
    import json

    path = os.path.join(os.environ.get("KERAS_HOME", os.path.expanduser("~/.keras")), "keras.json")
    try:
        with open(path) as f:
            return str(json.load(f).get("backend", "tensorflow"))
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def input_only() -> Step:
    """A step that only consumes the batch (the pipeline's own throughput)."""
    return Step(kind="input_only", name="input only", fn=lambda batch: None, accepts_packed=True)


# ----------------------------------------------------------------- helpers
def _to_numpy_tree(batch: Any) -> Any:
    """One tree map: TensorFlow tensors to numpy (zero-copy on CPU), others as they are."""
    import tensorflow as tf

    return tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, batch)


def _numpy_source(source: Any) -> Iterable[Any]:
    """numpy batches of a `tf.data.Dataset` (``as_numpy_iterator``) or of any iterable."""
    if hasattr(source, "as_numpy_iterator"):
        return source.as_numpy_iterator()
    return (_to_numpy_tree(b) for b in source)


def _jax_put(sharding: Any) -> Callable[[Any], Any]:
    import jax

    return lambda batch: jax.device_put(batch, sharding)


def _device_feed(source: Any, *, size: int, sharding: Any = None) -> Iterator[Any]:
    """Batches of ``source`` on the JAX device: ``size`` ahead on a thread when > 0,
    else converted and put on the consumer's thread when it asks."""
    from tfinput.device_prefetch import to_jax

    if size > 0:
        return to_jax(source, size=size, sharding=sharding)
    put = _jax_put(sharding)
    return (put(b) for b in _numpy_source(source))


def _loop_windows(
    source: Any,
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
) -> list[Window]:
    """Windows of a step that feeds the device itself: ``run`` on every batch of
    ``feed(source)``, ``sync()`` before each window's end is taken."""
    from tfinput import bench

    cpu_clock = cpu_clock or bench.process_cpu_seconds

    iterator = feed(source)
    out: list[Window] = []
    try:
        if warmup_batches:
            warm = bench.measure_window(
                iterator,
                batches=warmup_batches,
                step=run,
                batch_size=batch_size,
                clock=clock,
                cpu_clock=cpu_clock,
                sync=sync,
            )
            if warm.batches < warmup_batches:
                raise DataError(
                    f"step: the data ended after {warm.batches} warm-up batch(es); it needs "
                    f"more than {warmup_batches} batches"
                )
        for i in range(windows):
            w = bench.measure_window(
                iterator,
                batches=window_batches,
                step=run,
                batch_size=batch_size,
                clock=clock,
                cpu_clock=cpu_clock,
                sync=sync,
            )
            out.append(dataclasses.replace(w, round=i))
            if report is not None and i < windows - 1 and report(i, w.examples_per_s):
                break
    finally:
        close = getattr(iterator, "close", None)
        if callable(close):
            close()
    return out


# ------------------------------------------------------------------- keras
def keras_step(model: Any) -> Step:
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
        return Step(kind="keras", name=name, fn=train, backend=backend, accepts_packed=packed)

    def run(batch: Any) -> Any:
        return train(_to_numpy_tree(batch))

    def prepare(config: PipelineConfig) -> Step:
        size = config.device_prefetch
        if backend != "jax" or size <= 0:
            return base
        return dataclasses.replace(
            base,
            prepare_fn=None,
            details={"device_prefetch": size},
            run_windows=lambda source, **kw: _loop_windows(
                source,
                feed=lambda s: _device_feed(s, size=size),
                run=train,
                sync=None,  # train_on_batch returns numpy logs: the step has finished
                **kw,
            ),
        )

    base = Step(
        kind="keras",
        name=name,
        fn=run,
        backend=backend,
        feeds_device=backend == "jax",
        prepare_fn=prepare,
        accepts_packed=packed,
    )
    return base


def _takes_packed(model: Any) -> bool:
    """Whether ``model`` unpacks packed batches itself (`tfinput.models.RankingModel`)."""
    return getattr(model, "packed_layout", None) is not None


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

        from tfinput import bench

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
                w = bench.Window(
                    round=i,
                    batches=batches,
                    examples=batches * (batch_size or 0),
                    seconds=seconds,
                    cpu_seconds=cpu,
                    batch_seconds=(seconds / batches,) * batches,
                    wait_seconds=None,
                    peak_rss_bytes=bench.current_rss_bytes(),
                )
                out.append(w)
                if report is not None and report(i, w.examples_per_s):
                    self.model.stop_training = True

        return FitTimer()


def _static_batch_size(source: Any) -> int | None:
    import tensorflow as tf

    spec = getattr(source, "element_spec", None)
    if spec is None:
        return None
    for s in tf.nest.flatten(spec):
        shape = getattr(s, "shape", None)
        if shape is not None and shape.rank and shape[0] is not None:
            return int(shape[0])
    return None


def keras_fit_step(model: Any) -> Step:
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
        def run_windows(
            source: Any,
            *,
            batch_size: int | None = None,
            warmup_batches: int,
            windows: int,
            window_batches: int,
            clock: Callable[[], float] = time.perf_counter,
            cpu_clock: Callable[[], float] | None = None,
            report: Callable[[int, float], bool] | None = None,
            callbacks: Iterable[Any] = (),
        ) -> list[Window]:
            from tfinput import bench

            dataset = source
            if not hasattr(dataset, "element_spec"):
                raise ConfigError(
                    "keras_fit step: model.fit needs a tf.data.Dataset (a tfinput Pipeline "
                    f"or a callable config -> Dataset), got {type(source).__name__}"
                )
            size = batch_size or _static_batch_size(dataset)
            if size is None:
                raise ConfigError(
                    "keras_fit step: cannot count the examples of model.fit's batches: "
                    "build with PipelineConfig.drop_remainder=True (or give a dataset with a "
                    "static batch dimension)"
                )
            batches = max(k, math.ceil(window_batches / k) * k)
            warmup_epochs = max(1, math.ceil(warmup_batches / batches))
            out: list[Window] = []
            timer = _FitTimer.make(
                warmup_epochs=warmup_epochs,
                batches=batches,
                batch_size=size,
                clock=clock,
                cpu_clock=cpu_clock or bench.process_cpu_seconds,
                report=report,
                out=out,
            )
            if model.steps_per_execution != k:
                model.steps_per_execution = k
                model.train_function = None  # retraced by fit with the new k
            model.fit(
                dataset,
                epochs=warmup_epochs + windows,
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

        return Step(
            kind="keras_fit",
            name=f"keras fit {getattr(model, 'name', 'model')} ({backend})",
            fn=per_batch.fn,
            backend=backend,
            run_windows=run_windows,
            prepare_fn=lambda config: make_step(config.steps_per_execution),
            details={"steps_per_execution": k},
            accepts_packed=_takes_packed(model),
        )

    return make_step(int(getattr(model, "steps_per_execution", 1) or 1))


# --------------------------------------------------------------------- jax
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
    put = _jax_put(sharding)

    def advance(device_batch: Any) -> None:
        holder[0] = jitted(holder[0], device_batch)

    def sync() -> None:
        jax.block_until_ready(holder[0])

    def one(batch: Any) -> Any:
        advance(put(_to_numpy_tree(batch)))
        sync()
        return holder[0]

    name = getattr(fn, "__name__", None) or getattr(
        getattr(fn, "__wrapped__", None), "__name__", "step"
    )

    def make_step(size: int) -> Step:
        return Step(
            kind="jax",
            name=f"jax {name}",
            fn=one,
            backend="jax",
            feeds_device=True,
            prepare_fn=lambda config: make_step(config.device_prefetch),
            run_windows=lambda source, **kw: _loop_windows(
                source,
                feed=lambda s: _device_feed(s, size=size, sharding=sharding),
                run=advance,
                sync=sync,
                **kw,
            ),
            details={"device_prefetch": size},
            state_fn=lambda: holder[0],
        )

    return make_step(0)


# ------------------------------------------------------------ other kinds
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
        accepts_packed=True,
    )


def _call_factory(factory: Callable[..., Any], schema: Any) -> Any:
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


def _keras_model(model: str | None, schema: Any, option: str) -> Any:
    from tfinput._cli_util import load_object

    if not model:
        raise ConfigError(f"--step {option} needs --model MODULE:FUNCTION")
    factory = load_object(model, "--model")
    if hasattr(factory, "train_on_batch"):
        return factory
    return _call_factory(factory, schema)


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
      schema: The pipeline's `tfinput.Schema` (for ``ranking``/``ranking_fit``, and
        passed to a ``--model`` or ``--step-fn`` factory that accepts it).
      model: ``MODULE:FUNCTION`` returning a compiled Keras model (``keras``,
        ``keras_fit``).
      step_fn: ``MODULE:FUNCTION`` of a step function (``function``), or of a factory
        returning ``(step_fn, initial_state)`` (``jax``).
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
    if kind in ("ranking", "ranking_fit"):
        if schema is None:
            other = "keras" if kind == "ranking" else "keras_fit"
            raise ConfigError(
                f"the {kind} step needs a tfinput pipeline (it builds its model from the "
                f"schema); use --step {other} --model MODULE:FUNCTION for other datasets"
            )
        from tfinput import models

        built = models.ranking_model(schema)
        return keras_step(built) if kind == "ranking" else keras_fit_step(built)
    if kind == "keras":
        return keras_step(_keras_model(model, schema, "keras"))
    if kind == "keras_fit":
        return keras_fit_step(_keras_model(model, schema, "keras_fit"))
    if kind == "function":
        if not step_fn:
            raise ConfigError("--step function needs --step-fn MODULE:FUNCTION")
        return function_step(load_object(step_fn, "--step-fn"))
    if kind == "jax":
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
