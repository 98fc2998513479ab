"""The `Step` object every step kind returns, the names of the kinds, and the steps
that need no framework of their own.

- `Step` and its kind classes, `STEP_KINDS` and `CLI_STEPS`;
- the steps without a framework: `input_only`, `function_step`, `simulated_step`;
- feeding batches to a JAX device (`device_feed`) and the window loop of steps that
  feed it themselves (`loop_windows`), shared with the Keras steps
  (`tfinput._src.measurement.steps.keras`) and the SparseCore feed;
- the JAX step (`jax_step`): a user's jitted ``fn(state, batch) -> state`` fed by
  tfinput.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from tfinput._src.core.errors import ConfigError, DataError
from tfinput._src.measurement.probes import process_cpu_seconds
from tfinput._src.measurement.windows import Window, WindowPlan, consecutive_windows

if TYPE_CHECKING:
    from tfinput._src.core.config import PipelineConfig


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

#: ``run_windows(source, *, plan, batch_size, clock, cpu_clock, report) -> list[Window]``:
#: the windows of ``plan`` (a `WindowPlan`, settled once by the measurement's entry).
RunWindows = Callable[..., "list[Window]"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    """One training step over a batch.

    Attributes:
      kind: One of `STEP_KINDS` (a kind class, `KerasStep` say, fills in its own).
      name: Human-readable description used in reports.
      fn: Callable run on each batch; returns when the step has finished.
      device_time_s: For simulated steps, the device time per batch, else None.
      backend: The Keras (or JAX) backend the step runs on; None when it has none.
      feeds_device: The step puts batches on the device itself and honours
        ``config.device_prefetch``.
      feeds_sparsecore: The step runs SparseCore preprocessing on worker threads and
        honours ``config.sparsecore_workers`` and ``config.sparsecore_prefetch``
        (`tfinput.sparsecore.sparsecore_step`).
      prepare_fn: ``config -> Step``: the step set up for a config's feeding knobs
        (`prepare`); None: the step is the same for every config.
      run_windows: When set, the step owns the training loop (``model.fit``, a JAX loop
        with device prefetch): ``run_windows(source, *, plan, batch_size, clock,
        cpu_clock, report) -> list[bench.Window]`` where ``source`` is a
        `tf.data.Dataset` or an iterable of batches and ``plan`` the measurement's
        `WindowPlan`, handed down as it is.
      details: Extra fields for `describe` (``steps_per_execution``, ...).
      state_fn: For steps that carry a state (``jax``), returns the current one.
      accepts_packed: The step takes batches in the ``packed`` layout as well as per
        feature (input only, simulated, tfinput's ranking model), so the tuner may
        search ``layout``. A step of your own that unpacks (`tfinput.layout.unpack`,
        `tfinput.layout.UnpackFeatures`) can say so with
        ``dataclasses.replace(step, accepts_packed=True)``.
    """

    kind: str = ""
    name: str
    fn: Callable[[Any], Any]
    device_time_s: float | None = None
    backend: str | None = None
    feeds_device: bool = False
    feeds_sparsecore: bool = False
    prepare_fn: Callable[[PipelineConfig], Step] | None = None
    run_windows: RunWindows | None = None
    details: dict[str, object] = dataclasses.field(default_factory=dict)
    state_fn: Callable[[], Any] | None = None
    accepts_packed: bool = False

    #: The kind a kind class fixes (``class KerasStep(Step, kind="keras")``); "" on `Step`.
    fixed_kind: ClassVar[str] = ""

    def __init_subclass__(cls, *, kind: str = "", **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.fixed_kind = kind

    def __post_init__(self) -> None:
        fixed = type(self).fixed_kind
        if fixed and not self.kind:
            object.__setattr__(self, "kind", fixed)
        elif fixed and self.kind != fixed:
            raise ConfigError(f"{type(self).__name__}: its kind is {fixed!r}, not {self.kind!r}")
        elif not self.kind:
            raise ConfigError(f"Step {self.name!r}: a kind is needed, one of {list(STEP_KINDS)}")

    @classmethod
    def of(cls, step: Step | Callable[[Any], Any] | None) -> Step:
        """``step`` as a `Step`: a step as it is, None as `input_only`'s step, any
        other callable as a ``function`` step that calls it on every batch as it is.

        Raises:
          ConfigError: ``step`` is not callable.
        """
        if isinstance(step, Step):
            return step
        if step is None:
            return InputOnlyStep(name="input only", fn=_nothing, accepts_packed=True)
        if not callable(step):
            raise ConfigError(f"expected a tfinput Step or a callable, got {type(step).__name__}")
        return FunctionStep(name=getattr(step, "__name__", str(step)), fn=step)

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

    def describe(self) -> dict[str, object]:
        """JSON-ready description, recorded next to every measurement."""
        out: dict[str, object] = {"kind": self.kind, "name": self.name}
        if self.device_time_s is not None:
            out["device_time_s"] = self.device_time_s
        if self.backend is not None:
            out["backend"] = self.backend
        if self.feeds_device:
            out["feeds_device"] = True
        if self.feeds_sparsecore:
            out["feeds_sparsecore"] = True
        out.update(copy.deepcopy(self.details))  # a snapshot: details may be live (sparsecore)
        return out


def _nothing(batch: Any) -> None:
    del batch


# The kinds. Each is a `Step` whose ``kind`` is fixed (``class X(Step, kind=...)``); the
# constructors in `tfinput.steps` make them. (A plain `Step` with a ``kind`` name is still
# accepted.)
class InputOnlyStep(Step, kind="input_only"):
    """Consumes the batch and does nothing else (the pipeline's own throughput)."""


class FunctionStep(Step, kind="function"):
    """A user's callable run on every batch."""


class SimulatedStep(Step, kind="simulated"):
    """A fixed device time per batch with the host CPUs free."""


class KerasStep(Step, kind="keras"):
    """``model.train_on_batch`` on a compiled Keras model."""


class KerasFitStep(Step, kind="keras_fit"):
    """``model.fit`` on the pipeline's dataset: the step owns the loop."""


class JaxStep(Step, kind="jax"):
    """A user's jitted ``fn(state, batch) -> state`` with device prefetch."""


#: The class of each kind in `STEP_KINDS`.
STEP_CLASSES: dict[str, type[Step]] = {
    c.fixed_kind: c
    for c in (InputOnlyStep, KerasStep, KerasFitStep, JaxStep, FunctionStep, SimulatedStep)
}


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


def to_numpy_tree(batch: Any) -> Any:
    """One tree map: TensorFlow tensors to numpy (zero-copy on CPU), others as they are."""
    import tensorflow as tf

    return tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, batch)


def numpy_source(source: Iterable[object]) -> Iterable[object]:
    """numpy batches of a `tf.data.Dataset` (``as_numpy_iterator``) or of any iterable."""
    if hasattr(source, "as_numpy_iterator"):
        return source.as_numpy_iterator()
    return (to_numpy_tree(b) for b in source)


def jax_put(sharding: Any) -> Callable[[Any], Any]:
    """``batch -> jax.device_put(batch, sharding)``."""
    import jax

    return lambda batch: jax.device_put(batch, sharding)


def device_feed(source: Iterable[object], *, size: int, sharding: Any = None) -> Iterator[object]:
    """Batches of ``source`` on the JAX device: ``size`` ahead on a thread when > 0,
    else converted and put on the consumer's thread when it asks."""
    from tfinput._src.core.device_prefetch import to_jax

    if size > 0:
        return to_jax(source, size=size, sharding=sharding)
    put = jax_put(sharding)
    return (put(b) for b in numpy_source(source))


def loop_windows(
    source: Iterable[object],
    *,
    feed: Callable[[Any], Iterator[object]],
    run: Callable[[Any], Any],
    sync: Callable[[], None] | None,
    plan: WindowPlan,
    batch_size: int | None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] | None = None,
    report: Callable[[int, float], bool] | None = None,
) -> list[Window]:
    """Windows of a step that feeds the device itself: ``run`` on every batch of
    ``feed(source)``, ``sync()`` before each window's end is taken (the
    `tfinput.steps.Step.run_windows` of such steps), cut as ``plan`` says (its
    ``window_seconds`` sizes the windows by time).

    Raises:
      DataError: the data ended during the warm-up.
    """

    def ran_out(done: int) -> DataError:
        return DataError(
            f"step: the data ended after {done} warm-up batch(es); it needs "
            f"more than {plan.warmup_batches} batches"
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
