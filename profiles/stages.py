"""Rebuild tf.data stage timings from a host trace and name the bottleneck stage.

tf.data emits one ``Iterator::<path>`` event per ``GetNext`` call of every iterator
(``Iterator::Root::Prefetch::ParallelMapV2`` is the map under the prefetch under the
root). Asynchronous stages (prefetch, parallel map, parallel interleave, map-and-batch,
parallel batch) produce elements on their own threads; they mark the work with a
``<Stage>Produce`` event and the hand-over with a ``<Stage>Consume`` event that share an
``element_id``. xprof used to turn those events into a "tf.data bottleneck analysis";
it was removed in 2025, and this module rebuilds it:

1. On each thread, events are nested by time containment. An iterator's same-thread
   children are the iterator events directly inside it; its cross-thread children are
   the iterator events inside the ``Produce`` events whose ``element_id`` matches one of
   its ``Consume`` events.
2. Starting from every call of the root iterator (the training loop's ``next()``), the
   time the consumer waited is split along this tree: at each instant it is charged to
   the deepest iterator that was running for it. That charge is the stage's *self time
   on the critical path*. An event's children only count for the part of their span
   that overlaps the part of the parent the consumer was waiting on, so an element
   produced long before it was needed costs the consumer nothing.
3. The stage with the largest critical-path self time is the bottleneck; its kind
   (map, interleave, source, prefetch, batch, ...) says which `PipelineConfig` knob
   controls it.

The time a map function runs on the tf.data thread pool is not an iterator event; it
shows up as self time of the map stage that waited for it, which is what we want. The
ops of those functions are also attributed to their stage (through the trace's
producer/consumer ``_p``/``_c`` links) to label an unnamed stage by what it runs
(``ParallelMapV2 (ParseExampleV2)``).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from profiles._xplane import host_planes, stat_value

__all__ = [
    "SLOW_CALL_US",
    "Bottleneck",
    "PipelineStages",
    "Stage",
    "advise",
    "rebuild_stages",
]

#: A call slower than this made the consumer wait; xprof's own threshold for a "slow"
#: input-pipeline call.
SLOW_CALL_US = 50.0

_PS_PER_MS = 1e9
# A stage called this many times per batch, each call this cheap, costs per element.
_MANY_CALLS = 64
_CHEAP_CALL_US = 20.0

# Event classes.
_IT, _PROD, _CONS, _FCALL, _FEXEC, _OP, _STEP = range(7)

_OP_NAME = re.compile(r"^[^:]+:[A-Z][A-Za-z0-9_]*$")
_AUTO_DATASET_NAME = re.compile(r"^[A-Za-z0-9_]*Dataset(V\d+)?:\d+$")
# Components whose "[k]" index is an input position (kept); any other index numbers
# the elements of an interleave / flat_map and is folded into one stage ("[*]").
_POSITIONAL = ("Zip", "Concatenate", "DirectedInterleave", "ChooseFromDatasets", "Choose")
_INDEX = re.compile(r"(\w+)\[(\d+)\]")
_IGNORED_PARAMS = frozenset(
    {"id", "parent_id", "shapes", "types", "element_id", "ram_usage_megabytes"}
)


# --------------------------------------------------------------------------- results
@dataclasses.dataclass(frozen=True, kw_only=True)
class Stage:
    """One tf.data transformation of an input pipeline, aggregated over the trace.

    Attributes:
      path: Iterator path with interleave element indices folded, e.g.
        ``Iterator::Root::Prefetch::ParallelInterleaveV4[*]::FlatMap[*]::TFRecord``.
      kind: The transformation, e.g. ``ParallelMapV2``, ``TFRecord``, ``Prefetch``.
      label: The name given with ``map(..., name=...)``, else the op that dominates the
        stage's function (``ParseExampleV2``, ``PyFunc``), else ``""``.
      dataset_op: The dataset op behind the stage (``ParallelMapDatasetV2:1``, or
        ``fused(...)`` after tf.data's static optimisations).
      depth: Number of iterators above this one (the root has depth 0).
      calls: ``GetNext`` calls of this stage in the trace (all threads).
      critical_calls: Calls during which the training loop was waiting on this stage.
      slow_calls: Critical calls whose self time exceeded the slow-call threshold
        (`SLOW_CALL_US` by default): the times this stage stalled training.
      self_ms: Self time on the critical path: the part of the training loop's wait
        charged to this stage.
      self_fraction: ``self_ms`` over the total time the training loop waited for
        batches (0..1). Parallel producers can both be charged for the same instant,
        so fractions may add up to slightly more than 1.
      busy_ms: Self time over all calls, whether training waited or not (work done
        ahead of time included).
      wall_ms: Sum of the durations of all calls.
      function_ms: Time of the ops run by this stage's functions (map/filter/...).
      function_ops: Up to five ``(op type, ms)`` pairs, largest first.
      params: The stage's settings as traced (``parallelism``, ``cycle_length``,
        ``buffer_limit``, ``batch_size``, ``autotune``, ...), as strings.
      knobs: The tfinput `PipelineConfig` knobs that control this stage (may be empty).
      advice: What to do if this stage is the bottleneck.
    """

    path: str
    kind: str
    label: str
    dataset_op: str
    depth: int
    calls: int
    critical_calls: int
    slow_calls: int
    self_ms: float
    self_fraction: float
    busy_ms: float
    wall_ms: float
    function_ms: float
    function_ops: tuple[tuple[str, float], ...]
    params: Mapping[str, str]
    knobs: tuple[str, ...]
    advice: str

    @property
    def display_name(self) -> str:
        """``kind (label)``, or ``kind`` when there is no label."""
        return f"{self.kind} ({self.label})" if self.label else self.kind

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        out = dataclasses.asdict(self)
        out["params"] = dict(self.params)
        out["function_ops"] = [list(p) for p in self.function_ops]
        out["knobs"] = list(self.knobs)
        out["display_name"] = self.display_name
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Bottleneck:
    """The stage on the critical path with the largest self time.

    Attributes:
      stage: Its `Stage.path`.
      display_name: ``kind (label)``.
      self_fraction: Its share of the training loop's wait for input (0..1).
      setting: The setting that matters, as traced (``parallelism 1``, ``cycle_length
        1, parallelism 1``, ``buffer 1``, ...), or ``""``.
      knobs: The tfinput knobs that control it (possibly empty).
      advice: What to change.
      significant: False when the training loop barely waited for input (mean wait
        per batch under the slow-call threshold): then the pipeline keeps up and the
        "bottleneck" is only the largest of small numbers.
      summary: One line, e.g. ``ParallelMapV2 (parse): self time 61%, parallelism 1:
        raise map parallelism (map_parallelism)``.
    """

    stage: str
    display_name: str
    self_fraction: float
    setting: str
    knobs: tuple[str, ...]
    advice: str
    significant: bool
    summary: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        out = dataclasses.asdict(self)
        out["knobs"] = list(self.knobs)
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineStages:
    """The stages of one input pipeline (one root iterator) on one host.

    Attributes:
      host: Host the trace came from.
      pipeline: The root dataset op (``PrefetchDataset:4``, ``OptionsDataset:16``).
      root_calls: ``next()`` calls of the training loop on this pipeline analysed.
      slow_root_calls: Calls that took longer than the slow-call threshold.
      skipped_root_calls: Calls left out because they waited on an element whose
        production started before the profiler did (usually the first one or two).
      input_ms: Total time the training loop spent in those calls (waiting for input).
      mean_call_ms: ``input_ms / root_calls``.
      max_call_ms: Longest single call.
      cpu_budget: CPU cores tf.data believed it had (from the root iterator), if traced.
      stages: Every stage, largest critical-path self time first.
      critical_path: Stage paths from the root down, following at each level the child
        the training loop waited on longest, while that wait exceeds the stage's own.
      bottleneck: The bottleneck stage, or None when no call was traced.
    """

    host: str
    pipeline: str
    root_calls: int
    slow_root_calls: int
    skipped_root_calls: int
    input_ms: float
    mean_call_ms: float
    max_call_ms: float
    cpu_budget: int | None
    stages: tuple[Stage, ...]
    critical_path: tuple[str, ...]
    bottleneck: Bottleneck | None

    def stage(self, kind_or_path: str) -> Stage:
        """The first stage whose kind or path is ``kind_or_path``.

        Raises:
          KeyError: No such stage.
        """
        for s in self.stages:
            if kind_or_path in (s.kind, s.path):
                return s
        raise KeyError(f"no stage {kind_or_path!r}; stages: {[s.kind for s in self.stages]}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "host": self.host,
            "pipeline": self.pipeline,
            "root_calls": self.root_calls,
            "slow_root_calls": self.slow_root_calls,
            "skipped_root_calls": self.skipped_root_calls,
            "input_ms": self.input_ms,
            "mean_call_ms": self.mean_call_ms,
            "max_call_ms": self.max_call_ms,
            "cpu_budget": self.cpu_budget,
            "stages": [s.to_dict() for s in self.stages],
            "critical_path": list(self.critical_path),
            "bottleneck": self.bottleneck.to_dict() if self.bottleneck else None,
        }


# --------------------------------------------------------------------- knob advice
def _base_kind(kind: str) -> str:
    return re.sub(r"V\d+$", "", kind)


_SOURCES = frozenset(
    {"TFRecord", "TextLine", "FixedLengthRecord", "FlatMap", "ArrowRecordBatch", "Parquet"}
)
_MEMORY_SOURCES = frozenset({"Range", "TensorSlice", "FromTensor", "SparseTensorSlice"})
_INTERLEAVES = frozenset({"Interleave", "ParallelInterleave", "LegacyParallelInterleave"})


def _yes(value: str | None) -> bool:
    return str(value).lower() == "true"


def advise(
    kind: str,
    params: Mapping[str, str],
    *,
    enclosing: Sequence[tuple[str, Mapping[str, str]]] = (),
    cpu_budget: int | None = None,
    input_batched: bool = False,
) -> tuple[tuple[str, ...], str, str]:
    """Which knobs control a stage, its current setting, and what to change.

    Args:
      kind: Stage kind as traced (``ParallelMapV2``, ``TFRecord``, ...).
      params: The stage's traced settings (``parallelism``, ``cycle_length``, ...).
      enclosing: ``(kind, params)`` of the stages above it, nearest first; a file
        reader inside an interleave is controlled by that interleave.
      cpu_budget: Cores available to tf.data, if known.
      input_batched: The stage's input is already batched (a batch stage below it),
        so a map over it is already vectorized.

    Returns:
      ``(knobs, setting, advice)``: tfinput `PipelineConfig` knob names, a short text
      of the current setting (may be empty) and an imperative advice.
    """
    base = _base_kind(kind)
    auto = " autotuned" if _yes(params.get("autotune")) else ""
    par = params.get("parallelism")
    cores = f" on {cpu_budget} cores" if cpu_budget else ""

    if base in ("ParallelMap", "MapAndBatch", "ParseExample", "Map"):
        if base == "Map":
            return ("map_parallelism",), "sequential", "parallelize the map (map_parallelism)"
        if par is None:
            setting = "parallelism autotuned" if auto else "parallelism not traced"
            return ("map_parallelism",), setting, "raise map parallelism (map_parallelism)"
        setting = f"parallelism {par}{auto}"
        if cpu_budget and (_int(par) or 0) >= cpu_budget:
            if input_batched:
                return (
                    ("map_parallelism", "batch_size"),
                    setting,
                    f"map already uses {par} threads{cores} on batches: make the map itself "
                    "cheaper (fewer ops per feature, larger batches, cache the parsed "
                    "batches, precompute offline) or add cores",
                )
            return (
                ("map_parallelism", "batch_size"),
                setting,
                f"map already uses {par} threads{cores}: make it cheaper (batch before "
                "parsing so parse_example is vectorized, cache, precompute offline)",
            )
        return ("map_parallelism",), setting, "raise map parallelism (map_parallelism)"

    if base in _INTERLEAVES:
        cycle = params.get("cycle_length", "?")
        setting = f"cycle_length {cycle}, parallelism {par or 1}{auto}"
        return (
            ("interleave_cycle_length", "interleave_parallelism"),
            setting,
            "read more files concurrently: raise interleave_cycle_length and "
            "interleave_parallelism",
        )

    if base in _SOURCES:
        for up_kind, up_params in enclosing:
            if _base_kind(up_kind) in _INTERLEAVES:
                cycle = up_params.get("cycle_length", "?")
                up_par = up_params.get("parallelism", "1")
                return (
                    ("interleave_cycle_length", "interleave_parallelism"),
                    f"read by {up_kind} with cycle_length {cycle}, parallelism {up_par}",
                    "file reading is the bottleneck: raise interleave_cycle_length and "
                    "interleave_parallelism (or cache the records)",
                )
        return (
            ("interleave_cycle_length", "interleave_parallelism"),
            "files read one at a time",
            "read the files through an interleave (interleave_cycle_length, "
            "interleave_parallelism) or cache the records",
        )

    if base == "Prefetch":
        buf = params.get("buffer_limit", "?")
        return (
            ("prefetch", "private_threadpool_size"),
            f"buffer {buf}{auto}",
            "training waited on prefetch with nothing upstream running: raise prefetch, "
            "or give tf.data its own threads (private_threadpool_size)",
        )

    if base in ("Batch", "PaddedBatch", "ParallelBatch"):
        size = params.get("batch_size", "?")
        return (
            ("batch_size",),
            f"batch_size {size}",
            "batching is expensive: batch before parsing (vectorized parse), or use "
            "larger batches (batch_size)",
        )

    if base in ("Shuffle", "ShuffleAndRepeat"):
        return (
            ("shuffle_buffer",),
            f"buffer_size {params.get('buffer_size', '?')}",
            "the shuffle buffer refills slowly: lower shuffle_buffer, shuffle files instead",
        )

    if base in ("MemoryCache", "MemoryCacheImpl", "Cache", "CacheImpl"):
        return (
            ("cache",),
            "",
            "the first pass through the cache reads the source: profile after one epoch, "
            "or disable cache",
        )
    if base == "MaxIntraOpParallelism":
        return (("max_intra_op_parallelism",), "", "adjust max_intra_op_parallelism")
    if base == "PrivateThreadPool":
        return (("private_threadpool_size",), "", "adjust private_threadpool_size")
    if base in ("Generator", "FromGenerator"):
        return ((), "", "a Python generator feeds the pipeline: move it to native tf.data ops")
    if base in _MEMORY_SOURCES:
        return ((), "", "an in-memory source is the slowest stage: nothing to tune there")
    if base == "DataService":
        return ((), "", "tf.data service workers are too slow: add workers")
    return ((), "", f"no tfinput knob controls {kind}: simplify or remove this step")


# ----------------------------------------------------------------- event assembly
class _Ev:
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

    def __init__(self, cls: int, name: str, start: int, end: int, stats: dict[str, Any]):
        self.cls = cls
        self.name = name
        self.start = start
        self.end = end
        self.stats = stats
        self.parent: _Ev | None = None
        self.children: list[_Ev] = []
        self.linked = False
        self.unmatched = False


@functools.lru_cache(maxsize=4096)
def _fold_path(name: str) -> str:
    def repl(m: re.Match[str]) -> str:
        return m.group(0) if m.group(1) in _POSITIONAL else f"{m.group(1)}[*]"

    return _INDEX.sub(repl, name)


def _parent_path(path: str) -> str:
    """``A::B[*]::C`` -> ``A::B``; ``Iterator::Root`` -> ``""``."""
    if path.count("::") < 2:
        return ""
    return re.sub(r"\[[^\]]*\]$", "", path.rsplit("::", 1)[0])


def _kind_of(path: str) -> str:
    return re.sub(r"\[[^\]]*\]$", "", path.rsplit("::", 1)[-1])


def _collect(plane: Any) -> list[list[_Ev]]:
    """The relevant events of a host plane, per line (thread), nested by containment."""
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    ids_named: dict[str, set[int]] = collections.defaultdict(set)
    for k, name in stat_names.items():
        ids_named[name].add(k)
    p_ids, c_ids, r_ids = ids_named["_p"], ids_named["_c"], ids_named["_r"]
    elem_ids = ids_named["element_id"]
    ev_names = {k: v.name for k, v in plane.event_metadata.items()}

    lines: list[list[_Ev]] = []
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        evs: list[_Ev] = []
        for e in line.events:
            name = ev_names.get(e.metadata_id, "")
            cls: int | None = None
            if name.startswith("Iterator::"):
                cls = _IT
            elif _OP_NAME.match(name):
                cls = _OP
            elif e.stats:
                sids = {s.metadata_id for s in e.stats}
                if name.endswith("Produce") and sids & elem_ids:
                    cls = _PROD
                elif name.endswith("Consume") and sids & elem_ids:
                    cls = _CONS
                elif sids & p_ids:
                    cls = _FCALL
                elif sids & c_ids:
                    cls = _FEXEC
                elif sids & r_ids:
                    cls = _STEP
            if cls is None:
                continue
            stats = (
                {stat_names.get(s.metadata_id, ""): stat_value(s, stat_names) for s in e.stats}
                if cls != _OP
                else {}
            )
            start = base + e.offset_ps
            evs.append(_Ev(cls, name, start, start + e.duration_ps, stats))
        evs.sort(key=lambda ev: (ev.start, -ev.end))
        stack: list[_Ev] = []
        for ev in evs:
            while stack and (stack[-1].end <= ev.start or stack[-1].end < ev.end):
                stack.pop()
            if stack:
                ev.parent = stack[-1]
            stack.append(ev)
        lines.append(evs)
    return lines


def _nearest(ev: _Ev, classes: tuple[int, ...]) -> _Ev | None:
    up = ev.parent
    while up is not None and up.cls not in classes:
        up = up.parent
    return up


def _union_overlap(spans: Iterable[tuple[int, int]]) -> int:
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


@dataclasses.dataclass
class _Acc:
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
    last_events: list[_Ev] = dataclasses.field(default_factory=list)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _label(dataset_op: str, ops: collections.Counter[str]) -> str:
    names = dataset_op
    if names.startswith("fused(") and names.endswith(")"):
        parts = names[len("fused(") : -1].split(",")
    else:
        parts = [names]
    user = [p for p in parts if p and not _AUTO_DATASET_NAME.match(p)]
    if user:
        return "+".join(user)
    if ops:
        return ops.most_common(1)[0][0]
    return ""


# ------------------------------------------------------------------------ rebuild
def rebuild_stages(
    space: Any, *, host: str, slow_call_us: float = SLOW_CALL_US
) -> tuple[PipelineStages, ...]:
    """Rebuild per-stage timings of every input pipeline in a trace.

    Args:
      space: A parsed XSpace (see `profiles.analysis` for loading files).
      host: Host name, recorded in the results.
      slow_call_us: Threshold above which a call counts as slow (microseconds).

    Returns:
      One `PipelineStages` per root iterator that was called in the trace, the one the
      training loop waited on longest first. Empty when the trace has no tf.data
      iterator events.
    """
    slow_ps = int(slow_call_us * 1e6)
    its: list[_Ev] = []
    conss: list[_Ev] = []
    fcalls: list[_Ev] = []
    fexecs: list[_Ev] = []
    ops: list[_Ev] = []
    for plane in host_planes(space):
        for evs in _collect(plane):
            for ev in evs:
                if ev.cls == _IT:
                    its.append(ev)
                elif ev.cls == _CONS:
                    conss.append(ev)
                elif ev.cls == _FCALL:
                    fcalls.append(ev)
                elif ev.cls == _FEXEC:
                    fexecs.append(ev)
                elif ev.cls == _OP:
                    ops.append(ev)
    if not its:
        return ()

    # Iterator identity: id -> folded path, id -> parent id.
    path_of: dict[int, str] = {}
    parent_of: dict[int, int | None] = {}
    for ev in its:
        iid = _int(ev.stats.get("id"))
        if iid is None:
            continue
        path_of.setdefault(iid, _fold_path(ev.name))
        parent_of.setdefault(iid, _int(ev.stats.get("parent_id")))

    # Same-thread children, and the iterators each Produce event ran.
    produced: dict[tuple[int, int], list[_Ev]] = collections.defaultdict(list)
    prod_owner: dict[int, int] = {}  # id(produce event) -> consuming iterator id
    for ev in its:
        up = _nearest(ev, (_IT, _PROD))
        if up is None:
            continue
        if up.cls == _IT:
            up.children.append(ev)
        else:
            owner = _int(ev.stats.get("parent_id"))
            element = _int(up.stats.get("element_id"))
            if owner is not None and element is not None:
                produced[(owner, element)].append(ev)
                prod_owner.setdefault(id(up), owner)
    for ev in conss:
        owner_ev = _nearest(ev, (_IT,))
        element = _int(ev.stats.get("element_id"))
        if owner_ev is None or element is None:
            continue
        owner = _int(owner_ev.stats.get("id"))
        children = produced.get((owner, element), ())  # type: ignore[arg-type]
        if not children:
            owner_ev.unmatched = True
        for child in children:
            if not child.linked:
                child.linked = True
                owner_ev.children.append(child)

    # Which pipeline (root iterator id) each iterator belongs to.
    def root_of(iid: int) -> int:
        seen = set()
        while parent_of.get(iid) is not None and iid not in seen:
            seen.add(iid)
            iid = parent_of[iid]  # type: ignore[assignment]
        return iid

    accs: dict[tuple[int, str], _Acc] = collections.defaultdict(_Acc)

    key_of: dict[tuple[int, str], tuple[int, str]] = {}

    def acc_of(ev: _Ev) -> _Acc | None:
        iid = _int(ev.stats.get("id"))
        if iid is None:
            return None
        key = key_of.get((iid, ev.name))
        if key is None:
            key = key_of[(iid, ev.name)] = (root_of(iid), _fold_path(ev.name))
        return accs[key]

    # All calls: count, wall and busy (self over the whole span) time, latest params.
    for ev in its:
        acc = acc_of(ev)
        if acc is None:
            continue
        dur = ev.end - ev.start
        acc.calls += 1
        acc.wall_ps += dur
        covered = _union_overlap(
            (max(c.start, ev.start), min(c.end, ev.end))
            for c in ev.children
            if c.end > ev.start and c.start < ev.end
        )
        acc.busy_ps += dur - covered
        acc.last_events.append(ev)
        if not acc.dataset_op:
            acc.dataset_op = str(ev.stats.get("name", ""))
    # Settings as last traced (autotuning changes them); "unavailable" values are
    # taken from an earlier call.
    for acc in accs.values():
        for ev in reversed(acc.last_events[-8:]):
            for k, v in ev.stats.items():
                if (
                    k
                    and k not in _IGNORED_PARAMS
                    and k != "name"
                    and k not in acc.params
                    and str(v) != "unavailable"
                ):
                    acc.params[k] = str(v)
        acc.last_events = []

    # Critical path: split each root call's duration down the tree.
    roots: dict[int, list[_Ev]] = collections.defaultdict(list)
    for ev in its:
        if ev.name.count("::") == 1:
            iid = _int(ev.stats.get("id"))
            if iid is not None:
                roots[iid].append(ev)

    def visit(ev: _Ev, lo: int, hi: int, level: int) -> None:
        acc = acc_of(ev)
        if acc is None or level > 200:
            return
        windows = []
        for c in ev.children:
            a, b = max(c.start, lo), min(c.end, hi)
            if b > a:
                windows.append((c, a, b))
        self_ps = (hi - lo) - _union_overlap((a, b) for _, a, b in windows)
        acc.critical_calls += 1
        acc.self_ps += self_ps
        acc.crit_wall_ps += hi - lo
        if self_ps > slow_ps:
            acc.slow_calls += 1
        for c, a, b in windows:
            visit(c, a, b, level + 1)

    # The profiler only records events that start after it started. A call that waited
    # on an element whose production began before that has no traced producer (its
    # Consume event matches no Produce event), and its whole wait would be charged to
    # the consuming stage: such slow calls (the first one or two of a trace) are left
    # out of the split. Fast unmatched calls (elements buffered ahead) are kept.
    def explainable(ev: _Ev, level: int = 0) -> bool:
        if ev.unmatched and ev.end - ev.start > slow_ps:
            return False
        return level > 200 or all(explainable(c, level + 1) for c in ev.children)

    skipped: dict[int, int] = {}
    for rid, events in list(roots.items()):
        roots[rid] = [ev for ev in events if explainable(ev)] or events
        skipped[rid] = len(events) - len(roots[rid])
        for ev in roots[rid]:
            visit(ev, ev.start, ev.end, 0)

    # Function ops, attributed to the stage whose function ran them.
    stage_of_call: dict[tuple[Any, Any], tuple[int, str]] = {}
    for ev in fcalls:
        up = _nearest(ev, (_IT, _PROD))
        iid: int | None = None
        if up is not None and up.cls == _IT:
            iid = _int(up.stats.get("id"))
        elif up is not None:
            iid = prod_owner.get(id(up))
        if iid is not None and iid in path_of:
            key = (ev.stats.get("_pt"), ev.stats.get("_p"))
            stage_of_call[key] = (root_of(iid), path_of[iid])
    stage_of_exec: dict[int, tuple[int, str]] = {}
    for ev in fexecs:
        key = (ev.stats.get("_ct"), ev.stats.get("_c"))
        if key in stage_of_call:
            stage_of_exec[id(ev)] = stage_of_call[key]
    nested_op_ps: dict[int, int] = collections.Counter()
    for ev in ops:
        up = _nearest(ev, (_OP, _FEXEC, _IT))
        if up is not None and up.cls == _OP:
            nested_op_ps[id(up)] += ev.end - ev.start
    for ev in ops:
        up = _nearest(ev, (_OP, _FEXEC, _IT))
        if up is None or up.cls == _OP:
            continue
        if up.cls == _FEXEC:
            stage = stage_of_exec.get(id(up))
        else:
            iid = _int(up.stats.get("id"))
            stage = (root_of(iid), path_of[iid]) if iid in path_of else None  # type: ignore[arg-type]
        if stage is None:
            continue
        op_type = ev.name.rsplit(":", 1)[-1]
        accs[stage].ops[op_type] += ev.end - ev.start - nested_op_ps.get(id(ev), 0)

    return tuple(
        sorted(
            (
                _assemble(host, root_id, events, accs, slow_ps, skipped[root_id])
                for root_id, events in roots.items()
            ),
            key=lambda p: -p.input_ms,
        )
    )


def _assemble(
    host: str,
    root_id: int,
    root_events: list[_Ev],
    accs: Mapping[tuple[int, str], _Acc],
    slow_ps: int,
    skipped: int,
) -> PipelineStages:
    durations = [ev.end - ev.start for ev in root_events]
    input_ps = sum(durations)
    root_stats = root_events[0].stats
    cpu_budget = _int(root_stats.get("cpu_budget"))
    mine = {path: acc for (rid, path), acc in accs.items() if rid == root_id}
    params_of = {path: acc.params for path, acc in mine.items()}

    stages = []
    for path, acc in mine.items():
        kind = _kind_of(path)
        enclosing = []
        up = _parent_path(path)
        while up:
            if up in params_of:
                enclosing.append((_kind_of(up), params_of[up]))
            up = _parent_path(up)
        knobs, _, advice_text = advise(
            kind,
            acc.params,
            enclosing=enclosing,
            cpu_budget=cpu_budget,
            input_batched=_batched_below(path, mine),
        )
        fn_ps = sum(acc.ops.values())
        stages.append(
            Stage(
                path=path,
                kind=kind,
                label=_label(acc.dataset_op, acc.ops),
                dataset_op=acc.dataset_op,
                depth=path.count("::") - 1,
                calls=acc.calls,
                critical_calls=acc.critical_calls,
                slow_calls=acc.slow_calls,
                self_ms=acc.self_ps / _PS_PER_MS,
                self_fraction=acc.self_ps / input_ps if input_ps else 0.0,
                busy_ms=acc.busy_ps / _PS_PER_MS,
                wall_ms=acc.wall_ps / _PS_PER_MS,
                function_ms=fn_ps / _PS_PER_MS,
                function_ops=tuple(
                    (op, ps / _PS_PER_MS) for op, ps in acc.ops.most_common(5) if ps > 0
                ),
                params=dict(acc.params),
                knobs=knobs,
                advice=advice_text,
            )
        )
    stages.sort(key=lambda s: (-s.self_ms, s.depth))

    # Critical path: from the root, follow the child waited on longest, as long as the
    # wait under that child is longer than the wait on the stage itself.
    crit_wall = {path: acc.crit_wall_ps for path, acc in mine.items()}
    chain = [_fold_path(root_events[0].name)]
    while True:
        children = [p for p, ps in crit_wall.items() if ps > 0 and _parent_path(p) == chain[-1]]
        if not children:
            break
        best = max(children, key=lambda p: crit_wall[p])
        here = mine.get(chain[-1])
        if here is not None and crit_wall[best] <= here.self_ps:
            break
        chain.append(best)

    bottleneck = _bottleneck(
        stages, input_ps=input_ps, calls=len(durations), slow_ps=slow_ps, cpu_budget=cpu_budget
    )
    return PipelineStages(
        host=host,
        pipeline=str(root_stats.get("name", "")),
        root_calls=len(durations),
        skipped_root_calls=skipped,
        slow_root_calls=sum(d > slow_ps for d in durations),
        input_ms=input_ps / _PS_PER_MS,
        mean_call_ms=input_ps / len(durations) / _PS_PER_MS,
        max_call_ms=max(durations) / _PS_PER_MS,
        cpu_budget=cpu_budget,
        stages=tuple(stages),
        critical_path=tuple(chain),
        bottleneck=bottleneck,
    )


def _bottleneck(
    stages: Sequence[Stage], *, input_ps: int, calls: int, slow_ps: int, cpu_budget: int | None
) -> Bottleneck | None:
    candidates = [s for s in stages if s.self_ms > 0 and s.kind != "Root"] or [
        s for s in stages if s.self_ms > 0
    ]
    if not candidates:
        return None
    top = max(candidates, key=lambda s: s.self_ms)
    knobs, setting, advice_text = advise(
        top.kind,
        top.params,
        enclosing=_enclosing(top, stages),
        cpu_budget=cpu_budget,
        input_batched=_batched_below(top.path, {s.path: s for s in stages}),
    )
    significant = calls > 0 and input_ps / calls > slow_ps
    head = f"{top.display_name}: self time {top.self_fraction:.0%}"
    if setting:
        head += f", {setting}"
    per_batch = top.critical_calls / calls if calls else 0.0
    per_call_us = top.self_ms * 1e3 / top.critical_calls if top.critical_calls else 0.0
    if per_batch >= _MANY_CALLS and per_call_us < _CHEAP_CALL_US:
        advice_text += (
            f"; the cost is per element ({per_batch:.0f} calls per batch, {per_call_us:.0f} µs "
            "each): batch before this stage so each call moves more data"
        )
    if significant:
        summary = f"{head}: {advice_text}"
    else:
        summary = (
            f"{head}; the pipeline keeps up (mean wait {input_ps / max(calls, 1) / 1e6:.0f} µs "
            "per batch), nothing to tune"
        )
    return Bottleneck(
        stage=top.path,
        display_name=top.display_name,
        self_fraction=top.self_fraction,
        setting=setting,
        knobs=knobs,
        advice=advice_text,
        significant=significant,
        summary=summary,
    )


def _batched_below(path: str, paths: Iterable[str]) -> bool:
    """Whether a batch stage feeds ``path`` (is below it in the iterator tree)."""
    prefix = path + "::"
    return any(
        p.startswith(prefix)
        and _base_kind(_kind_of(p)) in ("Batch", "PaddedBatch", "ParallelBatch")
        for p in paths
    )


def _enclosing(stage: Stage, stages: Sequence[Stage]) -> list[tuple[str, Mapping[str, str]]]:
    by_path = {s.path: s for s in stages}
    out = []
    up = _parent_path(stage.path)
    while up:
        if up in by_path:
            out.append((by_path[up].kind, by_path[up].params))
        up = _parent_path(up)
    return out
