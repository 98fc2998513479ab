"""Stage reconstruction and per-stage attribution of a trace's tf.data events, and the
`PipelineConfig` knobs that control each stage.

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

**Which knobs control a stage, and what to change.** `advise` maps a stage kind as traced (``ParallelMapV2``, ``TFRecord``, ``Prefetch``,
...) and its traced settings to the tfinput knobs that control it, a short text of
the current setting and an imperative advice. `profiles._stages` uses it to label
every rebuilt stage and to word the bottleneck verdict.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Mapping, Sequence
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


#: ``(knobs, setting, advice)``.
Advice = tuple[tuple[str, ...], str, str]

_MAPS = frozenset({"ParallelMap", "MapAndBatch", "ParseExample", "Map"})
_SOURCES = frozenset(
    {"TFRecord", "TextLine", "FixedLengthRecord", "FlatMap", "ArrowRecordBatch", "Parquet"}
)
_MEMORY_SOURCES = frozenset({"Range", "TensorSlice", "FromTensor", "SparseTensorSlice"})
_INTERLEAVES = frozenset({"Interleave", "ParallelInterleave", "LegacyParallelInterleave"})
_BATCHES = frozenset({"Batch", "PaddedBatch", "ParallelBatch"})
_SHUFFLES = frozenset({"Shuffle", "ShuffleAndRepeat"})
_CACHES = frozenset({"MemoryCache", "MemoryCacheImpl", "Cache", "CacheImpl"})
_INTERLEAVE_KNOBS = ("interleave_cycle_length", "interleave_parallelism")
#: The name of the map that runs tfinput's Parquet reader (`tfinput._src.core.sources.parquet`).
PARQUET_READ = "parquet_read"

#: Stages whose advice does not depend on their settings.
_FIXED: Mapping[str, Advice] = {
    **dict.fromkeys(
        _CACHES,
        (
            ("cache",),
            "",
            "the first pass through the cache reads the source: profile after one epoch, "
            "or disable cache",
        ),
    ),
    "MaxIntraOpParallelism": (
        ("max_intra_op_parallelism",),
        "",
        "adjust max_intra_op_parallelism",
    ),
    "PrivateThreadPool": (("private_threadpool_size",), "", "adjust private_threadpool_size"),
    **dict.fromkeys(
        ("Generator", "FromGenerator"),
        ((), "", "a Python generator feeds the pipeline: move it to native tf.data ops"),
    ),
    **dict.fromkeys(
        _MEMORY_SOURCES,
        ((), "", "an in-memory source is the slowest stage: nothing to tune there"),
    ),
    "DataService": ((), "", "tf.data service workers are too slow: add workers"),
}


def base_kind(kind: str) -> str:
    """A stage kind without its version suffix: ``ParallelMapV2`` -> ``ParallelMap``."""
    return re.sub(r"V\d+$", "", kind)


def is_batch_kind(kind: str) -> bool:
    """Whether ``kind`` batches elements (``BatchV2``, ``PaddedBatchV2``, ...)."""
    return base_kind(kind) in _BATCHES


def _yes(value: str | None) -> bool:
    return str(value).lower() == "true"


def _as_int(value: str | None) -> int | None:
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def advise(
    kind: str,
    params: Mapping[str, str],
    *,
    label: str = "",
    enclosing: Sequence[tuple[str, Mapping[str, str]]] = (),
    cpu_budget: int | None = None,
    input_batched: bool = False,
) -> Advice:
    """Which knobs control a stage, its current setting, and what to change.

    Args:
      kind: Stage kind as traced (``ParallelMapV2``, ``TFRecord``, ...).
      params: The stage's traced settings (``parallelism``, ``cycle_length``, ...).
      label: The stage's name (``map(..., name=...)``), where known: tfinput's Parquet
        reader is the map named ``parquet_read``, controlled by the interleave knobs.
      enclosing: ``(kind, params)`` of the stages above it, nearest first; a file
        reader inside an interleave is controlled by that interleave.
      cpu_budget: Cores available to tf.data, if known.
      input_batched: The stage's input is already batched (a batch stage below it),
        so a map over it is already vectorized.

    Returns:
      ``(knobs, setting, advice)``: tfinput `PipelineConfig` knob names, a short text
      of the current setting (may be empty) and an imperative advice.
    """
    base = base_kind(kind)
    if label.split("+")[0] == PARQUET_READ:
        return (
            _INTERLEAVE_KNOBS,
            "",
            "the Parquet reader (pyarrow) is the bottleneck: raise interleave_parallelism "
            "(reader threads) and interleave_cycle_length (batches read ahead), or convert "
            "to columnar records (tfinput convert DATA --to columnar --out DIR)",
        )
    if base in _MAPS:
        return _map_advice(base, params, cpu_budget=cpu_budget, input_batched=input_batched)
    if base in _INTERLEAVES:
        return _interleave_advice(params)
    if base in _SOURCES:
        return _source_advice(enclosing)
    if base in _FIXED:
        return _FIXED[base]
    return _buffer_advice(base, kind, params)


def _autotuned(params: Mapping[str, str]) -> str:
    return " autotuned" if _yes(params.get("autotune")) else ""


def _map_advice(
    base: str, params: Mapping[str, str], *, cpu_budget: int | None, input_batched: bool
) -> Advice:
    if base == "Map":
        return ("map_parallelism",), "sequential", "parallelize the map (map_parallelism)"
    auto = _autotuned(params)
    par = params.get("parallelism")
    if par is None:
        setting = "parallelism autotuned" if auto else "parallelism not traced"
        return ("map_parallelism",), setting, "raise map parallelism (map_parallelism)"
    setting = f"parallelism {par}{auto}"
    if not (cpu_budget and (_as_int(par) or 0) >= cpu_budget):
        return ("map_parallelism",), setting, "raise map parallelism (map_parallelism)"
    cores = f" on {cpu_budget} cores"
    if input_batched:
        advice = (
            f"map already uses {par} threads{cores} on batches: make the map itself "
            "cheaper (fewer ops per feature, larger batches, cache the parsed "
            "batches, precompute offline) or add cores"
        )
    else:
        advice = (
            f"map already uses {par} threads{cores}: make it cheaper (batch before "
            "parsing so parse_example is vectorized, cache, precompute offline)"
        )
    return ("map_parallelism", "batch_size"), setting, advice


def _interleave_advice(params: Mapping[str, str]) -> Advice:
    cycle = params.get("cycle_length", "?")
    par = params.get("parallelism")
    return (
        _INTERLEAVE_KNOBS,
        f"cycle_length {cycle}, parallelism {par or 1}{_autotuned(params)}",
        "read more files concurrently: raise interleave_cycle_length and interleave_parallelism",
    )


def _source_advice(enclosing: Sequence[tuple[str, Mapping[str, str]]]) -> Advice:
    for up_kind, up_params in enclosing:
        if base_kind(up_kind) in _INTERLEAVES:
            cycle = up_params.get("cycle_length", "?")
            up_par = up_params.get("parallelism", "1")
            return (
                _INTERLEAVE_KNOBS,
                f"read by {up_kind} with cycle_length {cycle}, parallelism {up_par}",
                "file reading is the bottleneck: raise interleave_cycle_length and "
                "interleave_parallelism (or cache the records)",
            )
    return (
        _INTERLEAVE_KNOBS,
        "files read one at a time",
        "read the files through an interleave (interleave_cycle_length, "
        "interleave_parallelism) or cache the records",
    )


def _buffer_advice(base: str, kind: str, params: Mapping[str, str]) -> Advice:
    """Prefetch, batch and shuffle stages (their setting is a size), or no knob."""
    if base == "Prefetch":
        return (
            ("prefetch", "private_threadpool_size"),
            f"buffer {params.get('buffer_limit', '?')}{_autotuned(params)}",
            "training waited on prefetch with nothing upstream running: raise prefetch, "
            "or give tf.data its own threads (private_threadpool_size)",
        )
    if base in _BATCHES:
        return (
            ("batch_size",),
            f"batch_size {params.get('batch_size', '?')}",
            "batching is expensive: batch before parsing (vectorized parse), or use "
            "larger batches (batch_size)",
        )
    if base in _SHUFFLES:
        return (
            ("shuffle_buffer",),
            f"buffer_size {params.get('buffer_size', '?')}",
            "the shuffle buffer refills slowly: lower shuffle_buffer, shuffle files instead",
        )
    return ((), "", f"no tfinput knob controls {kind}: simplify or remove this step")
