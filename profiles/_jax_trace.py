"""**A JAX step's device compute and host-to-device transfer**, from JAX's own trace.
TensorFlow's profiler does not see a JAX step's computation, so `profiles._capture`
also records a `jax.profiler` trace of the profiled steps (``<run>/jax/``, a
TensorBoard log directory of its own), each step inside a
``jax.profiler.StepTraceAnnotation`` named like the TensorFlow step marker.
`jax_device_time` reads it back (the same XSpace schema, `profiles._xplane`):

- on a GPU: the kernels on the device planes' stream lines (``/device:GPU:N``,
  ``Stream #...``) are compute, ``MemcpyH2D`` events are host-to-device transfer;
- on the CPU: the XLA executions (host events carrying an ``hlo_op`` stat, one per
  thunk) are compute, JAX's device puts (`CPU_TRANSFER_EVENTS`) are transfer.

Each is the union of its events' intervals inside the step marker (kernels on
several streams, thunks on several threads, are counted once), in milliseconds. The
step's wait for input is the capture's ``tfinput/next`` spans (`NEXT_SPAN`), else the
annotated input stages on the step's own thread. Without step markers (a trace JAX's
profiler wrote alone), each call of the jitted step function starts a step. When
TensorFlow's trace has no complete step, `profiles._analysis` takes its steps from here.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from profiles._trace_events import Interval, line_events
from profiles._xplane import load_xspace

#: Where a capture puts JAX's trace, inside the TensorFlow profile run directory.
JAX_TRACE_DIR = "jax"

#: The span `profiles.capture` puts around each profiled step's ``next()`` in JAX's
#: trace: the training loop waiting for its batch.
NEXT_SPAN = "tfinput/next"

#: Host events of JAX's CPU client that copy a batch into a device buffer.
CPU_TRANSFER_EVENTS = frozenset(
    {"DevicePut", "DevicePutWithSharding", "BufferFromPyval", "TransferToDevice", "shard_args"}
)

# Lines that profiler post-processing derives from the raw device events (they repeat
# them, or span whole steps): never counted as compute.
_DERIVED_LINES = frozenset(
    {
        "Steps",
        "XLA Modules",
        "XLA Ops",
        "XLA TraceMe",
        "TensorFlow Ops",
        "TensorFlow Name Scope",
        "Framework Ops",
        "Framework Name Scope",
        "Source code",
        "Launch Stats",
        "SparseCore Steps",
    }
)

_JITTED_CALL = re.compile(r"^PjitFunction\((.*)\)$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class JaxStep:
    """One step in JAX's trace.

    Attributes:
      step: The step number of its marker (the execution's index without markers).
      step_ms: Its duration.
      compute_ms: Device compute inside it (union of kernel or XLA execution time).
      transfer_ms: Host-to-device transfer inside it.
      input_ms: The training loop's wait for its batch inside it: the capture's
        ``next()`` spans (`NEXT_SPAN`), else the input stages annotated on the step's
        own thread (the SparseCore feed's wait); 0 when neither is in the trace.
      other_ms: The rest of the step: neither input, compute nor transfer (Python,
        dispatch). Input, compute and transfer may overlap (a prefetch thread moves
        the next batch while the step computes), so they can add up to more than
        ``step_ms - other_ms``.
      start_ps: When it started (the trace's clock), for windows over the trace.
    """

    step: int
    step_ms: float
    compute_ms: float
    transfer_ms: float
    input_ms: float = 0.0
    other_ms: float = 0.0
    start_ps: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class JaxDeviceTime:
    """Device compute and host-to-device transfer per step of a JAX step.

    Attributes:
      trace_file: The JAX ``.xplane.pb`` read.
      platform: ``"gpu"`` (kernels and copies on the device planes) or ``"cpu"`` (XLA
        executions on host threads).
      steps: Every step, in order.
      steps_from: ``"markers"`` (step annotations named like the capture's step
        markers) or ``"executions"`` (no markers: each call of the jitted step
        function, ``PjitFunction(name)``, starts a step).
      input_from: What ``input_ms`` counts: ``"next() spans"``, ``"input stages"`` or
        ``""`` (neither in the trace: the wait is unknown).
    """

    trace_file: str
    platform: str
    steps: tuple[JaxStep, ...]
    steps_from: str = "markers"
    input_from: str = ""

    @property
    def compute_ms(self) -> float:
        """Median device compute per step."""
        return statistics.median(s.compute_ms for s in self.steps)

    @property
    def transfer_ms(self) -> float:
        """Median host-to-device transfer per step."""
        return statistics.median(s.transfer_ms for s in self.steps)

    @property
    def step_ms(self) -> float:
        """Median step time, as JAX's markers measured it."""
        return statistics.median(s.step_ms for s in self.steps)

    @property
    def windows(self) -> tuple[tuple[int, int], ...]:
        """Each step's ``(start, end)`` in picoseconds on the trace's clock."""
        return tuple((s.start_ps, s.start_ps + round(s.step_ms * 1e9)) for s in self.steps)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (the medians included)."""
        return {
            "trace_file": self.trace_file,
            "platform": self.platform,
            "steps_from": self.steps_from,
            "input_from": self.input_from,
            "compute_ms": self.compute_ms,
            "transfer_ms": self.transfer_ms,
            "step_ms": self.step_ms,
            "steps": [dataclasses.asdict(s) for s in self.steps],
        }


def jax_device_time(run_dir: str | Path, *, step_name: str = "train") -> JaxDeviceTime | None:
    """Read the JAX trace a capture left in ``run_dir/jax``.

    Args:
      run_dir: The TensorFlow profile run directory (`profiles._capture.CaptureResult`).
      step_name: The step markers' name.

    Returns:
      Per-step device compute and transfer, or None when the run has no JAX trace or
      the trace has neither a step marked ``step_name`` nor repeated jitted calls.
    """
    path = jax_trace_file(run_dir)
    if path is None:
        return None
    return device_time_of(load_xspace(path).space, step_name=step_name, source=str(path))


def jax_trace_file(run_dir: str | Path) -> Path | None:
    """The newest ``.xplane.pb`` of the JAX trace a capture kept in ``run_dir``, if any."""
    files = sorted(
        (Path(run_dir) / JAX_TRACE_DIR).rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime
    )
    return files[-1] if files else None


@dataclasses.dataclass
class _JaxEvents:
    """What `device_time_of` reads from a JAX trace, as intervals."""

    markers: list[tuple[int, Interval, int]] = dataclasses.field(default_factory=list)
    host_compute: list[Interval] = dataclasses.field(default_factory=list)
    host_transfer: list[Interval] = dataclasses.field(default_factory=list)
    gpu_compute: list[Interval] = dataclasses.field(default_factory=list)
    gpu_transfer: list[Interval] = dataclasses.field(default_factory=list)
    next_spans: list[Interval] = dataclasses.field(default_factory=list)
    # input stages (``_ipl_stage_name``) by thread: (plane, line) -> intervals
    stages: dict[tuple[int, int], list[Interval]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list)
    )
    calls: dict[str, list[Interval]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list)
    )


def device_time_of(space: Any, *, step_name: str | None, source: str = "") -> JaxDeviceTime | None:
    """`jax_device_time` on an XSpace message (``source`` names it); with no
    ``step_name``, any step annotation (a ``step_num`` stat and ``_r=1``, as
    ``jax.profiler.StepTraceAnnotation`` writes) is a step marker."""
    found = _jax_events(space, step_name)
    steps_from = "markers"
    markers = found.markers
    if not markers:
        markers = _jitted_steps(found)
        steps_from = "executions"
    if not markers:
        return None
    on_gpu = bool(found.gpu_compute or found.gpu_transfer)
    compute, transfer = (
        (found.gpu_compute, found.gpu_transfer)
        if on_gpu
        else (found.host_compute, found.host_transfer)
    )
    compute, transfer = _union(compute), _union(transfer)
    input_from = "next() spans" if found.next_spans else ""
    steps = []
    for number, (start, end), thread in sorted(markers, key=lambda m: m[1]):
        waits = found.next_spans
        if not waits and found.stages.get(thread):  # type: ignore[call-overload]
            waits, input_from = found.stages[thread], "input stages"  # type: ignore[index]
        waited = _union(waits)
        busy = _union([*waited, *compute, *transfer])
        window = (start, end)
        steps.append(
            JaxStep(
                step=number,
                step_ms=(end - start) / 1e9,
                compute_ms=_overlap(compute, window) / 1e9,
                transfer_ms=_overlap(transfer, window) / 1e9,
                input_ms=_overlap(waited, window) / 1e9,
                other_ms=(end - start - _overlap(busy, window)) / 1e9,
                start_ps=start,
            )
        )
    return JaxDeviceTime(
        trace_file=source,
        platform="gpu" if on_gpu else "cpu",
        steps=tuple(steps),
        steps_from=steps_from,
        input_from=input_from,
    )


def _jax_events(space: Any, step_name: str | None) -> _JaxEvents:
    found = _JaxEvents()
    for plane in space.planes:
        names = {k: m.name for k, m in plane.event_metadata.items()}
        stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        if plane.name.startswith("/device:GPU:"):
            for line in _stream_lines(plane):
                for name, interval, _ in line_events(line, names, stat_names):
                    if name.startswith("MemcpyH2D"):
                        found.gpu_transfer.append(interval)
                    elif not name.startswith(("Memcpy", "Memset")):
                        found.gpu_compute.append(interval)
        elif plane.name.startswith("/host:"):
            for line in plane.lines:
                thread = (plane.id, line.id)
                for name, interval, stats in line_events(line, names, stat_names):
                    if "step_num" in stats and (
                        name == step_name if step_name is not None else stats.get("_r") == 1
                    ):
                        found.markers.append((int(stats["step_num"]), interval, thread))  # type: ignore[call-overload]
                    elif "hlo_op" in stats:
                        found.host_compute.append(interval)
                    elif name in CPU_TRANSFER_EVENTS:
                        found.host_transfer.append(interval)
                    elif name == NEXT_SPAN:
                        found.next_spans.append(interval)
                    elif "_ipl_stage_name" in stats:
                        found.stages[thread].append(interval)
                    else:
                        call = _JITTED_CALL.match(name)
                        if call:
                            found.calls[call[1]].append(interval)
    return found


def _jitted_steps(found: _JaxEvents) -> list[tuple[int, Interval, tuple[int, int]]]:
    """Steps from the calls of the jitted function called most often (the longest
    in total among equals): each runs from its call to the next one, the last to the
    end of the device work it started."""
    calls = [c for c in found.calls.values() if len(c) >= 2]
    if not calls:
        return []
    chosen = sorted(max(calls, key=lambda c: (len(c), sum(e - s for s, e in c))))
    work = [*found.host_compute, *found.gpu_compute, *found.host_transfer, *found.gpu_transfer]
    last_start, last_end = chosen[-1]
    end = max([last_end, *(e for s, e in work if s >= last_start)])
    bounds = [s for s, _ in chosen] + [end]
    return [(i, (bounds[i], bounds[i + 1]), (-1, -1)) for i in range(len(chosen))]


def _stream_lines(plane: Any) -> list[Any]:
    """The raw CUPTI lines of a GPU plane (``Stream #N...``); without any, every line
    that is not derived from them."""
    streams = [line for line in plane.lines if line.name.startswith("Stream #")]
    return streams or [line for line in plane.lines if line.name not in _DERIVED_LINES]


def _union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-overlapping intervals covering the same time."""
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def _overlap(merged: Sequence[Interval], window: Interval) -> int:
    """Picoseconds of ``merged`` (from `_union`) inside ``window``."""
    lo, hi = window
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in merged if s < hi and e > lo)
