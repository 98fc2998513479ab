"""Stage reconstruction and per-stage attribution of a trace's tf.data events.

The steps of `profiles._stages.rebuild_stages`, in order (see that module's docstring
for the method):

1. `link_children`: each iterator call's children, on its own thread and produced
   for it on other threads (a ``Produce`` matched to its ``Consume`` by element id).
2. `IteratorTree` and `StageTable`: which stage (root iterator, folded path) each
   iterator call belongs to, and one `StageAcc` accumulator per stage.
3. `accumulate_calls` and `settle_params`: calls, wall and busy time, settings.
4. `root_calls` and `split_critical_path`: the training loop's wait, split down the
   tree of each root call.
5. `attribute_function_ops`: the ops run by each stage's functions.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import Any

from profiles._trace_events import (
    FUNCTION_EXEC,
    ITERATOR,
    OP,
    PRODUCE,
    Event,
    TraceEvents,
    as_int,
    fold_path,
    nearest,
    union_overlap,
)

__all__ = [
    "IteratorTree",
    "StageAcc",
    "StageKey",
    "StageTable",
    "accumulate_calls",
    "attribute_function_ops",
    "link_children",
    "root_calls",
    "settle_params",
    "split_critical_path",
]

#: A stage: (root iterator id, folded iterator path).
StageKey = tuple[int, str]

_MAX_DEPTH = 200
_IGNORED_PARAMS = frozenset(
    {"id", "parent_id", "shapes", "types", "element_id", "ram_usage_megabytes", "name"}
)


@dataclasses.dataclass
class StageAcc:
    """Running totals of one stage, in picoseconds."""

    calls: int = 0
    critical_calls: int = 0
    slow_calls: int = 0
    self_ps: int = 0
    crit_wall_ps: int = 0
    busy_ps: int = 0
    wall_ps: int = 0
    params: dict[str, str] = dataclasses.field(default_factory=dict)
    dataset_op: str = ""
    ops: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    last_events: list[Event] = dataclasses.field(default_factory=list)


# ----------------------------------------------------------------- 1. linking
def link_children(events: TraceEvents) -> dict[int, int]:
    """Attach each iterator call to the call it ran for (same thread or produced).

    Returns:
      ``{id(produce event): id of the iterator that consumed what it produced}``.
    """
    produced: dict[tuple[int, int], list[Event]] = collections.defaultdict(list)
    prod_owner: dict[int, int] = {}
    for ev in events.iterators:
        up = nearest(ev, (ITERATOR, PRODUCE))
        if up is None:
            continue
        if up.cls == ITERATOR:
            up.children.append(ev)
            continue
        owner = as_int(ev.stats.get("parent_id"))
        element = as_int(up.stats.get("element_id"))
        if owner is not None and element is not None:
            produced[(owner, element)].append(ev)
            prod_owner.setdefault(id(up), owner)
    for ev in events.consumes:
        owner_ev = nearest(ev, (ITERATOR,))
        element = as_int(ev.stats.get("element_id"))
        if owner_ev is None or element is None:
            continue
        owner = as_int(owner_ev.stats.get("id"))
        children = produced.get((owner, element), ())  # type: ignore[arg-type]
        if not children:
            owner_ev.unmatched = True
        for child in children:
            if not child.linked:
                child.linked = True
                owner_ev.children.append(child)
    return prod_owner


# ------------------------------------------------------------- 2. stage identity
class IteratorTree:
    """Iterator ids of a trace: each one's folded path and parent."""

    def __init__(self, iterators: list[Event]) -> None:
        self.path_of: dict[int, str] = {}
        self.parent_of: dict[int, int | None] = {}
        for ev in iterators:
            iid = as_int(ev.stats.get("id"))
            if iid is None:
                continue
            self.path_of.setdefault(iid, fold_path(ev.name))
            self.parent_of.setdefault(iid, as_int(ev.stats.get("parent_id")))

    def root_of(self, iid: int) -> int:
        """The root iterator (pipeline) an iterator belongs to."""
        seen = set()
        while self.parent_of.get(iid) is not None and iid not in seen:
            seen.add(iid)
            iid = self.parent_of[iid]  # type: ignore[assignment]
        return iid

    def stage_of(self, iid: int | None) -> StageKey | None:
        """The stage of an iterator id, or None for an unknown one."""
        if iid is None or iid not in self.path_of:
            return None
        return (self.root_of(iid), self.path_of[iid])


class StageTable:
    """One `StageAcc` per stage, in the order stages were first seen."""

    def __init__(self, tree: IteratorTree) -> None:
        self.tree = tree
        self.accs: dict[StageKey, StageAcc] = collections.defaultdict(StageAcc)
        self._key_of: dict[tuple[int, str], StageKey] = {}

    def acc_of(self, ev: Event) -> StageAcc | None:
        """The accumulator of an iterator call's stage (None without an id)."""
        iid = as_int(ev.stats.get("id"))
        if iid is None:
            return None
        key = self._key_of.get((iid, ev.name))
        if key is None:
            key = self._key_of[(iid, ev.name)] = (self.tree.root_of(iid), fold_path(ev.name))
        return self.accs[key]


# ------------------------------------------------------- 3. calls and settings
def accumulate_calls(iterators: list[Event], table: StageTable) -> None:
    """Count every call: wall time, busy time (self time over its whole span)."""
    for ev in iterators:
        acc = table.acc_of(ev)
        if acc is None:
            continue
        dur = ev.end - ev.start
        acc.calls += 1
        acc.wall_ps += dur
        covered = union_overlap(
            (max(c.start, ev.start), min(c.end, ev.end))
            for c in ev.children
            if c.end > ev.start and c.start < ev.end
        )
        acc.busy_ps += dur - covered
        acc.last_events.append(ev)
        if not acc.dataset_op:
            acc.dataset_op = str(ev.stats.get("name", ""))


