"""Multi-host input, simulated: 4 input pipelines in one process, as
``strategy.distribute_datasets_from_function`` makes one per host on a pod slice. File
shards are disjoint and cover every file (TFRecord, Parquet, columnar); with fewer files
than pipelines every pipeline falls back to data sharding, with a warning, and the
examples are still split exactly."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import collect
from tfinput._src.core.sources.protocol import plan_shards
from tfinput.config import AUTOTUNE, PipelineConfig

HOSTS = 4
KINDS = ["tfrecord", "parquet", "columnar"]


def _contexts(n: int = HOSTS) -> list[tf.distribute.InputContext]:
    return [
        tf.distribute.InputContext(
            num_input_pipelines=n, input_pipeline_id=i, num_replicas_in_sync=n
        )
        for i in range(n)
    ]


def _config(**kw) -> PipelineConfig:
    # Parallel, non-deterministic reads and a record shuffle: the hard case.
    return PipelineConfig(
        batch_size=64,
        drop_remainder=False,
        interleave_cycle_length=2,
        interleave_parallelism=2,
        map_parallelism=AUTOTUNE,
        deterministic=False,
        shuffle_buffer=64,
        **kw,
    )


def _rows(pipeline, config, ctx) -> np.ndarray:
    return collect(pipeline.build(config, ctx))["dense"]["row_id"].astype(int)


@pytest.mark.parametrize("kind", KINDS)
def test_four_hosts_read_disjoint_whole_files_that_cover_every_file(kind, pipeline_of):
    pipeline = pipeline_of(kind).with_file_shuffling()
    files = pipeline.source.files()
    assert len(files) == HOSTS
    shards = [plan_shards(files, ctx, kind) for ctx in _contexts()]
    assert all(data is None for _, data in shards), "enough files: whole-file sharding"
    got = [f for part, _ in shards for f in part]
    assert sorted(got) == sorted(files) and len(set(got)) == len(files)

    rows = [_rows(pipeline, _config(shuffle_seed=5), ctx) for ctx in _contexts()]
    every = np.concatenate(rows)
    assert sorted(every.tolist()) == list(range(1000)), "each example on exactly one host"
    assert all(len(r) for r in rows)


@pytest.mark.parametrize("kind", KINDS)
def test_fewer_files_than_hosts_fall_back_to_data_sharding(kind, pipeline_of, caplog):
    full = pipeline_of(kind)
    files = full.source.files()[:2]
    make = {"tfrecord": tfinput.tfrecord, "parquet": tfinput.parquet}.get(kind, tfinput.columnar)
    pipeline = make(files, full.schema).with_file_shuffling()  # no seed: fixed for all hosts
    per_file = 300 if kind == "columnar" else 250  # the shared files' rows, in order
    expected = list(range(2 * per_file))

    with caplog.at_level(logging.WARNING, logger="tfinput"):
        rows = [_rows(pipeline, _config(), ctx) for ctx in _contexts()]
    assert "falling back to data sharding" in caplog.text
    assert f"{HOSTS} input pipelines but only 2" in caplog.text
    every = np.concatenate(rows)
    assert sorted(every.tolist()) == expected, "each example of the 2 files on one host"
    assert all(len(r) for r in rows), "every host gets examples"
