"""Capture a profiler trace of a pipeline feeding a training step.

`capture` iterates a pipeline with a step (`tfinput.steps`) for a warm-up, then
profiles N steps, each wrapped in a step marker with ``next()`` inside it::

    with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
        batch = next(iterator)
        step(batch)

which is what xprof needs to split step time into input, compute and other. The
trace is a standard TensorBoard profile directory (``logdir/plugins/profile/<run>/
<host>.xplane.pb``) that TensorBoard or xprof open as is. Next to the trace,
``tfinput_capture.json`` records how it was taken (TF version, cores, warm-up, steps,
step kind, wall-clock step times), so numbers from different machines or settings
are never compared blindly.

A step that runs on JAX (``--step jax``, or Keras on the JAX backend) is also traced by
JAX's own profiler (`jax.profiler`), since TensorFlow's does not see its computation:
each profiled step is marked in both traces (with a ``tfinput/next`` span around its
``next()`` in JAX's, the wait for input), and JAX's trace is kept in the run
directory (``<run>/jax/``, a TensorBoard log directory of its own) for
`profiles._analysis` to read device compute, host-to-device transfer and, when
TensorFlow's trace has no complete step, the steps themselves from.

For any other step, the capture records which TensorFlow ops read or write which large
variables, with their sizes (`profiles._variables`: ``variable_ops`` in
``tfinput_capture.json``), so that the analysis can name a whole read or update of an
embedding table inside the step.

A step that owns the training loop (``keras_fit``: ``model.fit``) cannot be wrapped
that way; its ``fit`` call gets a callback instead that starts the profiler at the
profiled epoch and marks each call into the train function (``steps_per_execution``
batches; ``steps`` counts calls) from the end of the previous call to the end of its own, so that the time
Keras spent fetching the batch (in the train function on TensorFlow, before it on JAX)
falls inside the marker and the input-wait analysis still works. With
``steps_per_execution`` > 1 Keras fetches the batches in a loop inside the train
function (``IteratorGetNextAsOptional``) and xprof (2.24) finds no complete step in such
a trace: profile with ``steps_per_execution`` 1 for the step breakdown.

Tracer levels: TensorFlow 2.21's ``tf.profiler.experimental.start`` ignores
``ProfilerOptions`` (it logs "host_tracer_level expects an i value" and keeps its
defaults), so no options are passed: the defaults (host tracer level 2, Python
tracer off) record the tf.data iterator events the stage analysis needs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import platform
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from profiles._analysis import CAPTURE_METADATA
from profiles._jax_trace import JAX_TRACE_DIR, NEXT_SPAN
from profiles._variables import record_variable_ops
from profiles._xplane import ProfileError
from profiles._xprof import TESTED_XPROF
from tfinput import steps
from tfinput._src.measurement.probes import available_cpus
from tfinput._src.measurement.windows import CAPTURE_PLAN, WindowPlan, warm_up
from tfinput.errors import ConfigError


@dataclasses.dataclass(frozen=True, kw_only=True)
class CaptureConfig:
    """How many steps to run and profile.

    Attributes:
      steps: Steps profiled. xprof may leave out a step cut by the profiler's start
        or stop, so profile at least 3; about 10 is a good number. More steps give
        steadier averages but larger traces (up to a few MB per step for a Keras
        model) and a slower analysis.
      warmup: Steps run before the profiler starts, so that function tracing, file
        opening and buffer filling are not profiled. Too few and the first profiled
        steps show start-up costs; too many only cost time.
      step_name: Name of the step markers (``"train"``); xprof shows ``"train 12"``.

    The defaults are `tfinput._src.measurement.windows.CAPTURE_PLAN`; `window_plan` gives the capture as
    the `tfinput.bench.WindowPlan` that bench and tuner measure with.
    """

    steps: int = CAPTURE_PLAN.window_batches
    warmup: int = CAPTURE_PLAN.warmup_batches
    step_name: str = "train"

    def __post_init__(self) -> None:
        for name, minimum in (("steps", 1), ("warmup", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(
                    f"CaptureConfig.{name}: expected an int >= {minimum}, got {value!r}"
                )
        if not isinstance(self.step_name, str) or not self.step_name.strip():
            raise ConfigError(
                f"CaptureConfig.step_name: expected a non-empty string, got {self.step_name!r}"
            )

    @property
    def window_plan(self) -> WindowPlan:
        """``warmup`` untimed steps, then one window of ``steps`` profiled steps."""
        return WindowPlan(warmup_batches=self.warmup, windows=1, window_batches=self.steps)

    def replace(self, **changes: Any) -> CaptureConfig:
        """A copy with some fields changed (validated like the constructor)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(
                f"CaptureConfig has no field(s) {sorted(unknown)}; fields: "
                f"{[f.name for f in dataclasses.fields(self)]}"
            )
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CaptureConfig:
        """Inverse of `to_dict`."""
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ConfigError(f"CaptureConfig: unknown field(s) {sorted(unknown)}")
        return cls(**data)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CaptureResult:
    """Where a capture was written and how it was taken.

    Attributes:
      logdir: The TensorBoard log directory (open it with ``tensorboard --logdir``).
      run_dir: The profile run directory inside it (``plugins/profile/<timestamp>``).
      trace_files: The ``.xplane.pb`` files written (one per host).
      config: Steps and warm-up used.
      step: Description of the training step (`tfinput.steps.Step.describe`).
      wall_step_ms: Wall-clock duration of each profiled step, profiler overhead
        included (the trace has the precise numbers).
      metadata: Everything recorded in ``tfinput_capture.json``.
    """

    logdir: Path
    run_dir: Path
    trace_files: tuple[Path, ...]
    config: CaptureConfig
    step: Mapping[str, object]
    wall_step_ms: tuple[float, ...]
    metadata: Mapping[str, object]


