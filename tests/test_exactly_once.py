"""Nothing lost, nothing doubled: every example exactly once per epoch, by count and by
content, for every source, with 1 and 3 input pipelines, deterministic and not."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import assert_each_row_once, collect, wrapped_dataset
from tfinput.config import AUTOTUNE, PipelineConfig


def make(kind, schema, cols, tfrecord_files, parquet_files):
    if kind in ("tfrecord", "tfrecord-read-batch"):
        return tfinput.tfrecord(tfrecord_files, schema)
    if kind == "parquet":
        return tfinput.parquet(parquet_files, schema)
    return tfinput.wrap(lambda: wrapped_dataset(cols), schema)


@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "nondeterministic"])
@pytest.mark.parametrize("pipelines", [1, 3], ids=["1-pipeline", "3-pipelines"])
@pytest.mark.parametrize("kind", ["tfrecord", "tfrecord-read-batch", "parquet", "wrapped"])
def test_every_example_exactly_once(
    kind, pipelines, deterministic, small_schema, small_columns, small_tfrecord, small_parquet
):
    pipeline = make(kind, small_schema, small_columns, small_tfrecord, small_parquet)
    config = PipelineConfig(
        batch_size=96,
        drop_remainder=False,
        interleave_cycle_length=2,
        interleave_parallelism=2,
        map_parallelism=AUTOTUNE,
        deterministic=deterministic,
        shuffle_buffer=128,
        shuffle_seed=3,
        read_batch=24 if kind == "tfrecord-read-batch" else 0,
    )
    pipeline = pipeline.with_file_shuffling()
    parts = []
    for i in range(pipelines):
        ctx = tf.distribute.InputContext(
            num_input_pipelines=pipelines, input_pipeline_id=i, num_replicas_in_sync=pipelines
        )
        got = collect(pipeline.build(config, input_context=ctx if pipelines > 1 else None))
        # each pipeline batches the per-replica batch size
        parts.append(got)
    assert_each_row_once(parts, small_columns, small_schema)


@pytest.mark.parametrize("kind", ["tfrecord", "parquet"])
def test_two_epochs_deliver_each_example_twice(
    kind, small_schema, small_columns, small_tfrecord, small_parquet
):
    pipeline = make(kind, small_schema, small_columns, small_tfrecord, small_parquet)
    ds = (
        pipeline.with_file_shuffling()
        .build(PipelineConfig(batch_size=100, shuffle_buffer=64, shuffle_seed=1, cache=True))
        .repeat(2)
    )
    rows = collect(ds)["dense"]["row_id"].astype(int)
    assert np.bincount(rows, minlength=1000).tolist() == [2] * 1000


def test_drop_remainder_drops_at_most_one_partial_batch_per_pipeline(small_schema, small_tfrecord):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    seen = []
    for i in range(3):
        ctx = tf.distribute.InputContext(
            num_input_pipelines=3, input_pipeline_id=i, num_replicas_in_sync=3
        )
        seen.append(collect(pipeline.build(PipelineConfig(batch_size=96), ctx))["dense"]["row_id"])
    rows = np.concatenate(seen).astype(int)
    assert len(set(rows.tolist())) == len(rows), "no duplicates"
    assert 1000 - len(rows) < 3 * 32, "only the per-pipeline remainders are dropped"
