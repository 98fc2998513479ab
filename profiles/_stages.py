"""Rebuild tf.data stage timings from a host trace and name the bottleneck stage.

tf.data emits one ``Iterator::<path>`` event per ``GetNext`` call of every iterator
(``Iterator::Root::Prefetch::ParallelMapV2`` is the map under the prefetch under the
root). Asynchronous stages (prefetch, parallel map, parallel interleave, map-and-batch,
parallel batch) produce elements on their own threads; they mark the work with a
``<Stage>Produce`` event and the hand-over with a ``<Stage>Consume`` event that share an
``element_id``. xprof's "tf.data bottleneck analysis" turned those events into stage
timings until it was removed in 2025; this module rebuilds it:

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

The work is split by responsibility: `profiles._trace_events` reads and nests the
events, `profiles._stage_tree` links them into iterator trees and accumulates each
stage's times, `profiles._stage_tree` names the knobs, and this module holds the results,
the bottleneck verdict and `rebuild_stages`, which runs those steps in order.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from profiles._stage_tree import (
    IteratorTree,
    StageAcc,
    StageKey,
    StageTable,
    accumulate_calls,
    advise,
    attribute_function_ops,
    is_batch_kind,
    link_children,
    root_calls,
    settle_params,
    split_critical_path,
)
from profiles._trace_events import Event, as_int, fold_path, gather_events, kind_of, parent_path

#: A call slower than this made the consumer wait; xprof's own threshold for a "slow"
#: input-pipeline call.
SLOW_CALL_US = 50.0

_PS_PER_MS = 1e9
# A stage called this many times per batch, each call this cheap, costs per element.
_MANY_CALLS = 64
_CHEAP_CALL_US = 20.0

_AUTO_DATASET_NAME = re.compile(r"^[A-Za-z0-9_]*Dataset(V\d+)?:\d+$")


# --------------------------------------------------------------------------- results
@dataclasses.dataclass(frozen=True, kw_only=True)
class StageTiming:
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

    def to_dict(self) -> dict[str, object]:
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
      stage: Its `StageTiming.path`.
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

    def to_dict(self) -> dict[str, object]:
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
    stages: tuple[StageTiming, ...]
    critical_path: tuple[str, ...]
    bottleneck: Bottleneck | None

    def stage(self, kind_or_path: str) -> StageTiming:
        """The first stage whose kind or path is ``kind_or_path``.

        Raises:
          KeyError: No such stage.
        """
        for s in self.stages:
            if kind_or_path in (s.kind, s.path):
                return s
        raise KeyError(f"no stage {kind_or_path!r}; stages: {[s.kind for s in self.stages]}")

    def to_dict(self) -> dict[str, object]:
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


# ------------------------------------------------------------------------ rebuild
def rebuild_stages(
    space: Any, *, host: str, slow_call_us: float = SLOW_CALL_US
) -> tuple[PipelineStages, ...]:
    """Rebuild per-stage timings of every input pipeline in a trace.

    Args:
      space: A parsed XSpace (see `profiles._analysis` for loading files).
      host: Host name, recorded in the results.
      slow_call_us: Threshold above which a call counts as slow (microseconds).

    Returns:
      One `PipelineStages` per root iterator that was called in the trace, the one the
      training loop waited on longest first. Empty when the trace has no tf.data
      iterator events.
    """
    slow_ps = int(slow_call_us * 1e6)
    events = gather_events(space)
    if not events.iterators:
        return ()
    prod_owner = link_children(events)
    table = StageTable(IteratorTree(events.iterators))
    accumulate_calls(events.iterators, table)
    settle_params(table)
    roots = root_calls(events.iterators)
    skipped = split_critical_path(roots, table, slow_ps=slow_ps)
    attribute_function_ops(events, table, prod_owner)
    pipelines = (
        _assemble(host, root_id, calls, table.accs, slow_ps=slow_ps, skipped=skipped[root_id])
        for root_id, calls in roots.items()
    )
    return tuple(sorted(pipelines, key=lambda p: -p.input_ms))


# ---------------------------------------------------------------------- results
def _assemble(
    host: str,
    root_id: int,
    root_events: list[Event],
    accs: Mapping[StageKey, StageAcc],
    *,
    slow_ps: int,
    skipped: int,
) -> PipelineStages:
    """The `PipelineStages` of one root iterator from its stages' accumulators."""
    durations = [ev.end - ev.start for ev in root_events]
    input_ps = sum(durations)
    root_stats = root_events[0].stats
    cpu_budget = as_int(root_stats.get("cpu_budget"))
    mine = {path: acc for (rid, path), acc in accs.items() if rid == root_id}
    stages = _stage_timings(mine, input_ps=input_ps, cpu_budget=cpu_budget)
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
        stages=stages,
        critical_path=_critical_chain(fold_path(root_events[0].name), mine),
        bottleneck=_bottleneck(
            stages,
            input_ps=input_ps,
            calls=len(durations),
            slow_ps=slow_ps,
            cpu_budget=cpu_budget,
        ),
    )


