"""The events of a profiler trace: tf.data's host events, and a JAX step's device time.

**tf.data's events.**
`gather_events` reads every ``/host:`` plane of an XSpace and returns the events that
`profiles._stages` needs to rebuild stage timings: iterator ``GetNext`` calls,
producer/consumer hand-overs of asynchronous stages, function calls and the ops they
ran. On each thread (XLine), events are nested by time containment (`Event.parent`).
Also here: the small helpers on iterator paths and time spans that the rebuild uses.

**A JAX step's device compute and host-to-device transfer**, from JAX's own trace.
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

import collections
import dataclasses
import functools
import re
import statistics
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from profiles._xplane import host_planes, load_xspace, stat_value

__all__ = [
    "CONSUME",
    "CPU_TRANSFER_EVENTS",
    "Event",
    "FUNCTION_CALL",
    "FUNCTION_EXEC",
    "ITERATOR",
    "JAX_TRACE_DIR",
    "JaxDeviceTime",
    "JaxStep",
    "OP",
    "PRODUCE",
    "STEP",
    "TraceEvents",
    "as_int",
    "device_time_of",
    "fold_path",
    "gather_events",
    "jax_device_time",
    "jax_trace_file",
    "kind_of",
    "nearest",
    "parent_path",
    "union_overlap",
]


# Event classes: an iterator's GetNext, an async stage's <Stage>Produce / <Stage>Consume,
# a function call (``_p`` link) and its execution (``_c`` link), an op, a step marker.
ITERATOR, PRODUCE, CONSUME, FUNCTION_CALL, FUNCTION_EXEC, OP, STEP = range(7)

_OP_NAME = re.compile(r"^[^:]+:[A-Z][A-Za-z0-9_]*$")
# Components whose "[k]" index is an input position (kept); any other index numbers
# the elements of an interleave / flat_map and is folded into one stage ("[*]").
_POSITIONAL = ("Zip", "Concatenate", "DirectedInterleave", "ChooseFromDatasets", "Choose")
_INDEX = re.compile(r"(\w+)\[(\d+)\]")


class Event:
    """One trace event of a class above, with its stats and same-thread parent.

    ``children`` and the two flags are filled in by the rebuild: an iterator's
    children are the iterator calls it waited on (same thread or produced for it).
    """

    __slots__ = (
        "children",
        "cls",
        "end",
        "linked",
        "name",
        "parent",
        "start",
        "stats",
        "unmatched",
    )

    def __init__(self, cls: int, name: str, start: int, end: int, stats: dict[str, object]):
        self.cls = cls
        self.name = name
        self.start = start
        self.end = end
        self.stats = stats
        self.parent: Event | None = None
        self.children: list[Event] = []
        self.linked = False
        self.unmatched = False


@dataclasses.dataclass
class TraceEvents:
    """The events of a trace that the rebuild reads, by class (all threads, all hosts)."""

    iterators: list[Event] = dataclasses.field(default_factory=list)
    consumes: list[Event] = dataclasses.field(default_factory=list)
    function_calls: list[Event] = dataclasses.field(default_factory=list)
    function_execs: list[Event] = dataclasses.field(default_factory=list)
    ops: list[Event] = dataclasses.field(default_factory=list)


def gather_events(space: Any) -> TraceEvents:
    """The classified, nested events of every host plane of an XSpace."""
    found = TraceEvents()
    by_class = {
        ITERATOR: found.iterators,
        CONSUME: found.consumes,
        FUNCTION_CALL: found.function_calls,
        FUNCTION_EXEC: found.function_execs,
        OP: found.ops,
    }
    for plane in host_planes(space):
        for events in _plane_lines(plane):
            for ev in events:
                if ev.cls in by_class:
                    by_class[ev.cls].append(ev)
    return found


@dataclasses.dataclass(frozen=True)
class _StatIds:
    """Stat metadata ids of one plane, by the stat names that classify events."""

    names: dict[int, str]
    links_p: set[int]
    links_c: set[int]
    roots: set[int]
    elements: set[int]

    @classmethod
    def of(cls, plane: Any) -> _StatIds:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        ids_named: dict[str, set[int]] = collections.defaultdict(set)
        for k, name in names.items():
            ids_named[name].add(k)
        return cls(
            names=names,
            links_p=ids_named["_p"],
            links_c=ids_named["_c"],
            roots=ids_named["_r"],
            elements=ids_named["element_id"],
        )


def _classify(name: str, event: Any, ids: _StatIds) -> int | None:
    if name.startswith("Iterator::"):
        return ITERATOR
    if _OP_NAME.match(name):
        return OP
    if not event.stats:
        return None
    sids = {s.metadata_id for s in event.stats}
    if name.endswith("Produce") and sids & ids.elements:
        return PRODUCE
    if name.endswith("Consume") and sids & ids.elements:
        return CONSUME
    if sids & ids.links_p:
        return FUNCTION_CALL
    if sids & ids.links_c:
        return FUNCTION_EXEC
    if sids & ids.roots:
        return STEP
    return None


def _plane_lines(plane: Any) -> list[list[Event]]:
    """The relevant events of a host plane, per line (thread), nested by containment."""
    ids = _StatIds.of(plane)
    ev_names = {k: v.name for k, v in plane.event_metadata.items()}
    lines: list[list[Event]] = []
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        events: list[Event] = []
        for e in line.events:
            name = ev_names.get(e.metadata_id, "")
            cls = _classify(name, e, ids)
            if cls is None:
                continue
            stats = (
                {ids.names.get(s.metadata_id, ""): stat_value(s, ids.names) for s in e.stats}
                if cls != OP
                else {}
            )
            start = base + e.offset_ps
            events.append(Event(cls, name, start, start + e.duration_ps, stats))
        _nest(events)
        lines.append(events)
    return lines


def _nest(events: list[Event]) -> None:
    """Sort one thread's events by start and set each one's innermost enclosing event."""
    events.sort(key=lambda ev: (ev.start, -ev.end))
    stack: list[Event] = []
    for ev in events:
        while stack and (stack[-1].end <= ev.start or stack[-1].end < ev.end):
            stack.pop()
        if stack:
            ev.parent = stack[-1]
        stack.append(ev)


def nearest(ev: Event, classes: tuple[int, ...]) -> Event | None:
    """The innermost same-thread event enclosing ``ev`` whose class is in ``classes``."""
    up = ev.parent
    while up is not None and up.cls not in classes:
        up = up.parent
    return up


def union_overlap(spans: Iterable[tuple[int, int]]) -> int:
    """Total length covered by the union of ``(start, end)`` spans."""
    total, cur_lo, cur_hi = 0, None, None
    for lo, hi in sorted(spans):
        if cur_hi is None or lo > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo  # type: ignore[operator]
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    if cur_hi is not None:
        total += cur_hi - cur_lo  # type: ignore[operator]
    return total


def as_int(value: Any) -> int | None:
    """``int(value)``, or None when it is not a number."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@functools.lru_cache(maxsize=4096)
def fold_path(name: str) -> str:
    """An iterator name with interleave / flat_map element indices folded to ``[*]``."""

    def repl(m: re.Match[str]) -> str:
        return m.group(0) if m.group(1) in _POSITIONAL else f"{m.group(1)}[*]"

    return _INDEX.sub(repl, name)


def parent_path(path: str) -> str:
    """``A::B[*]::C`` -> ``A::B``; ``Iterator::Root`` -> ``""``."""
    if path.count("::") < 2:
        return ""
    return re.sub(r"\[[^\]]*\]$", "", path.rsplit("::", 1)[0])


def kind_of(path: str) -> str:
    """The last component of an iterator path without its index: ``...::FlatMap[*]`` ->
    ``FlatMap``."""
    return re.sub(r"\[[^\]]*\]$", "", path.rsplit("::", 1)[-1])


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

    def to_dict(self) -> dict[str, object]:
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
) -> Iterator[tuple[str, _Interval, dict[str, object]]]:
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
