"""`tfinput.graph`: native-only datasets pass, Python callbacks are found and named."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tfinput import graph
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError


@pytest.mark.parametrize(
    "kind", ["columnar", "columnar-rebatch-shuffled", "tfrecord"], ids=lambda k: k
)
def test_native_pipelines_have_no_python_ops(kind, small_schema, small_tfrecord, small_columnar):
    if kind == "tfrecord":
        ds = tfinput.tfrecord(small_tfrecord, small_schema).build(PipelineConfig(batch_size=200))
    elif kind == "columnar":
        ds = tfinput.columnar(small_columnar).build(PipelineConfig(batch_size=200))
    else:
        pipeline = tfinput.columnar(small_columnar, shuffle_rows=True).with_file_shuffling()
        ds = pipeline.build(PipelineConfig(batch_size=64, shuffle_buffer=300, cache=True))
    assert graph.find_python_ops(ds) == []
    assert graph.is_native(ds)
    graph.assert_native(ds)


def test_parquet_pipeline_is_reported_as_not_native(small_schema, small_parquet):
    ds = tfinput.parquet(small_parquet, small_schema).build(PipelineConfig(batch_size=200))
    ops = graph.find_python_ops(ds)
    assert any(op.startswith("PyFuncStateless in function") and "MapDataset" in op for op in ops)
    with pytest.raises(ConfigError, match=r"parquet input is not native-only: \d+ op\(s\)"):
        graph.assert_native(ds, what="parquet input")


def _double(x):
    return x * 2


@pytest.mark.parametrize(
    ("make", "op"),
    [
        (lambda ds: ds.map(lambda x: tf.py_function(_double, [x], tf.int64)), "EagerPyFunc"),
        (lambda ds: ds.map(lambda x: tf.numpy_function(_double, [x], tf.int64)), "PyFunc"),
        (
            lambda ds: ds.map(lambda x: tf.numpy_function(_double, [x], tf.int64, stateful=False)),
            "PyFuncStateless",
        ),
        (  # buried two functions deep: interleave -> map -> py_function
            lambda ds: ds.interleave(
                lambda x: tf.data.Dataset.from_tensors(x).map(
                    lambda y: tf.py_function(_double, [y], tf.int64)
                )
            ),
            "EagerPyFunc",
        ),
    ],
    ids=["py_function", "numpy_function", "numpy_function-stateless", "nested"],
)
def test_python_callbacks_are_found_with_their_owner(make, op):
    ds = make(tf.data.Dataset.range(4))
    ops = graph.find_python_ops(ds)
    assert len(ops) == 1 and ops[0].startswith(f"{op} in function")
    assert "used by" in ops[0] and ("MapDataset" in ops[0] or "InterleaveDataset" in ops[0])
    # the check does not change the dataset
    assert list(ds.as_numpy_iterator()) == [0, 2, 4, 6]


def test_from_generator_is_found():
    ds = tf.data.Dataset.from_generator(
        lambda: iter(np.arange(3)), output_signature=tf.TensorSpec([], tf.int64)
    )
    ops = graph.find_python_ops(ds)
    assert any(o.startswith("GeneratorDataset") for o in ops)
