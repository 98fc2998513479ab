"""`tfinput.models.SparseTableAdam`: row-wise Adagrad on the rows a batch touches (by
scatters on TensorFlow, no op as large as the table), Adam on the dense weights."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfinput import models

ROWS, DIM = 50, 4


def _table(name="embeddings"):
    rng = np.random.default_rng(0)
    return keras.Variable(rng.normal(size=(ROWS, DIM)).astype(np.float32), name=name)


def _reference(table, ids, values, lr, *, summed, eps=1e-8):
    """Row-wise Adagrad in numpy. ``summed``: a row's slices added first (a dense
    gradient, JAX's); otherwise each slice adds to the accumulator and moves the row
    (TensorFlow's ``IndexedSlices``, an id met k times giving k slices)."""
    if summed:
        g = np.zeros_like(table)
        np.add.at(g, ids, values)
        ids, values = np.unique(ids), g[np.unique(ids)]
    acc = np.zeros((ROWS, 1), np.float32)
    np.add.at(acc, ids, np.mean(values**2, axis=1, keepdims=True))
    out = table.copy()
    np.add.at(out, ids, -lr * values / (np.sqrt(acc[ids]) + eps))
    return out, acc


@pytest.mark.parametrize("gradient", ["indexed_slices", "dense"])
def test_touched_rows_move_by_row_wise_adagrad_and_the_others_stay(gradient):
    """The sparse gradient (TensorFlow's gather) and the dense one (JAX's) give the
    numpy reference; untouched rows and accumulators unchanged."""
    ids = np.array([3, 7, 3, 40], np.int64)
    values = np.arange(16, dtype=np.float32).reshape(4, DIM) / 10 - 0.5
    v = _table()
    before = v.numpy().copy()
    opt = models.SparseTableAdam(learning_rate=0.1)
    g = tf.IndexedSlices(tf.constant(values), tf.constant(ids), tf.constant([ROWS, DIM]))
    if gradient == "dense":
        g = tf.convert_to_tensor(g)
    opt.apply([g], [v])
    want, acc = _reference(before, ids, values, 0.1, summed=gradient == "dense")
    np.testing.assert_allclose(v.numpy(), want, rtol=1e-5, atol=1e-6)
    (accumulator,) = [a for a in opt.variables if a.shape == (ROWS, 1)]
    np.testing.assert_allclose(accumulator.numpy(), acc, rtol=1e-5)
    untouched = np.setdiff1d(np.arange(ROWS), ids)
    np.testing.assert_array_equal(v.numpy()[untouched], before[untouched])
    assert not np.array_equal(v.numpy()[ids], before[ids])


def _ops_as_large_as_the_table(opt, rows=100_000):
    """The ops of one traced ``apply`` whose output has the table's shape."""
    v = keras.Variable(np.zeros((rows, DIM), np.float32), name="embeddings")
    ids = tf.constant([1, 5, 5, 99_999], tf.int64)
    g = tf.IndexedSlices(tf.ones((4, DIM)), ids, tf.constant([rows, DIM]))
    opt.build([v])
    graph = tf.function(lambda: opt.apply([g], [v])).get_concrete_function().graph
    big = [
        op.type
        for op in graph.get_operations()
        for out in op.outputs
        if out.shape.rank == 2 and out.shape[0] == rows and out.shape[1] == DIM
    ]
    return big, {op.type for op in graph.get_operations()}


def test_a_table_update_on_tensorflow_touches_only_the_batchs_rows():
    """No op of the update is as large as the table (Keras's Adam has several: its
    slots are updated in full), and the rows are written with scatters."""
    big, types = _ops_as_large_as_the_table(models.SparseTableAdam())
    assert big == []
    assert {"ResourceScatterSub", "ResourceScatterAdd"} <= types
    adam_big, _ = _ops_as_large_as_the_table(keras.optimizers.Adam())
    assert len(adam_big) > 3, adam_big


def test_dense_weights_take_adam_and_tables_one_accumulator_per_row():
    table, kernel = _table(), keras.Variable(np.ones((3, 2), np.float32), name="kernel")
    opt = models.SparseTableAdam(learning_rate=0.01)
    opt.build([table, kernel])
    shapes = sorted(tuple(v.shape) for v in opt.variables if len(v.shape) == 2)
    assert shapes == [(3, 2), (3, 2), (ROWS, 1)]  # Adam's two slots; the row accumulator
    adam = keras.optimizers.Adam(learning_rate=0.01)
    twin = keras.Variable(np.ones((3, 2), np.float32), name="kernel")
    grad = tf.constant(np.full((3, 2), 0.5, np.float32))
    for _ in range(3):
        opt.apply([tf.zeros((ROWS, DIM)), grad], [table, kernel])
        adam.apply([grad], [twin])
    np.testing.assert_allclose(kernel.numpy(), twin.numpy(), rtol=1e-6)


@pytest.mark.parametrize("gradient", ["indexed_slices", "dense"])
def test_a_table_learning_rate_moves_the_rows_and_leaves_adam_its_own(gradient):
    """``table_learning_rate`` is the row-wise rule's rate (either gradient); the dense
    weights keep Adam at ``learning_rate``."""
    ids = np.array([3, 7, 3], np.int64)
    values = np.arange(12, dtype=np.float32).reshape(3, DIM) / 10 - 0.5
    table, kernel = _table(), keras.Variable(np.ones((3, 2), np.float32), name="kernel")
    before = table.numpy().copy()
    opt = models.SparseTableAdam(learning_rate=0.01, table_learning_rate=0.3)
    g = tf.IndexedSlices(tf.constant(values), tf.constant(ids), tf.constant([ROWS, DIM]))
    grad = tf.constant(np.full((3, 2), 0.5, np.float32))
    opt.apply(
        [g if gradient == "indexed_slices" else tf.convert_to_tensor(g), grad], [table, kernel]
    )
    want, _ = _reference(before, ids, values, 0.3, summed=gradient == "dense")
    np.testing.assert_allclose(table.numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kernel.numpy(), 1 - 0.01, rtol=1e-4)  # Adam's first step: lr


def test_the_ranking_model_compiles_with_it_and_round_trips_its_config():
    opt = models.SparseTableAdam(
        learning_rate=0.02, table_learning_rate=0.1, table_epsilon=1e-6, table_variable_name="t"
    )
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
    assert type(restored) is models.SparseTableAdam
    assert (restored.table_epsilon, restored.table_variable_name) == (1e-6, "t")
    assert restored.table_learning_rate == 0.1
    assert float(restored.learning_rate) == pytest.approx(0.02)
    assert restored.is_table(keras.Variable(np.zeros((2, 2)), name="t"))
    assert not restored.is_table(keras.Variable(np.zeros((2, 2)), name="kernel"))
