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

Tracer levels: TensorFlow 2.21's ``tf.profiler.experimental.start`` ignores
``ProfilerOptions`` (it logs "host_tracer_level expects an i value" and keeps its
defaults), so no options are passed: the defaults (host tracer level 2, Python
tracer off) record the tf.data iterator events the stage analysis needs.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from profiles.analysis import CAPTURE_METADATA, TESTED_XPROF
from profiles.errors import ProfileError
from tfinput.errors import ConfigError

__all__ = ["CaptureConfig", "CaptureResult", "capture"]


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
    """

    steps: int = 10
    warmup: int = 5
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

    def replace(self, **changes: Any) -> CaptureConfig:
        """A copy with some fields changed (validated like the constructor)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(
                f"CaptureConfig has no field(s) {sorted(unknown)}; fields: "
                f"{[f.name for f in dataclasses.fields(self)]}"
            )
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CaptureConfig:
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
    step: Mapping[str, Any]
    wall_step_ms: tuple[float, ...]
    metadata: Mapping[str, Any]


def _as_step(step: Any) -> Any:
    from tfinput import steps

    if step is None:
        return steps.input_only()
    if isinstance(step, steps.Step):
        return step
    if callable(step):
        return steps.function_step(step)
    raise ConfigError(
        f"capture: step must be a tfinput.steps.Step, a callable or None, got {type(step).__name__}"
    )


def _as_iterable(pipeline: Any) -> Iterable[Any]:
    dataset = pipeline
    if callable(pipeline) and not hasattr(pipeline, "__iter__"):
        dataset = pipeline()
    if not hasattr(dataset, "__iter__"):
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


def _describe_pipeline(dataset: Any) -> str:
    spec = getattr(dataset, "element_spec", None)
    text = f"{type(dataset).__name__}" + (f" element_spec={spec}" if spec is not None else "")
    return text if len(text) <= 2000 else text[:2000] + "..."


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def capture(
    pipeline: Any,
    step: Any = None,
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
    import tensorflow as tf

    cfg = (
        (config or CaptureConfig()).replace(**overrides)
        if overrides
        else (config or CaptureConfig())
    )
    the_step = _as_step(step)
    dataset = _as_iterable(pipeline)
    logdir = Path(logdir)
    needed = cfg.warmup + cfg.steps

    iterator = iter(dataset)
    for i in range(cfg.warmup):
        try:
            batch = next(iterator)
        except StopIteration:
            raise ProfileError(
                f"the pipeline ran out after {i} batches during the warm-up; capture needs "
                f"{needed} (warm-up {cfg.warmup} + steps {cfg.steps}): .repeat() the "
                "dataset or lower warmup/steps"
            ) from None
        the_step(batch)

    before = _trace_files(logdir)
    started = datetime.datetime.now(datetime.timezone.utc)
    try:
        tf.profiler.experimental.start(str(logdir))
    except Exception as e:  # TF raises several error types here
        raise ProfileError(
            f"cannot start the profiler ({type(e).__name__}: {e}); is another profiler "
            "session running in this process? Stop it with tf.profiler.experimental.stop()"
        ) from e
    durations: list[float] = []
    ran_out_at: int | None = None
    try:
        for i in range(cfg.steps):
            t0 = clock()
            with tf.profiler.experimental.Trace(cfg.step_name, step_num=cfg.warmup + i, _r=1):
                try:
                    batch = next(iterator)
                except StopIteration:
                    ran_out_at = i
                    break
                the_step(batch)
            durations.append((clock() - t0) * 1e3)
    finally:
        tf.profiler.experimental.stop()

    after = _trace_files(logdir)
    written = sorted(p for p, mtime in after.items() if before.get(p) != mtime)
    if not written:
        raise ProfileError(
            f"the profiler wrote no trace under {logdir / 'plugins' / 'profile'}; check that "
            "the directory is writable"
        )
    run_dir = written[-1].parent
    trace_files = tuple(p for p in written if p.parent == run_dir)
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
        "cpu_count": _cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "tensorflow": tf.__version__,
        "tested_xprof": TESTED_XPROF,
        "wall_step_ms": durations,
        "note": "wall_step_ms include profiler overhead; the trace has the precise times",
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
