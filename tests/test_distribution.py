"""`build` inside `strategy.distribute_datasets_from_function`, the TPU input recipe."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tfinput.config import PipelineConfig


def test_distribute_datasets_from_function_with_per_replica_batches(small_tfrecord, small_schema):
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(devices) < 2:
        pytest.skip("needs several logical CPU devices (set up in conftest)")
    strategy = tf.distribute.MirroredStrategy(devices)
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema).with_multi_hot_format("sparse")
    global_batch = 32 * strategy.num_replicas_in_sync
    contexts = []

    def dataset_fn(ctx):
        contexts.append(ctx)
        return pipeline.build(PipelineConfig(batch_size=global_batch), ctx)

    # The TPU recipe: keep the ids on the host for the embedding enqueue.
    dist = strategy.distribute_datasets_from_function(
        dataset_fn, options=tf.distribute.InputOptions(experimental_fetch_to_device=False)
    )
    rows = []
    for features, _ in dist:
        for replica_features in strategy.experimental_local_results(features):
            assert replica_features["dense"]["row_id"].shape == (32,)
            ids = replica_features["ids"]["history"]
            assert isinstance(ids, tf.SparseTensor) and ids.shape.as_list() == [32, 5]
            assert "CPU:0" in ids.values.device  # stayed on the host
            rows.append(replica_features["dense"]["row_id"].numpy())
    assert contexts and contexts[0].get_per_replica_batch_size(global_batch) == 32
    rows = np.concatenate(rows).astype(int)
    assert len(set(rows.tolist())) == len(rows)
    assert len(rows) >= 1000 - global_batch


def test_too_few_files_for_the_input_pipelines_shard_the_data(small_tfrecord, small_schema, caplog):
    """Fewer files than input pipelines: data sharding with a warning (the exact split is
    tested in tests/test_multi_host.py)."""
    pipeline = tfinput.tfrecord(small_tfrecord[:2], small_schema)
    ctx = tf.distribute.InputContext(
        num_input_pipelines=3, input_pipeline_id=0, num_replicas_in_sync=3
    )
    with caplog.at_level("WARNING", logger="tfinput"):
        ds = pipeline.build(PipelineConfig(batch_size=96), ctx)
    assert "3 input pipelines but only 2" in caplog.text
    assert next(iter(ds))[0]["dense"]["row_id"].shape == [32]
