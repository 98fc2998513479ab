"""The TPU embedding input recipe, validated on CPU with `TPUEmbeddingForServing`.

    python examples/tpu_embedding.py

On a TPU, replace `TPUEmbeddingForServing` by `TPUEmbedding` under a `TPUStrategy`; the
pipeline, the configs and the enqueue arguments stay the same.
"""

from __future__ import annotations

import tempfile

import tensorflow as tf

import tfinput
from tfinput import testing, tpu


def main() -> None:
    schema = testing.criteo_like_schema(vocabulary_size=50_000, dim=16, n_string=2)
    per_replica = 256
    with tempfile.TemporaryDirectory() as d:
        files = testing.write_tfrecord(d, schema, rows=4_000, files=4)
        for p in tpu.placement(schema)[:3]:
            print(f"table {p.table}: {p.rows:,} rows -> {p.decision} ({p.reason})")
        _, feature_configs = tpu.embedding_configs(schema, per_replica_batch_size=per_replica)

        strategy = tf.distribute.get_strategy()  # TPUStrategy on a TPU
        pipeline = tfinput.tfrecord(files, schema).with_multi_hot_format("sparse")
        config = tfinput.PipelineConfig(batch_size=per_replica * strategy.num_replicas_in_sync)
        dist = strategy.distribute_datasets_from_function(
            lambda ctx: pipeline.build(config, ctx),
            options=tf.distribute.InputOptions(experimental_fetch_to_device=False),
        )
        embedding = tf.tpu.experimental.embedding.TPUEmbeddingForServing(
            feature_configs, tf.tpu.experimental.embedding.Adagrad(0.1)
        )
        embedding.build()
        for features, labels in dist:
            activations = embedding(features["ids"], weights=tpu.enqueue_weights(schema, features))
            shapes = {k: tuple(v.shape) for k, v in list(activations.items())[:4]}
            print("activations:", shapes, "labels:", tuple(labels.shape))
            break


if __name__ == "__main__":
    main()
