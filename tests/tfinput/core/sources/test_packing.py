"""The Parquet batch crosses into TensorFlow as a few arrays: every column comes back
exactly, with its dtype and static shape, for every kind of column and for no rows."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfinput._src.core.sources._packing import Packing

SIGNATURE = {
    "price": tf.TensorSpec([None], tf.float32),
    "clicked": tf.TensorSpec([None], tf.float32),
    "user": tf.TensorSpec([None], tf.int64),
    "country": tf.TensorSpec([None], tf.string),
    "embedding": tf.TensorSpec([None, 3], tf.float32),
    "items/values": tf.TensorSpec([None], tf.int64),
    "items/lengths": tf.TensorSpec([None], tf.int64),
    "tags/values": tf.TensorSpec([None], tf.int64),
    "tags/lengths": tf.TensorSpec([None], tf.int64),
    "scores/values": tf.TensorSpec([None], tf.float32),
    "scores/lengths": tf.TensorSpec([None], tf.int64),
}


def _batch(rows: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(rows)
    items = rng.integers(0, 4, rows)
    tags = rng.integers(0, 3, rows)
    return {
        "price": rng.random(rows, np.float32),
        "clicked": rng.random(rows, np.float32),
        "user": rng.integers(0, 1 << 40, rows),
        "country": np.array([f"c{i}".encode() for i in range(rows)], object),
        "embedding": rng.random((rows, 3), np.float32),
        "items/values": rng.integers(0, 100, int(items.sum())),
        "items/lengths": items.astype(np.int64),
        "tags/values": rng.integers(0, 100, int(tags.sum())),
        "tags/lengths": tags.astype(np.int64),
        "scores/values": rng.random(int(tags.sum()), np.float32),
        "scores/lengths": tags.astype(np.int64),
    }


def test_every_column_crosses_exactly_in_few_arrays():
    packing = Packing(SIGNATURE, min_group=2)
    batch = _batch(7)
    arrays = packing.pack(batch)
    # float32 rows, int64 rows (ids and lengths), int64 list values + sizes; the rest alone
    assert len(arrays) == 7 < len(SIGNATURE)
    assert [tf.as_dtype(a.dtype) if a.dtype != object else tf.string for a in arrays] == (
        packing.dtypes
    )
    out = packing.unpack([tf.constant(a) for a in arrays])
    assert list(out) == list(SIGNATURE)
    for key, spec in SIGNATURE.items():
        assert spec.is_compatible_with(out[key]), (key, out[key])
        np.testing.assert_array_equal(out[key].numpy(), batch[key])


def test_in_a_graph_every_column_has_its_static_shape():
    packing = Packing(SIGNATURE, min_group=2)
    specs = [tf.TensorSpec(None, d) for d in packing.dtypes]
    out = tf.function(packing.unpack).get_concrete_function(specs).structured_outputs
    assert {k: v.shape.as_list() for k, v in out.items()} == {
        k: s.shape.as_list() for k, s in SIGNATURE.items()
    }


def test_no_rows_cross_as_empty_columns():
    packing = Packing(SIGNATURE, min_group=2)
    out = packing.unpack([tf.constant(a) for a in packing.empty()])
    for key, spec in SIGNATURE.items():
        assert out[key].shape[0] == 0 and out[key].dtype == spec.dtype
    assert out["embedding"].shape.as_list() == [0, 3]


def test_a_narrow_schema_crosses_one_array_per_column():
    """Below `PACK_MIN` columns of a kind nothing is stacked: the batch crosses as the
    reader's arrays, with no copy."""
    packing = Packing(SIGNATURE)
    batch = _batch(5)
    arrays = packing.pack(batch)
    assert len(arrays) == len(SIGNATURE)
    assert all(any(a is b for b in batch.values()) for a in arrays)
    out = packing.unpack([tf.constant(a) for a in arrays])
    for key in SIGNATURE:
        np.testing.assert_array_equal(out[key].numpy(), batch[key])
