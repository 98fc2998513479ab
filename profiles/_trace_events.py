"""The events of a profiler trace: tf.data's host events and annotated input stages (a
JAX step's device time is `profiles._jax_trace`'s).

**tf.data's events.**
`gather_events` reads every ``/host:`` plane of an XSpace and returns the events that
`profiles._stages` needs to rebuild stage timings: iterator ``GetNext`` calls,
producer/consumer hand-overs of asynchronous stages, function calls and the ops they
ran. On each thread (XLine), events are nested by time containment (`Event.parent`).
Also here: the small helpers on iterator paths and time spans that the rebuild uses.

**Annotated input stages** (`annotated_stages`): spans carrying xprof's input-pipeline
stage stats (``_ipl_stage_name``, ``_ipl_stage_id``, ``_ipl_stage_cat``), such as the
SparseCore feed's and `device_prefetch`'s, summed per stage.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import re
from collections.abc import Iterable, Iterator
from typing import Any

from profiles._xplane import host_planes, stat_value

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


#: A span of trace time: ``[start, end)`` in picoseconds.
Interval = tuple[int, int]


def line_events(
    line: Any, names: dict[int, str], stat_names: dict[int, str]
) -> Iterator[tuple[str, Interval, dict[str, object]]]:
    """``(name, [start, end) in picoseconds, stats)`` of each event of an XLine."""
    base = line.timestamp_ns * 1000
    for event in line.events:
        start = base + event.offset_ps
        stats = {stat_names.get(s.metadata_id, ""): stat_value(s, stat_names) for s in event.stats}
        yield names.get(event.metadata_id, ""), (start, start + event.duration_ps), stats


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
            for _, interval, stats in line_events(line, names, stat_names):
                stage = stats.get("_ipl_stage_name")
                if stage is not None:
                    spans.append((interval, str(stage), str(stats.get("_ipl_stage_cat", ""))))
            spans.sort(key=lambda s: (s[0][0], -s[0][1]))
            stack: list[tuple[Interval, str]] = []
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
