"""Fixed-shape output of the three sources: shapes, values, padding, formats."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import by_row_id, collect, expected_rows
from tfinput import testing
from tfinput.config import PipelineConfig


def wrapped_dataset(cols, schema):
    data = {}
    for col, v in cols.values.items():
        if col in cols.lengths:
            data[col] = tf.RaggedTensor.from_row_lengths(v, cols.lengths[col])
        else:
            data[col] = v
    return tf.data.Dataset.from_tensor_slices(data)


@pytest.fixture(params=["tfrecord", "parquet", "wrapped"])
def pipeline(request, small_schema, small_columns, small_tfrecord, small_parquet):
    if request.param == "tfrecord":
        return tfinput.tfrecord(small_tfrecord, small_schema)
    if request.param == "parquet":
        return tfinput.parquet(small_parquet, small_schema)
    return tfinput.wrap(lambda: wrapped_dataset(small_columns, small_schema), small_schema)


def test_every_tensor_has_a_static_shape(pipeline, small_schema):
    ds = pipeline.build(PipelineConfig(batch_size=64))
    features, labels = ds.element_spec
    assert labels.shape == (64,)
    for group, specs in features.items():
        for name, spec in specs.items():
            assert spec.shape.is_fully_defined(), (group, name, spec)
            assert spec.shape[0] == 64
    assert features["ids"]["history"].shape == (64, 5)
    assert features["ids"]["history"].dtype == tf.int32
    assert features["weights"]["history"].dtype == tf.float32
    assert features["dense"]["embedding"].shape == (64, 3)


def test_values_match_independent_computation(pipeline, small_schema, small_columns):
    got = by_row_id(collect(pipeline.build(PipelineConfig(batch_size=100))))
    want = expected_rows(small_columns, small_schema)
    assert len(got["dense"]["row_id"]) == 1000
    for group in ("dense", "ids", "weights"):
        for name, expected in want[group].items():
            np.testing.assert_allclose(got[group][name], expected, rtol=1e-6, err_msg=name)
    np.testing.assert_array_equal(got["labels"]["label"], small_columns.values["label"])


def test_id_zero_survives_and_empty_lists_are_all_padding(pipeline, small_columns):
    got = by_row_id(collect(pipeline.build(PipelineConfig(batch_size=100))))
    lengths = small_columns.lengths["history"]
    ids, w = got["ids"]["history"], got["weights"]["history"]
    empty = lengths == 0
    assert empty.any(), "test data must contain empty lists"
    assert (ids[empty] == 0).all() and (w[empty] == 0).all()
    # A real id 0 keeps a positive weight, unlike padding.
    offsets = small_columns.offsets("history")
    real_zero = [
        (r, k)
        for r in range(1000)
        for k in range(min(lengths[r], 5))
        if small_columns.values["history"][offsets[r] + k] == 0
    ]
    assert real_zero, "test data must contain id 0"
    for r, k in real_zero:
        assert ids[r, k] == 0 and w[r, k] > 0
    # Weights are 0 exactly on padding.
    n = np.minimum(lengths, 5)
    assert ((w > 0).sum(axis=1) == n).all()


def test_lists_longer_than_max_len_are_truncated_to_their_first_ids(small_columns, pipeline):
    got = by_row_id(collect(pipeline.build(PipelineConfig(batch_size=100))))
    lengths = small_columns.lengths["history"]
    offsets = small_columns.offsets("history")
    r = int(np.flatnonzero(lengths > 5)[0])
    first = small_columns.values["history"][offsets[r] : offsets[r] + 5]
    np.testing.assert_array_equal(got["ids"]["history"][r], first)


def test_string_ids_use_tensorflow_hashing(pipeline, small_columns):
    got = by_row_id(collect(pipeline.build(PipelineConfig(batch_size=100))))
    serving = tf.strings.to_hash_bucket_fast(small_columns.values["country"].astype(bytes), 2048)
    np.testing.assert_array_equal(got["ids"]["country"], serving.numpy())
    assert got["ids"]["country"].max() < 2048 and got["ids"]["country"].min() >= 0


@pytest.mark.parametrize("fmt", ["sparse", "ragged"])
def test_sparse_and_ragged_formats_hold_the_same_ids(pipeline, small_schema, fmt):
    config = PipelineConfig(batch_size=50)
    dense = next(iter(pipeline.build(config)))[0]
    other = next(iter(pipeline.with_multi_hot_format(fmt).build(config)))[0]
    for name in ("history", "tags"):
        ids, w = other["ids"][name], other["weights"][name]
        if fmt == "sparse":
            assert isinstance(ids, tf.SparseTensor)
            assert ids.shape.as_list() == [50, small_schema.feature(name).max_len]
            ids_d = tf.sparse.to_dense(ids).numpy()
            w_d = tf.sparse.to_dense(w).numpy()
            # explicit entries are exactly the real ids, id 0 included
            assert ids.values.shape[0] == int((dense["weights"][name].numpy() > 0).sum())
        else:
            assert isinstance(ids, tf.RaggedTensor)
            ids_d = ids.to_tensor(shape=[50, small_schema.feature(name).max_len]).numpy()
            w_d = w.to_tensor(shape=[50, small_schema.feature(name).max_len]).numpy()
        np.testing.assert_array_equal(ids_d, dense["ids"][name].numpy())
        np.testing.assert_allclose(w_d, dense["weights"][name].numpy())


def test_parsing_is_vectorized_batch_then_parse(small_tfrecord, small_schema):
    ds = tfinput.tfrecord(small_tfrecord, small_schema).build(PipelineConfig(batch_size=32))
    graph = ds._graph_def() if hasattr(ds, "_graph_def") else None
    if graph is None:
        graph = tf.compat.v1.GraphDef.FromString(ds._as_serialized_graph().numpy())
    ops = [n.op for n in graph.node]
    assert "BatchDatasetV2" in ops and "ParallelMapDatasetV2" in ops
    fn_ops = {n.op for f in graph.library.function for n in f.node_def}
    assert "ParseExampleV2" in fn_ops and "ParseSingleExample" not in fn_ops
    # the map runs after the batch: batch's output feeds the map
    names = {n.name: n for n in graph.node}
    map_node = next(n for n in graph.node if n.op == "ParallelMapDatasetV2")
    assert names[map_node.input[0].split(":")[0]].op == "BatchDatasetV2"


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"], ids=["gzip", "zlib"])
def test_compressed_tfrecord(tmp_path, small_schema, compression):
    files = testing.write_tfrecord(
        tmp_path, small_schema, rows=200, files=2, compression=compression
    )
    for comp in ("auto", compression):
        got = collect(
            tfinput.tfrecord(files, small_schema, compression=comp).build(
                PipelineConfig(batch_size=50)
            )
        )
        assert sorted(got["dense"]["row_id"].tolist()) == list(range(200))


def test_globs_lists_and_directories(small_tfrecord, small_schema):
    import os

    d = os.path.dirname(small_tfrecord[0])
    for paths in (small_tfrecord, os.path.join(d, "part-*"), d, [small_tfrecord[0], d]):
        got = collect(tfinput.tfrecord(paths, small_schema).build(PipelineConfig(batch_size=100)))
        assert len(got["dense"]["row_id"]) == 1000


def test_same_definition_builds_with_any_config(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    configs = [
        PipelineConfig.naive(batch_size=100),
        PipelineConfig.heuristic(batch_size=100, cpu_count=2),
        PipelineConfig.autotune(batch_size=100),
        PipelineConfig(
            batch_size=100,
            interleave_cycle_length=2,
            interleave_block_length=8,
            interleave_parallelism=2,
            map_parallelism=3,
            prefetch=4,
            shuffle_buffer=256,
            shuffle_seed=1,
            private_threadpool_size=2,
            max_intra_op_parallelism=1,
            deterministic=False,
            cache=True,
            autotune_ram_budget=2**28,
        ),
    ]
    for config in configs:
        got = collect(pipeline.build(config))
        assert sorted(got["dense"]["row_id"].tolist()) == list(range(1000)), config


def test_drop_remainder_false_keeps_the_tail(small_tfrecord, small_schema):
    ds = tfinput.tfrecord(small_tfrecord, small_schema).build(
        PipelineConfig(batch_size=300, drop_remainder=False)
    )
    sizes = [int(f["dense"]["row_id"].shape[0]) for f, _ in ds]
    assert sum(sizes) == 1000 and sizes.count(300) == 3


def test_keras_fit_accepts_batches(small_tfrecord):
    from tfinput import models

    schema = testing.small_schema(row_id=False)
    ds = tfinput.tfrecord(small_tfrecord, schema).build(PipelineConfig(batch_size=100))
    model = models.ranking_model(schema)
    history = model.fit(ds, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_large_padded_multi_hot_batch_warns_at_build(tmp_path, caplog):
    import logging

    from tfinput.schema import Label, MultiHot, Schema, Table

    schema = Schema(
        features=(MultiHot(name="m", table="t", max_len=65_536),),
        tables=(Table(name="t", vocabulary_size=10, dim=2),),
        labels=(Label(name="y"),),
    )
    ds = tf.data.Dataset.from_tensor_slices({"m": np.ones((4, 1), np.int64), "y": [0.0] * 4})
    with caplog.at_level(logging.WARNING, logger="tfinput"):
        tfinput.wrap(ds, schema).build(PipelineConfig(batch_size=1024))
    assert "'m'" in caplog.text and "max_len 65536" in caplog.text and "MiB" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tfinput"):
        tfinput.wrap(ds, schema).with_multi_hot_format("ragged").build(
            PipelineConfig(batch_size=1024)
        )
    assert "max_len" not in caplog.text


def test_with_layout_returns_a_new_pipeline_described_with_its_layout(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    packed = pipeline.with_layout("packed")
    assert pipeline.layout == "per_feature" and packed.layout == "packed"
    assert pipeline.describe()["layout"] == "per_feature"
    assert packed.describe()["layout"] == "packed"
    assert packed.packed_layout().n_ids == 12
    with pytest.raises(tfinput.ConfigError, match="layout: expected one of"):
        tfinput.Pipeline(source=pipeline.source, schema=small_schema, layout="wide")