def _as_step(step: steps.Step | Callable[[Any], object] | None) -> steps.Step:
    if step is None:
        return steps.input_only()
    if isinstance(step, steps.Step):
        return step
    if callable(step):
        return steps.function_step(step)
    raise ConfigError(
        f"capture: step must be a tfinput.steps.Step, a callable or None, got {type(step).__name__}"
    )


def _as_iterable(pipeline: Iterable[object] | Callable[[], Iterable[object]]) -> Iterable[object]:
    dataset = pipeline
    if callable(pipeline) and not isinstance(pipeline, Iterable):
        dataset = pipeline()
    if not isinstance(dataset, Iterable):
        raise ConfigError(
            "capture: pipeline must be a tf.data.Dataset (or any iterable of batches) or a "
            f"zero-argument callable returning one, got {type(dataset).__name__}"
        )
    return dataset


def _trace_files(logdir: Path) -> dict[Path, float]:
    root = logdir / "plugins" / "profile"
    if not root.is_dir():
        return {}
    return {p: p.stat().st_mtime for p in root.glob("*/*.xplane.pb")}


def _describe_pipeline(dataset: object) -> str:
    spec = getattr(dataset, "element_spec", None)
    text = f"{type(dataset).__name__}" + (f" element_spec={spec}" if spec is not None else "")
    return text if len(text) <= 2000 else text[:2000] + "..."


def capture(
    pipeline: Iterable[object] | Callable[[], Iterable[object]],
    step: steps.Step | Callable[[Any], object] | None = None,
    *,
    logdir: str | os.PathLike[str],
    config: CaptureConfig | None = None,
    clock: Callable[[], float] = time.perf_counter,
    **overrides: Any,
) -> CaptureResult:
    """Profile a pipeline feeding a training step.

    Args:
      pipeline: A ``tf.data.Dataset`` (any iterable of batches works, e.g. a
        distributed dataset), or a zero-argument callable returning one.
      step: A `tfinput.steps.Step` (``input_only()``, ``keras_step(model)``,
        ``function_step(fn)``, ``simulated_step(seconds)``), a plain callable
        ``step(batch)`` (wrapped with ``function_step``), or None for input only.
      logdir: TensorBoard log directory to write the profile into.
      config: Steps and warm-up (default `CaptureConfig()`).
      clock: Clock for the wall-clock step times (injectable for tests).
      **overrides: Fields of `CaptureConfig` to override (``steps=8, warmup=2``).

    Returns:
      A `CaptureResult` naming the files written.

    Raises:
      ConfigError: Bad arguments.
      ProfileError: The pipeline ran out of batches, another profiler session is
        running, or no trace was written.
    """
    cfg = (
        (config or CaptureConfig()).replace(**overrides)
        if overrides
        else (config or CaptureConfig())
    )
    the_step = _as_step(step)
    dataset = _as_iterable(pipeline)
    logdir = Path(logdir)
    jax_trace = _JaxTrace.of(the_step)
    try:
        return _capture(the_step, dataset, cfg, logdir, clock, jax_trace)
    finally:
        jax_trace.discard()


