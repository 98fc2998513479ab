"""TPU embedding glue: configs from the schema, placement, and batches accepted by
`TPUEmbeddingForServing` (the CPU implementation of the TPU embedding API)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tfinput import tpu
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError
from tfinput.schema import Categorical, Schema, Table


def test_configs_share_tables_and_pin_output_shape(small_schema):
    tables, features = tpu.embedding_configs(small_schema, per_replica_batch_size=64)
    assert set(tables) == {"items", "user", "tokens"}
    assert features["history"].table is features["last_item"].table is tables["items"]
    assert features["country"].table is features["tags"].table is tables["tokens"]
    for f in features.values():
        assert list(f.output_shape) == [64] and f.max_sequence_length == 0
    assert tables["tokens"].combiner == "sqrtn" and tables["items"].dim == 8
    assert tables["user"].vocabulary_size == 500


def test_bad_batch_size():
    schema = Schema(
        features=(Categorical(name="c", table="t"),),
        tables=(Table(name="t", vocabulary_size=3, dim=2),),
    )
    with pytest.raises(ConfigError, match="per_replica_batch_size"):
        tpu.embedding_configs(schema, per_replica_batch_size=0)


def test_placement_by_size():
    schema = Schema(
        features=tuple(Categorical(name=n, table=n) for n in ("s", "m", "l")),
        tables=(
            Table(name="s", vocabulary_size=5_000, dim=8),
            Table(name="m", vocabulary_size=50_000, dim=8),
            Table(name="l", vocabulary_size=5_000_000, dim=32),
        ),
    )
    got = {p.table: p for p in tpu.placement(schema)}
    assert got["s"].decision == "mirror" and got["l"].decision == "shard"
    assert got["m"].decision == "shard" and "either" in got["m"].reason
    assert got["l"].bytes == 5_000_000 * 32 * 4


@pytest.mark.parametrize("fmt", ["sparse", "ragged"])
def test_batches_are_accepted_by_tpu_embedding_for_serving(small_tfrecord, small_schema, fmt):
    batch = 50
    _, features_cfg = tpu.embedding_configs(small_schema, per_replica_batch_size=batch)
    embedding = tf.tpu.experimental.embedding.TPUEmbeddingForServing(
        features_cfg, tf.tpu.experimental.embedding.SGD(0.1)
    )
    embedding.build()
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema).with_multi_hot_format(fmt)
    features, _ = next(iter(pipeline.build(PipelineConfig(batch_size=batch))))
    out = embedding(features["ids"], weights=tpu.enqueue_weights(small_schema, features))
    for name, cfg in features_cfg.items():
        assert out[name].shape == (batch, cfg.table.dim), name
    # The combined multi-hot activation equals a manual weighted mean over real ids.
    dense_features, _ = next(
        iter(tfinput.tfrecord(small_tfrecord, small_schema).build(PipelineConfig(batch_size=batch)))
    )
    table = embedding.embedding_tables[features_cfg["history"].table].numpy()
    ids = dense_features["ids"]["history"].numpy()
    w = dense_features["weights"]["history"].numpy()
    rows = (table[ids] * w[..., None]).sum(1) / np.maximum(w.sum(1, keepdims=True), 1e-12)
    np.testing.assert_allclose(out["history"].numpy(), rows, rtol=1e-5, atol=1e-6)


def test_enqueue_weights_refuses_the_dense_multi_hot_format(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    features, _ = next(iter(pipeline.build(PipelineConfig(batch_size=8))))
    with pytest.raises(ConfigError) as e:
        tpu.enqueue_weights(small_schema, features)
    msg = str(e.value)
    assert "'history'" in msg and 'with_multi_hot_format("sparse")' in msg and "ragged" in msg
