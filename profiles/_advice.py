"""Which `PipelineConfig` knobs control a tf.data stage, and what to change.

`advise` maps a stage kind as traced (``ParallelMapV2``, ``TFRecord``, ``Prefetch``,
...) and its traced settings to the tfinput knobs that control it, a short text of
the current setting and an imperative advice. `profiles._stages` uses it to label
every rebuilt stage and to word the bottleneck verdict.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

__all__ = ["advise", "base_kind", "is_batch_kind"]

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