def _capture(
    the_step: steps.Step,
    dataset: Iterable[object],
    cfg: CaptureConfig,
    logdir: Path,
    clock: Callable[[], float],
    jax_trace: _JaxTrace,
) -> CaptureResult:
    """`capture` once its arguments are checked: a loop-owning step through its
    callback, any other step in marked steps after the warm-up."""
    if the_step.kind == "keras_fit":
        before = _trace_files(logdir)
        started = datetime.datetime.now(datetime.timezone.utc)
        durations = _capture_owned_loop(the_step, dataset, cfg, logdir, clock, jax_trace)
        return _finish(the_step, dataset, cfg, logdir, before, started, durations, None, jax_trace)

    plan = cfg.window_plan
    iterator = iter(dataset)
    done = warm_up(iterator, plan.warmup_batches, the_step)
    if done < plan.warmup_batches:
        raise ProfileError(
            f"the pipeline ran out after {done} batches during the warm-up; capture needs "
            f"{cfg.warmup + cfg.steps} (warm-up {cfg.warmup} + steps {cfg.steps}): .repeat() "
            "the dataset or lower warmup/steps"
        )
    before = _trace_files(logdir)
    started = datetime.datetime.now(datetime.timezone.utc)
    _start_profiler(logdir, jax_trace)
    durations, ran_out_at = _profile_steps(
        iterator, the_step, plan, cfg.step_name, clock, jax_trace
    )
    return _finish(
        the_step, dataset, cfg, logdir, before, started, durations, ran_out_at, jax_trace
    )


def _profile_steps(
    iterator: Iterator[object],
    step: steps.Step,
    plan: WindowPlan,
    step_name: str,
    clock: Callable[[], float],
    jax_trace: _JaxTrace,
) -> tuple[list[float], int | None]:
    """Run ``plan.window_batches`` steps in step markers numbered after the warm-up,
    then stop the profiler; returns each step's wall time in ms and the step at which
    the data ran out (None if it did not)."""
    import tensorflow as tf

    durations: list[float] = []
    ran_out_at: int | None = None
    try:
        for i in range(plan.window_batches):
            t0 = clock()
            n = plan.warmup_batches + i
            with (
                tf.profiler.experimental.Trace(step_name, step_num=n, _r=1),
                jax_trace.marker(step_name, n),
            ):
                try:
                    with jax_trace.span(NEXT_SPAN):
                        batch = next(iterator)
                except StopIteration:
                    ran_out_at = i
                    break
                step(batch)
            durations.append((clock() - t0) * 1e3)
    finally:
        jax_trace.stop()
        tf.profiler.experimental.stop()
    return durations, ran_out_at


def _start_profiler(logdir: Path, jax_trace: _JaxTrace) -> None:
    import tensorflow as tf

    try:
        tf.profiler.experimental.start(str(logdir))
    except Exception as e:  # TF raises several error types here
        raise ProfileError(
            f"cannot start the profiler ({type(e).__name__}: {e}); is another profiler "
            "session running in this process? Stop it with tf.profiler.experimental.stop()"
        ) from e
    try:
        jax_trace.start()
    except BaseException:
        tf.profiler.experimental.stop()
        raise


