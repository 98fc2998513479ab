"""Pieces of `tfinput.Pipeline` kept beside its module: what `Pipeline.build` assembles
(the tf.data options of a config, the two-tower split and its checks, the warning for
very large padded batches) and the files' versions a failed read is explained against.
`Pipeline.check` is `_pipeline_check`'s. `tfinput.pipeline`
is the public API."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from tfinput._src.core._input_files import file_version
from tfinput._src.core.config import AUTOTUNE, PipelineConfig
from tfinput._src.core.errors import ConfigError, TfinputError
from tfinput._src.core.schema import Schema
from tfinput._src.core.sources.protocol import FileChecks, ReadRequest, plan_shards

if TYPE_CHECKING:
    from tfinput._src.core.sources.protocol import Source

log = logging.getLogger("tfinput")


def check_towers(schema: Schema, layout: str) -> None:
    """Raise `ConfigError` unless ``schema`` marks both towers and ``layout`` is
    per-feature."""
    missing = [side for side in ("query", "candidate") if not schema.tower(side)]
    if missing:
        raise ConfigError(
            f"with_towers: the schema marks no {' and no '.join(missing)} feature; set "
            'tower="query" / tower="candidate" on its features (Schema.with_towers, or '
            '"tower" in the schema JSON)'
        )
    if layout == "packed":
        raise ConfigError(
            "with_towers: the packed layout is not supported with towers; use the "
            'per_feature layout (leave PipelineConfig.layout None or "per_feature")'
        )


def split_towers(out: tuple[Any, Any], schema: Schema) -> tuple[Any, Any]:
    """``(features, labels)`` of `transform_batch` split into ``{"query": ...,
    "candidate": ...}``, each with the ``dense``/``ids``/``weights`` groups."""
    features, labels = out
    towers: dict[str, Any] = {}
    for side in ("query", "candidate"):
        names = {f.name for f in schema.tower(side)}
        towers[side] = {
            group: {n: v for n, v in values.items() if n in names}
            for group, values in features.items()
        }
    return towers, labels


#: One padded dense multi-hot batch above this many bytes is logged at build.
LARGE_BATCH_BYTES = 256 * 2**20


def warn_large_padded_batches(schema: Schema, batch_size: int) -> None:
    """The dense format pads every list to ``max_len``: ``batch * max_len`` int32 ids
    plus float32 weights per feature, whatever the real list lengths."""
    for f in schema.multi_hot:
        size = 8 * batch_size * f.max_len
        if size > LARGE_BATCH_BYTES:
            log.warning(
                "tfinput: feature %r: max_len %d pads each batch of %d to %.0f MiB of ids "
                "and weights; lower max_len (most lists are shorter?) or use "
                'with_multi_hot_format("ragged"/"sparse")',
                f.name,
                f.max_len,
                batch_size,
                size / 2**20,
            )


def has_min_parallelism() -> bool:
    """Whether this TensorFlow's tf.data has ``Options.autotune.min_parallelism``."""
    return hasattr(tf.data.Options().autotune, "min_parallelism")


def pipeline_options(config: PipelineConfig, *, sharded: bool) -> tf.data.Options:
    opts = tf.data.Options()
    if config.private_threadpool_size != AUTOTUNE:
        opts.threading.private_threadpool_size = config.private_threadpool_size
    if config.max_intra_op_parallelism != AUTOTUNE:
        opts.threading.max_intra_op_parallelism = config.max_intra_op_parallelism
    if config.deterministic is not AUTOTUNE:
        opts.deterministic = bool(config.deterministic)
    if config.autotune_ram_budget != AUTOTUNE:
        opts.autotune.ram_budget = config.autotune_ram_budget
    if config.autotune_min_parallelism != AUTOTUNE:
        if has_min_parallelism():
            opts.autotune.min_parallelism = config.autotune_min_parallelism
        else:
            log.warning(
                "tfinput: autotune_min_parallelism=%d ignored: TensorFlow %s has no "
                "tf.data Options.autotune.min_parallelism (2.20 and later)",
                config.autotune_min_parallelism,
                tf.__version__,
            )
    if sharded:
        # tfinput shards files itself; stop tf.distribute from sharding again.
        opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return opts


def checked_config(config: PipelineConfig | None) -> PipelineConfig:
    """``config``, or the default `PipelineConfig()` for None.

    Raises:
      ConfigError: not a `PipelineConfig`.
    """
    config = config or PipelineConfig()
    if not isinstance(config, PipelineConfig):
        raise ConfigError(f"config: expected a PipelineConfig, got {type(config).__name__}")
    return config


def records(source: Source, request: ReadRequest) -> tf.data.Dataset:
    """The source's records (or batches, for a source that batches itself) for
    ``request``: files shuffled and interleaved, sharded by element when there are
    fewer files than input pipelines, cached and shuffled as the config asks."""
    config = request.config
    ds = source.read(request)
    if request.data_shard is not None:  # fewer files than input pipelines
        ds = ds.shard(*request.data_shard)
    if config.cache:
        ds = ds.cache()
    if config.shuffle_buffer and not source.batches_itself:
        ds = source.shuffle_records(ds, request)
    return ds


def read_request(
    source: Source,
    schema: Schema,
    config: PipelineConfig,
    input_context: Any,
    *,
    shuffle_files: bool,
) -> ReadRequest:
    """``source``'s files for this input pipeline (sharded, validated against
    ``schema``, the schema a build reads) and the per-replica batch size."""
    batch_size = config.batch_size
    if input_context is not None:
        batch_size = input_context.get_per_replica_batch_size(config.batch_size)
    files, data_shard = plan_shards(source.files(), input_context, source.kind)
    if data_shard is not None:
        # Every pipeline must read the files in one order for `shard` to split them:
        # a deterministic read, and the same file-shuffle seed on every host.
        seed = config.shuffle_seed
        if seed is None and shuffle_files:
            seed = 0
        config = dataclasses.replace(config, deterministic=True, shuffle_seed=seed)
    source.validate(files, schema)
    return ReadRequest(
        files=files,
        schema=schema,
        config=config,
        batch_size=batch_size,
        shuffle_files=shuffle_files,
        input_context=input_context,
        data_shard=data_shard,
    )


FileVersions = tuple[tuple[str, "tuple[int, int] | None"], ...]


def file_versions(source: Source) -> FileVersions:
    """Each local file's `file_version` now (before a read starts), for
    `explain_failure`; nothing for a source without files or whose files cannot be
    listed (the read names that itself)."""
    if not isinstance(source, FileChecks):
        return ()
    try:
        files = source.files()
    except (TfinputError, OSError):
        return ()
    versions = []
    for path in files:
        try:
            versions.append((path, file_version(path)))
        except OSError:  # gone already: the read says so
            continue
    return tuple(versions)