def _stage_timings(
    accs: Mapping[str, StageAcc], *, input_ps: int, cpu_budget: int | None
) -> tuple[StageTiming, ...]:
    """One `StageTiming` per stage path, largest critical-path self time first."""
    params_of = {path: acc.params for path, acc in accs.items()}
    stages = []
    for path, acc in accs.items():
        kind = kind_of(path)
        label = _label(acc.dataset_op, acc.ops)
        knobs, _, advice_text = advise(
            kind,
            acc.params,
            label=label,
            enclosing=_enclosing(path, params_of),
            cpu_budget=cpu_budget,
            input_batched=_batched_below(path, accs),
        )
        stages.append(
            StageTiming(
                path=path,
                kind=kind,
                label=label,
                dataset_op=acc.dataset_op,
                depth=path.count("::") - 1,
                calls=acc.calls,
                critical_calls=acc.critical_calls,
                slow_calls=acc.slow_calls,
                self_ms=acc.self_ps / _PS_PER_MS,
                self_fraction=acc.self_ps / input_ps if input_ps else 0.0,
                busy_ms=acc.busy_ps / _PS_PER_MS,
                wall_ms=acc.wall_ps / _PS_PER_MS,
                function_ms=sum(acc.ops.values()) / _PS_PER_MS,
                function_ops=tuple(
                    (op, ps / _PS_PER_MS) for op, ps in acc.ops.most_common(5) if ps > 0
                ),
                params=dict(acc.params),
                knobs=knobs,
                advice=advice_text,
            )
        )
    stages.sort(key=lambda s: (-s.self_ms, s.depth))
    return tuple(stages)


def _label(dataset_op: str, ops: collections.Counter[str]) -> str:
    """The user's dataset name, else the op that dominates the stage's functions."""
    if dataset_op.startswith("fused(") and dataset_op.endswith(")"):
        parts = dataset_op[len("fused(") : -1].split(",")
    else:
        parts = [dataset_op]
    user = [p for p in parts if p and not _AUTO_DATASET_NAME.match(p)]
    if user:
        return "+".join(user)
    if ops:
        return ops.most_common(1)[0][0]
    return ""


def _critical_chain(root_path: str, accs: Mapping[str, StageAcc]) -> tuple[str, ...]:
    """From the root, follow the child waited on longest, as long as the wait under
    that child is longer than the wait on the stage itself."""
    crit_wall = {path: acc.crit_wall_ps for path, acc in accs.items()}
    chain = [root_path]
    while True:
        children = [p for p, ps in crit_wall.items() if ps > 0 and parent_path(p) == chain[-1]]
        if not children:
            break
        best = max(children, key=lambda p: crit_wall[p])
        here = accs.get(chain[-1])
        if here is not None and crit_wall[best] <= here.self_ps:
            break
        chain.append(best)
    return tuple(chain)


# ----------------------------------------------------------------- the verdict
def _bottleneck(
    stages: Sequence[StageTiming],
    *,
    input_ps: int,
    calls: int,
    slow_ps: int,
    cpu_budget: int | None,
) -> Bottleneck | None:
    """The stage with the largest self time (not the root, unless it is the only one)."""
    candidates = [s for s in stages if s.self_ms > 0 and s.kind != "Root"] or [
        s for s in stages if s.self_ms > 0
    ]
    if not candidates:
        return None
    top = max(candidates, key=lambda s: s.self_ms)
    knobs, setting, advice_text = advise(
        top.kind,
        top.params,
        label=top.label,
        enclosing=_enclosing(top.path, {s.path: s.params for s in stages}),
        cpu_budget=cpu_budget,
        input_batched=_batched_below(top.path, {s.path: s for s in stages}),
    )
    advice_text += _per_element_note(top, calls)
    significant = calls > 0 and input_ps / calls > slow_ps
    head = f"{top.display_name}: self time {top.self_fraction:.0%}"
    if setting:
        head += f", {setting}"
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


def _per_element_note(stage: StageTiming, calls: int) -> str:
    """Advice for a stage called many times per batch, cheaply each time (or ``""``)."""
    per_batch = stage.critical_calls / calls if calls else 0.0
    per_call_us = stage.self_ms * 1e3 / stage.critical_calls if stage.critical_calls else 0.0
    if per_batch >= _MANY_CALLS and per_call_us < _CHEAP_CALL_US:
        return (
            f"; the cost is per element ({per_batch:.0f} calls per batch, {per_call_us:.0f} µs "
            "each): one thread handles every element here, so more cores do not help; "
            "batch before this stage so each call moves more data (TFRecord: read_batch, "
            "default 64, batches records inside the file branches)"
        )
    return ""


def _batched_below(path: str, paths: Iterable[str]) -> bool:
    """Whether a batch stage feeds ``path`` (is below it in the iterator tree)."""
    prefix = path + "::"
    return any(p.startswith(prefix) and is_batch_kind(kind_of(p)) for p in paths)


def _enclosing(
    path: str, params_of: Mapping[str, Mapping[str, str]]
) -> list[tuple[str, Mapping[str, str]]]:
    """``(kind, params)`` of the stages above ``path``, nearest first."""
    out = []
    up = parent_path(path)
    while up:
        if up in params_of:
            out.append((kind_of(up), params_of[up]))
        up = parent_path(up)
    return out
