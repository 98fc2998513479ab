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
several streams, thunks on several threads, are counted once), in milliseconds. The
step's wait for input is the capture's ``tfinput/next`` spans (`NEXT_SPAN`), else the
annotated input stages on the step's own thread. Without step markers (a trace JAX's
profiler wrote alone), each call of the jitted step function starts a step. When
TensorFlow's trace has no complete step, `profiles._analysis` takes its steps from here.

**Annotated input stages** (`annotated_stages`): spans carrying xprof's input-pipeline
stage stats (``_ipl_stage_name``, ``_ipl_stage_id``, ``_ipl_stage_cat``), such as the
SparseCore feed's and `device_prefetch`'s, summed per stage.
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


#: xprof's names of the input-stage categories (``_ipl_stage_cat``).
STAGE_CATEGORIES = {
    "read": "Demanded file read",
    "preprocessing": "Preprocessing",
    "enqueue": "Enqueue",
}


@dataclasses.dataclass(frozen=True)
class AnnotatedStage:
    """The spans of one annotated input stage (``_ipl_stage_name``) in a trace.

    Attributes:
      name: The stage's name.
      category: xprof's name of its category (`STAGE_CATEGORIES`).
      count: Its spans.
      total_ps: Their total duration.
      self_ps: The same without the annotated stages nested in them.
    """

    name: str
    category: str
    count: int
    total_ps: int
    self_ps: int


def annotated_stages(space: Any) -> list[AnnotatedStage]:
    """Every annotated input stage of the host planes, largest self time first (all of
    them: xprof's input-op table keeps its top 20, tf.data's iterators included)."""
    found: dict[str, list[Any]] = {}
    for plane in host_planes(space):
        names = {k: m.name for k, m in plane.event_metadata.items()}
        stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        for line in plane.lines:
            spans = []
            for _, interval, stats in _events(line, names, stat_names):
                stage = stats.get("_ipl_stage_name")
                if stage is not None:
                    spans.append((interval, str(stage), str(stats.get("_ipl_stage_cat", ""))))
            spans.sort(key=lambda s: (s[0][0], -s[0][1]))
            stack: list[tuple[_Interval, str]] = []
            for (start, end), stage, category in spans:
                while stack and stack[-1][0][1] <= start:
                    stack.pop()
                entry = found.setdefault(stage, [category, 0, 0, 0])
                entry[1] += 1
                entry[2] += end - start
                entry[3] += end - start
                if stack:  # nested in another stage: not that stage's own time
                    found[stack[-1][1]][3] -= end - start
                stack.append(((start, end), stage))
    stages = [
        AnnotatedStage(name, STAGE_CATEGORIES.get(cat, cat), count, total, max(own, 0))
        for name, (cat, count, total, own) in found.items()
    ]
    return sorted(stages, key=lambda s: -s.self_ps)


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

_Interval = tuple[int, int]  # picoseconds, [start, end)
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

    markers: list[tuple[int, _Interval, int]] = dataclasses.field(default_factory=list)
    host_compute: list[_Interval] = dataclasses.field(default_factory=list)
    host_transfer: list[_Interval] = dataclasses.field(default_factory=list)
    gpu_compute: list[_Interval] = dataclasses.field(default_factory=list)
    gpu_transfer: list[_Interval] = dataclasses.field(default_factory=list)
    next_spans: list[_Interval] = dataclasses.field(default_factory=list)
    # input stages (``_ipl_stage_name``) by thread: (plane, line) -> intervals
    stages: dict[tuple[int, int], list[_Interval]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list)
    )
    calls: dict[str, list[_Interval]] = dataclasses.field(
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
                for name, interval, _ in _events(line, names, stat_names):
                    if name.startswith("MemcpyH2D"):
                        found.gpu_transfer.append(interval)
                    elif not name.startswith(("Memcpy", "Memset")):
                        found.gpu_compute.append(interval)
        elif plane.name.startswith("/host:"):
            for line in plane.lines:
                thread = (plane.id, line.id)
                for name, interval, stats in _events(line, names, stat_names):
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


def _jitted_steps(found: _JaxEvents) -> list[tuple[int, _Interval, tuple[int, int]]]:
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
