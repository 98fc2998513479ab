"""Skeleton steps the sources and `tfinput.Pipeline.build` share: shard, file order,
interleave, parallelism arguments, and the warning for knobs a source cannot honour."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tfinput._src.core.config import AUTOTUNE, PipelineConfig
from tfinput._src.core.sources.protocol import ReadRequest, Source

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

__all__ = [
    "parallel_calls",
    "deterministic_arg",
    "file_order",
    "interleave_files",
    "plan_shards",
    "read_parallelism",
    "shard_files",
    "single_core_options",
    "knob_is_set",
    "warn_unhonoured",
]

log = logging.getLogger("tfinput")


def parallel_calls(value: int) -> int | None:
    """``num_parallel_calls`` for a parallelism knob: AUTOTUNE stays, 1 means the
    sequential op (None), which is cheaper than a parallel op with one thread."""
    return None if value == 1 else value


def deterministic_arg(config: PipelineConfig) -> bool | None:
    """The ``deterministic`` argument of a parallel op (None: the options decide)."""
    return None if config.deterministic is AUTOTUNE else bool(config.deterministic)


def file_order(files: tf.data.Dataset, count: int, request: ReadRequest) -> tf.data.Dataset:
    """A dataset of per-file elements, reshuffled every epoch when the request shuffles
    files (seeded by ``shuffle_seed``) and there are several."""
    if request.shuffle_files and count > 1:
        config = request.config
        return files.shuffle(count, seed=config.shuffle_seed, reshuffle_each_iteration=True)
    return files


def traced(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` for a tf.data function, traced as written instead of converted by
    autograph. tfinput's dataset functions hold no Python control flow on tensor values
    (a tensor used as a bool fails the build loudly), so the graph is the same either
    way; the conversion only costs CPU at every build, seconds on the first one in a
    process (a CLI command, a tf.data service worker)."""
    import tensorflow as tf

    return tf.autograph.experimental.do_not_convert(fn)


def read_parallelism(config: PipelineConfig) -> int:
    """The interleave's parallelism: ``interleave_parallelism`` capped at the cycle
    length (AUTOTUNE stays); 1 means the files are read by the sequential op."""
    cycle = config.interleave_cycle_length
    parallel = config.interleave_parallelism
    if cycle != AUTOTUNE and parallel != AUTOTUNE:
        parallel = min(parallel, cycle)
    return parallel


def interleave_files(
    files: tf.data.Dataset, read: Callable[[Any], tf.data.Dataset], config: PipelineConfig
) -> tf.data.Dataset:
    """``files.interleave(read)`` with the config's interleave knobs (`read_parallelism`;
    1 means the sequential op). Named ``read`` in traces."""
    cycle = config.interleave_cycle_length
    parallel = read_parallelism(config)
    block = None if config.interleave_block_length == AUTOTUNE else config.interleave_block_length
    return files.interleave(
        traced(read),
        cycle_length=cycle,
        block_length=block,
        num_parallel_calls=parallel_calls(parallel),
        deterministic=deterministic_arg(config) if parallel_calls(parallel) else None,
        name="read",
    )


def shard_files(files: list[str], input_context: Any, what: str) -> list[str]:
    """This input pipeline's files: every ``n``-th from its id (whole files).

    Raises:
      SourceError: fewer files than input pipelines (`plan_shards` falls back instead).
    """
    from tfinput._src.core.errors import SourceError

    if not files or input_context is None or input_context.num_input_pipelines == 1:
        return files
    n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
    if len(files) < n:
        raise SourceError(
            f"{n} input pipelines but only {len(files)} {what} file(s): each pipeline "
            "reads whole files, so write at least as many files as input pipelines"
        )
    return files[i::n]


def plan_shards(
    files: list[str], input_context: Any, what: str
) -> tuple[list[str], tuple[int, int] | None]:
    """How this input pipeline gets its share: ``(files, None)`` when there are at
    least as many files as input pipelines (file sharding, `shard_files`: disjoint
    whole files that cover every file), else ``(every file, (n, i))``: data sharding,
    where every pipeline reads every file in the same order and keeps every ``n``-th
    element from its id ``i`` (`Dataset.shard`). Data sharding is exact but reads
    all the data on every host, so it is logged as a warning once per process."""
    if not files or input_context is None or input_context.num_input_pipelines == 1:
        return files, None
    n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
    if len(files) >= n:
        return files[i::n], None
    key = ("data-sharding", what, str(len(files)), str(n))
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning(
            "tfinput: %d input pipelines but only %d %s file(s): falling back to data "
            "sharding (every pipeline reads all %d file(s) in one fixed order and keeps "
            "every %d-th element; reads %dx the data; a file shuffle without shuffle_seed "
            "uses seed 0 on every host). Write at least %d files to shard whole files "
            "instead",
            n, len(files), what, len(files), n, n, n,
        )  # fmt: skip
    return files, (n, i)


def single_core_options() -> tf.data.Options:
    """Options of a roofline stage: one private thread, no intra-op parallelism, no
    autotuning."""
    import tensorflow as tf

    opts = tf.data.Options()
    opts.threading.private_threadpool_size = 1
    opts.threading.max_intra_op_parallelism = 1
    opts.autotune.enabled = False
    return opts


#: Knobs whose AUTOTUNE or 1 means "one stream, in order", which every source does.
_SEQUENTIAL_DEFAULTS = (AUTOTUNE, 1)
_WARNED: set[tuple[str, str, str, str]] = set()


def knob_is_set(config: PipelineConfig, name: str) -> bool:
    """Whether ``config`` asks for something with knob ``name``: an interleave knob
    other than AUTOTUNE or 1, a non-zero ``shuffle_buffer``, ``cache`` on."""
    value = getattr(config, name)
    if name.startswith("interleave_"):
        return value not in _SEQUENTIAL_DEFAULTS
    return bool(value)


def warn_unhonoured(source: Source, request: ReadRequest) -> None:
    """Log each knob the source cannot honour, naming it, its value and why (once per
    source kind, knob and value: the tuner builds the same pipeline many times)."""
    for knob, why in source.unhonoured(request).items():
        value = getattr(request.config, knob, None)
        shown = f"{knob}={value!r}" if value is not None else knob
        key = (source.kind, knob, repr(value), why)
        if key in _WARNED:
            continue
        _WARNED.add(key)
        log.warning("tfinput: %s has no effect on the %s source: %s", shown, source.kind, why)
