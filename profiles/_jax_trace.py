"""Device compute and host-to-device transfer per step, from JAX's own trace.

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
several streams, thunks on several threads, are counted once), in milliseconds.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from profiles._xplane import load_xspace, stat_value

__all__ = [
    "CPU_TRANSFER_EVENTS",
    "JAX_TRACE_DIR",
    "JaxDeviceTime",
    "JaxStep",
    "device_time_of",
    "jax_device_time",
]

#: Where a capture puts JAX's trace, inside the TensorFlow profile run directory.
JAX_TRACE_DIR = "jax"

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

_Interval = tuple[int, int]  # picoseconds, [start, end)


@dataclasses.dataclass(frozen=True, kw_only=True)
class JaxStep:
    """One marked step in JAX's trace.

    Attributes:
      step: The step number of its marker.
      step_ms: The marker's duration.
      compute_ms: Device compute inside it (union of kernel or XLA execution time).
      transfer_ms: Host-to-device transfer inside it.
    """

    step: int
    step_ms: float
    compute_ms: float
    transfer_ms: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class JaxDeviceTime:
    """Device compute and host-to-device transfer per step of a JAX step.

    Attributes:
      trace_file: The JAX ``.xplane.pb`` read.
      platform: ``"gpu"`` (kernels and copies on the device planes) or ``"cpu"`` (XLA
        executions on host threads).
      steps: Every marked step, in order.
    """

    trace_file: str
    platform: str
    steps: tuple[JaxStep, ...]

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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the medians included)."""
        return {
            "trace_file": self.trace_file,
            "platform": self.platform,
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
      the trace has no step marked ``step_name``.
    """
    files = sorted(
        (Path(run_dir) / JAX_TRACE_DIR).rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime
    )
    if not files:
        return None
    path = files[-1]
    return device_time_of(load_xspace(path).space, step_name=step_name, source=str(path))


def device_time_of(space: Any, *, step_name: str, source: str = "") -> JaxDeviceTime | None:
    """`jax_device_time` on an XSpace message (``source`` names it)."""
    markers: list[tuple[int, _Interval]] = []
    host_compute: list[_Interval] = []
    host_transfer: list[_Interval] = []
    gpu_compute: list[_Interval] = []
    gpu_transfer: list[_Interval] = []
    for plane in space.planes:
        names = {k: m.name for k, m in plane.event_metadata.items()}
        stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        if plane.name.startswith("/device:GPU:"):
            for line in _stream_lines(plane):
                for name, interval, _ in _events(line, names, stat_names):
                    if name.startswith("MemcpyH2D"):
                        gpu_transfer.append(interval)
                    elif not name.startswith(("Memcpy", "Memset")):
                        gpu_compute.append(interval)
        elif plane.name.startswith("/host:"):
            for line in plane.lines:
                for name, interval, stats in _events(line, names, stat_names):
                    if name == step_name and "step_num" in stats:
                        markers.append((int(stats["step_num"]), interval))
                    elif "hlo_op" in stats:
                        host_compute.append(interval)
                    elif name in CPU_TRANSFER_EVENTS:
                        host_transfer.append(interval)
    if not markers:
        return None
    on_gpu = bool(gpu_compute or gpu_transfer)
    compute, transfer = (gpu_compute, gpu_transfer) if on_gpu else (host_compute, host_transfer)
    compute, transfer = _union(compute), _union(transfer)
    steps = tuple(
        JaxStep(
            step=number,
            step_ms=(end - start) / 1e9,
            compute_ms=_overlap(compute, (start, end)) / 1e9,
            transfer_ms=_overlap(transfer, (start, end)) / 1e9,
        )
        for number, (start, end) in sorted(markers, key=lambda m: m[1])
    )
    return JaxDeviceTime(trace_file=source, platform="gpu" if on_gpu else "cpu", steps=steps)


def _stream_lines(plane: Any) -> list[Any]:
    """The raw CUPTI lines of a GPU plane (``Stream #N...``); without any, every line
    that is not derived from them."""
    streams = [line for line in plane.lines if line.name.startswith("Stream #")]
    return streams or [line for line in plane.lines if line.name not in _DERIVED_LINES]


def _events(
    line: Any, names: dict[int, str], stat_names: dict[int, str]
) -> Iterator[tuple[str, _Interval, dict[str, Any]]]:
    base = line.timestamp_ns * 1000
    for event in line.events:
        start = base + event.offset_ps
        stats = {stat_names.get(s.metadata_id, ""): stat_value(s, stat_names) for s in event.stats}
        yield names.get(event.metadata_id, ""), (start, start + event.duration_ps), stats


def _union(intervals: Iterable[_Interval]) -> list[_Interval]:
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


def _overlap(merged: Sequence[_Interval], window: _Interval) -> int:
    """Picoseconds of ``merged`` (from `_union`) inside ``window``."""
    lo, hi = window
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in merged if s < hi and e > lo)
