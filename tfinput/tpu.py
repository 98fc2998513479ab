"""TPU embedding glue: `TableConfig` / `FeatureConfig` from a schema, and where to
place each table.

    tables, features = tfinput.embedding_configs(schema, per_replica_batch_size=512)
    embedding = tf.tpu.experimental.embedding.TPUEmbedding(features, optimizer)

Feeding the TPU embedding layer (on the host, never fetched to the device)::

    pipeline = tfinput.tfrecord(files, schema).with_multi_hot_format("sparse")
    dist = strategy.distribute_datasets_from_function(
        lambda ctx: pipeline.build(config, ctx),
        options=tf.distribute.InputOptions(experimental_fetch_to_device=False))
    features, labels = next(iter(dist))
    embedding.enqueue(features["ids"], weights=tfinput.tpu.enqueue_weights(schema, features))

Single-id features are dense ``[B]`` int32; multi-hot features are SparseTensor (or
RaggedTensor) int32 with their weights. The TPU casts ids to int32: tfinput's tables
are capped at 2**31 - 1 rows, so every id fits.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfinput.errors import ConfigError
from tfinput.schema import MultiHot, Schema

__all__ = ["embedding_configs", "placement", "Placement", "enqueue_weights"]

#: Tables up to this many rows are better replicated on every core than sharded
#: (TFRS ``PartialTPUEmbedding`` uses the same idea with ``size_threshold``).
MIRROR_THRESHOLD = 10_000
#: Above this many rows the TPU embedding (SparseCore) path clearly pays off.
SHARD_THRESHOLD = 100_000


def embedding_configs(
    schema: Schema,
    *,
    per_replica_batch_size: int,
    initializer: Any = None,
    optimizer: Any = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build `tf.tpu.experimental.embedding` configs from the schema.

    Args:
      schema: The schema; every categorical feature gets a `FeatureConfig`, every table
        one `TableConfig` shared by the features that name it.
      per_replica_batch_size: Batch size each replica enqueues; becomes each feature's
        ``output_shape`` (required by SparseCore / `TPUEmbeddingV2`, and it pins shapes).
      initializer: Table initializer (TensorFlow's default when None).
      optimizer: Optional per-table optimizer.

    Returns:
      ``(tables, features)``: dicts of `TableConfig` by table name and `FeatureConfig` by
      feature name (the keys match ``features["ids"]`` of the built batches).
    """
    import tensorflow as tf

    if not isinstance(per_replica_batch_size, int) or per_replica_batch_size < 1:
        raise ConfigError(
            f"per_replica_batch_size: expected a positive int, got {per_replica_batch_size!r}"
        )
    emb = tf.tpu.experimental.embedding
    tables = {
        t.name: emb.TableConfig(
            vocabulary_size=t.vocabulary_size,
            dim=t.dim,
            initializer=initializer,
            optimizer=optimizer,
            combiner=t.combiner,
            name=t.name,
        )
        for t in schema.tables
    }
    features = {
        f.name: emb.FeatureConfig(
            table=tables[f.table],
            max_sequence_length=0,
            output_shape=[per_replica_batch_size],
            name=f.name,
        )
        for f in schema.categorical
    }
    return tables, features


def enqueue_weights(schema: Schema, features: dict[str, Any]) -> dict[str, Any]:
    """The ``weights`` argument matching ``features["ids"]``: multi-hot weights where
    the pipeline produced them, None for single ids.

    Raises:
      ConfigError: the multi-hot features are in the default ``dense`` format, which
        TPUEmbedding refuses with weights ("Weight specified for X, but input is
        dense"); build the pipeline with ``with_multi_hot_format("sparse")`` or
        ``"ragged"``.
    """
    import tensorflow as tf

    dense = [
        name
        for name in features["ids"]
        if isinstance(schema.feature(name), MultiHot)
        and isinstance(features["ids"][name], tf.Tensor)
    ]
    if dense:
        raise ConfigError(
            f"enqueue_weights: multi-hot feature(s) {dense} are dense [B, max_len] tensors; "
            "TPUEmbedding accepts weights only with sparse or ragged ids. Build the pipeline "
            'with .with_multi_hot_format("sparse") (or "ragged") for TPU enqueue'
        )
    return {
        name: features["weights"].get(name) if isinstance(schema.feature(name), MultiHot) else None
        for name in features["ids"]
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Placement:
    """Where one table should live.

    Attributes:
      table: Table name.
      rows: Vocabulary size.
      bytes: Size of the float32 table.
      decision: ``mirror`` (replicate on every core, e.g. a Keras `Embedding`) or
        ``shard`` (TPU embedding / SparseCore, sharded across cores).
      reason: One sentence why.
    """

    table: str
    rows: int
    bytes: int
    decision: str
    reason: str


def placement(
    schema: Schema,
    *,
    mirror_threshold: int = MIRROR_THRESHOLD,
    shard_threshold: int = SHARD_THRESHOLD,
) -> list[Placement]:
    """Suggest mirroring or sharding each table by its size."""
    out = []
    for t in schema.tables:
        size = t.vocabulary_size * t.dim * 4
        if t.vocabulary_size <= mirror_threshold:
            decision = "mirror"
            reason = f"<= {mirror_threshold:,} rows: cheaper to replicate than to shard"
        elif t.vocabulary_size >= shard_threshold:
            decision = "shard"
            reason = f">= {shard_threshold:,} rows: the TPU embedding path pays off"
        else:
            decision = "shard"
            reason = (
                f"between {mirror_threshold:,} and {shard_threshold:,} rows: either works; "
                "shard to save HBM, mirror if lookups dominate"
            )
        out.append(
            Placement(
                table=t.name, rows=t.vocabulary_size, bytes=size, decision=decision, reason=reason
            )
        )
    return out
