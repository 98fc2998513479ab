"""The `Step` object every step kind returns, and the names of the kinds."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tfinput._src.core.errors import ConfigError

if TYPE_CHECKING:
    from tfinput._src.core.config import PipelineConfig
    from tfinput._src.measurement.windows import Window

__all__ = [
    "CLI_STEPS",
    "STEP_CLASSES",
    "STEP_KINDS",
    "FunctionStep",
    "InputOnlyStep",
    "JaxStep",
    "KerasFitStep",
    "KerasStep",
    "RunWindows",
    "SimulatedStep",
    "Step",
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
#: cpu_clock, report) -> list[Window]``; a measurement with a time target also passes
#: ``window_seconds``.
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
      feeds_sparsecore: The step runs SparseCore preprocessing on worker threads and
        honours ``config.sparsecore_workers`` and ``config.sparsecore_prefetch``
        (`tfinput.sparsecore.sparsecore_step`).
      prepare_fn: ``config -> Step``: the step set up for a config's feeding knobs
        (`prepare`); None: the step is the same for every config.
      run_windows: When set, the step owns the training loop (``model.fit``, a JAX loop
        with device prefetch): ``run_windows(source, *, batch_size, warmup_batches,
        windows, window_batches, clock, cpu_clock, report) -> list[bench.Window]``
        where ``source`` is a `tf.data.Dataset` or an iterable of batches (and
        ``window_seconds=`` when the measurement sizes windows by time).
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
    feeds_sparsecore: bool = False
    prepare_fn: Callable[[PipelineConfig], Step] | None = None
    run_windows: RunWindows | None = None
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    state_fn: Callable[[], Any] | None = None
    accepts_packed: bool = False

    def __post_init__(self) -> None:
        fixed = type(self).__dataclass_fields__["kind"].default
        if fixed is not dataclasses.MISSING and self.kind != fixed:
            raise ConfigError(f"{type(self).__name__}: its kind is {fixed!r}, not {self.kind!r}")

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

    def describe(self) -> dict[str, Any]:
        """JSON-ready description, recorded next to every measurement."""
        out: dict[str, Any] = {"kind": self.kind, "name": self.name}
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


# The kinds. Each is a `Step` whose ``kind`` is fixed; the constructors in
# `tfinput.steps` make them. (A plain `Step` with a ``kind`` name is still accepted.)
@dataclasses.dataclass(frozen=True, kw_only=True)
class InputOnlyStep(Step):
    """Consumes the batch and does nothing else (the pipeline's own throughput)."""

    kind: str = "input_only"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FunctionStep(Step):
    """A user's callable run on every batch."""

    kind: str = "function"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimulatedStep(Step):
    """A fixed device time per batch with the host CPUs free."""

    kind: str = "simulated"


@dataclasses.dataclass(frozen=True, kw_only=True)
class KerasStep(Step):
    """``model.train_on_batch`` on a compiled Keras model."""

    kind: str = "keras"


@dataclasses.dataclass(frozen=True, kw_only=True)
class KerasFitStep(Step):
    """``model.fit`` on the pipeline's dataset: the step owns the loop."""

    kind: str = "keras_fit"


@dataclasses.dataclass(frozen=True, kw_only=True)
class JaxStep(Step):
    """A user's jitted ``fn(state, batch) -> state`` with device prefetch."""

    kind: str = "jax"


#: The class of each kind in `STEP_KINDS`.
STEP_CLASSES: dict[str, type[Step]] = {
    c.kind: c  # type: ignore[misc]
    for c in (InputOnlyStep, KerasStep, KerasFitStep, JaxStep, FunctionStep, SimulatedStep)
}