class _JaxTrace:
    """JAX's own trace of the profiled steps, for a step that runs on JAX (TensorFlow's
    profiler does not see its computation): written to a temporary directory, each step
    inside a ``jax.profiler.StepTraceAnnotation`` named like the TensorFlow marker, then
    moved into the TensorFlow run directory (`profiles._jax_trace.JAX_TRACE_DIR`). For
    any other step every method does nothing."""

    def __init__(self, profiler: Any = None) -> None:
        self.profiler = profiler
        self.directory: Path | None = None
        self.active = False

    @classmethod
    def of(cls, step: steps.Step) -> _JaxTrace:
        if step.backend != "jax":
            return cls()
        try:
            import jax.profiler
        except ImportError:  # a JAX step without JAX cannot have run
            return cls()
        return cls(jax.profiler)

    def start(self) -> None:
        if self.profiler is None:
            return
        self.directory = Path(tempfile.mkdtemp(prefix="tfinput-jax-trace-"))
        kwargs: dict[str, object] = {}
        if hasattr(self.profiler, "ProfileOptions"):  # JAX 0.6+: no Python tracer
            options = self.profiler.ProfileOptions()
            options.python_tracer_level = 0
            kwargs["profiler_options"] = options
        try:
            self.profiler.start_trace(str(self.directory), **kwargs)
        except Exception as e:
            raise ProfileError(
                f"cannot start JAX's profiler ({type(e).__name__}: {e}); is a "
                "jax.profiler trace already running? Stop it with jax.profiler.stop_trace()"
            ) from e
        self.active = True

    def marker(self, name: str, step_num: int) -> Any:
        if not self.active:
            return contextlib.nullcontext()
        return self.profiler.StepTraceAnnotation(name, step_num=step_num)

    def span(self, name: str) -> Any:
        """A plain span in JAX's trace (the training loop's ``next()``)."""
        if not self.active:
            return contextlib.nullcontext()
        return self.profiler.TraceAnnotation(name)

    def stop(self) -> None:
        if self.active:
            self.active = False
            self.profiler.stop_trace()

    def discard(self) -> None:
        """Remove the temporary trace if it was not moved (the capture failed)."""
        self.stop()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def move_into(self, run_dir: Path) -> str | None:
        """Move the trace into ``run_dir``; returns its path relative to it."""
        if self.directory is None:
            return None
        try:
            runs = sorted(p.parent for p in self.directory.rglob("*.xplane.pb"))
            if not runs:
                return None
            target = run_dir / JAX_TRACE_DIR / "plugins" / "profile" / runs[-1].name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(runs[-1]), str(target))
            return JAX_TRACE_DIR
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


def _capture_owned_loop(
    step: steps.Step,
    dataset: Iterable[object],
    cfg: CaptureConfig,
    logdir: Path,
    clock: Callable[[], float],
    jax_trace: _JaxTrace,
) -> list[float]:
    """Profile a loop-owning step (``model.fit``) through a Keras callback; returns
    the wall time of every marked call, in ms."""
    import tensorflow as tf

    from tfinput._src.measurement.windows import batch_rows

    if not isinstance(dataset, tf.data.Dataset):
        raise ConfigError(
            f"capture: the {step.kind} step runs model.fit, which needs a tf.data.Dataset, "
            f"got {type(dataset).__name__}"
        )
    durations: list[float] = []
    markers = _step_markers(cfg, logdir, clock, durations, jax_trace)
    # One marker per call into the train function: steps_per_execution batches.
    per_call = int(step.describe().get("steps_per_execution", 1))
    first = next(iter(dataset.take(1)), None)
    if first is None:
        raise ProfileError("the pipeline produced no batch; capture needs at least one")
    plan = cfg.window_plan
    try:
        step.run_windows(
            dataset,
            plan=dataclasses.replace(plan, window_batches=plan.window_batches * per_call),
            batch_size=max(batch_rows(first), 1),
            clock=clock,
            callbacks=[markers],
        )
    finally:
        if markers.active:  # fit failed inside the profiled epoch
            markers.close_marker()
            jax_trace.stop()
            tf.profiler.experimental.stop()
    return durations