def settle_params(table: StageTable) -> None:
    """Each stage's settings as last traced (autotuning changes them).

    "unavailable" values are taken from an earlier call.
    """
    for acc in table.accs.values():
        for ev in reversed(acc.last_events[-8:]):
            for k, v in ev.stats.items():
                if (
                    k
                    and k not in _IGNORED_PARAMS
                    and k not in acc.params
                    and str(v) != "unavailable"
                ):
                    acc.params[k] = str(v)
        acc.last_events = []


# --------------------------------------------------------------- 4. critical path
def root_calls(iterators: list[Event]) -> dict[int, list[Event]]:
    """The training loop's ``next()`` calls, per root iterator id."""
    roots: dict[int, list[Event]] = collections.defaultdict(list)
    for ev in iterators:
        if ev.name.count("::") == 1:
            iid = as_int(ev.stats.get("id"))
            if iid is not None:
                roots[iid].append(ev)
    return roots


def split_critical_path(
    roots: dict[int, list[Event]], table: StageTable, *, slow_ps: int
) -> dict[int, int]:
    """Split each root call's duration down its tree into stage self times.

    The profiler only records events that start after it started. A call that waited
    on an element whose production began before that has no traced producer (its
    Consume event matches no Produce event), and its whole wait would be charged to
    the consuming stage: such slow calls (the first one or two of a trace) are left
    out of the split, and out of ``roots``. Fast unmatched calls (elements buffered
    ahead) are kept.

    Returns:
      ``{root id: root calls left out}``.
    """
    skipped: dict[int, int] = {}
    for rid, events in list(roots.items()):
        roots[rid] = [ev for ev in events if _explainable(ev, slow_ps)] or events
        skipped[rid] = len(events) - len(roots[rid])
        for ev in roots[rid]:
            _charge(ev, ev.start, ev.end, 0, table, slow_ps)
    return skipped


def _charge(ev: Event, lo: int, hi: int, level: int, table: StageTable, slow_ps: int) -> None:
    """Charge the wait ``[lo, hi)`` under ``ev`` to ``ev`` and, recursively, its children."""
    acc = table.acc_of(ev)
    if acc is None or level > _MAX_DEPTH:
        return
    windows = []
    for c in ev.children:
        a, b = max(c.start, lo), min(c.end, hi)
        if b > a:
            windows.append((c, a, b))
    self_ps = (hi - lo) - union_overlap((a, b) for _, a, b in windows)
    acc.critical_calls += 1
    acc.self_ps += self_ps
    acc.crit_wall_ps += hi - lo
    if self_ps > slow_ps:
        acc.slow_calls += 1
    for c, a, b in windows:
        _charge(c, a, b, level + 1, table, slow_ps)


def _explainable(ev: Event, slow_ps: int, level: int = 0) -> bool:
    if ev.unmatched and ev.end - ev.start > slow_ps:
        return False
    return level > _MAX_DEPTH or all(_explainable(c, slow_ps, level + 1) for c in ev.children)


# ------------------------------------------------------------ 5. function ops
def attribute_function_ops(
    events: TraceEvents, table: StageTable, prod_owner: Mapping[int, int]
) -> None:
    """Add the ops run by each stage's functions to its accumulator (self time)."""
    stage_of_exec = _stage_of_function_exec(events, table.tree, prod_owner)
    nested_op_ps: dict[int, int] = collections.Counter()
    for ev in events.ops:
        up = nearest(ev, (OP, FUNCTION_EXEC, ITERATOR))
        if up is not None and up.cls == OP:
            nested_op_ps[id(up)] += ev.end - ev.start
    for ev in events.ops:
        up = nearest(ev, (OP, FUNCTION_EXEC, ITERATOR))
        if up is None or up.cls == OP:
            continue
        if up.cls == FUNCTION_EXEC:
            stage = stage_of_exec.get(id(up))
        else:
            stage = table.tree.stage_of(as_int(up.stats.get("id")))
        if stage is None:
            continue
        op_type = ev.name.rsplit(":", 1)[-1]
        table.accs[stage].ops[op_type] += ev.end - ev.start - nested_op_ps.get(id(ev), 0)


def _stage_of_function_exec(
    events: TraceEvents, tree: IteratorTree, prod_owner: Mapping[int, int]
) -> dict[int, StageKey]:
    """``{id(function execution event): stage}`` through the ``_p``/``_c`` links."""
    stage_of_call: dict[tuple[Any, Any], StageKey] = {}
    for ev in events.function_calls:
        up = nearest(ev, (ITERATOR, PRODUCE))
        iid: int | None = None
        if up is not None and up.cls == ITERATOR:
            iid = as_int(up.stats.get("id"))
        elif up is not None:
            iid = prod_owner.get(id(up))
        stage = tree.stage_of(iid)
        if stage is not None:
            stage_of_call[(ev.stats.get("_pt"), ev.stats.get("_p"))] = stage
    stage_of_exec: dict[int, StageKey] = {}
    for ev in events.function_execs:
        key = (ev.stats.get("_ct"), ev.stats.get("_c"))
        if key in stage_of_call:
            stage_of_exec[id(ev)] = stage_of_call[key]
    return stage_of_exec