def _step_markers(
    cfg: CaptureConfig,
    logdir: Path,
    clock: Callable[[], float],
    durations: list[float],
    jax_trace: _JaxTrace,
) -> Any:
    """A Keras callback that starts the profiler at the last (timed) epoch and marks
    each call into the train function, appending its wall time (ms) to ``durations``."""
    import keras
    import tensorflow as tf

    class Markers(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.active = False
            self.trace: Any = None
            self.t0 = 0.0
            self.marked = 0

        def open_marker(self, step_num: int) -> None:
            self.trace = contextlib.ExitStack()
            self.trace.enter_context(
                tf.profiler.experimental.Trace(cfg.step_name, step_num=step_num, _r=1)
            )
            self.trace.enter_context(jax_trace.marker(cfg.step_name, step_num))
            self.t0 = clock()

        def close_marker(self) -> None:
            if self.trace is not None:
                self.trace.close()
                durations.append((clock() - self.t0) * 1e3)
                self.trace = None

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            if epoch == self.params["epochs"] - 1:  # the one timed epoch
                _start_profiler(logdir, jax_trace)
                self.active = True
                self.open_marker(cfg.warmup)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if not self.active:
                return
            self.close_marker()
            self.marked += 1
            if batch + 1 < self.params["steps"]:
                self.open_marker(cfg.warmup + self.marked)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if self.active:
                self.close_marker()
                self.active = False
                jax_trace.stop()
                tf.profiler.experimental.stop()

    return Markers()


def _fit_note(step: steps.Step) -> str:
    k = step.describe().get("steps_per_execution", 1) if step.kind == "keras_fit" else 1
    if k <= 1:
        return ""
    return (
        f"; model.fit ran steps_per_execution {k}: one marker per call of {k} batches, and "
        "xprof may find no complete step in such calls (profile with steps_per_execution 1 "
        "for the step breakdown)"
    )


def _variable_ops(the_step: steps.Step) -> dict[str, object]:
    """The variables' sizes the trace lacks (`profiles._variables`), for a step that runs
    TensorFlow graphs; none to look for in a step that runs none (input only, simulated);
    nothing recorded for a JAX step."""
    if the_step.backend == "jax":
        return {}
    if the_step.kind in ("input_only", "simulated"):
        return {"variable_ops": []}
    return {"variable_ops": record_variable_ops()}


def _finish(
    the_step: steps.Step,
    dataset: Iterable[object],
    cfg: CaptureConfig,
    logdir: Path,
    before: dict[Path, float],
    started: datetime.datetime,
    durations: list[float],
    ran_out_at: int | None,
    jax_trace: _JaxTrace,
) -> CaptureResult:
    import tensorflow as tf

    needed = cfg.warmup + cfg.steps
    after = _trace_files(logdir)
    written = sorted(p for p, mtime in after.items() if before.get(p) != mtime)
    if not written:
        raise ProfileError(
            f"the profiler wrote no trace under {logdir / 'plugins' / 'profile'}; check that "
            "the directory is writable"
        )
    run_dir = written[-1].parent
    trace_files = tuple(p for p in written if p.parent == run_dir)
    jax_dir = jax_trace.move_into(run_dir)
    if ran_out_at is not None:
        raise ProfileError(
            f"the pipeline ran out after {cfg.warmup + ran_out_at} batches (warm-up "
            f"{cfg.warmup} + {ran_out_at} profiled steps; {needed} needed): .repeat() the "
            f"dataset or lower warmup/steps. The partial trace is in {run_dir}"
        )

    metadata = {
        "tool": "tfinput profiles.capture",
        "created_utc": started.isoformat(timespec="seconds"),
        "config": cfg.to_dict(),
        "step": the_step.describe(),
        "pipeline": _describe_pipeline(dataset),
        "host": socket.gethostname(),
        "cpu_count": available_cpus(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "tensorflow": tf.__version__,
        "tested_xprof": TESTED_XPROF,
        "wall_step_ms": durations,
        **({"jax_trace": jax_dir} if jax_dir else {}),
        **_variable_ops(the_step),
        "note": "wall_step_ms include profiler overhead; the trace has the precise times"
        + _fit_note(the_step),
    }
    (run_dir / CAPTURE_METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
    return CaptureResult(
        logdir=logdir,
        run_dir=run_dir,
        trace_files=trace_files,
        config=cfg,
        step=the_step.describe(),
        wall_step_ms=tuple(durations),
        metadata=metadata,
    )
