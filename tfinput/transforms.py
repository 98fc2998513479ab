"""Batch-level TensorFlow transforms: raw columns in, fixed-shape tensors out.

Every source produces a *raw batch*: a dict keyed by source column with

- dense columns as float32 ``[B]`` or ``[B, length]`` (missing values already filled),
- single categorical columns as int64 or string ``[B]``,
- list columns as `tf.RaggedTensor` ``[B, None]`` (ids, and weights if any),
- labels as ``[B]``.

`transform_batch` turns it into ``(features, labels)`` where ``features`` is::

    {"dense":   {name: float32 [B] or [B, length]},
     "ids":     {name: int32 [B] (categorical) or [B, max_len] (multi-hot)},
     "weights": {name: float32 [B, max_len]}}          # multi-hot only

Multi-hot ids are padded with id 0 and weight 0; nothing goes through
``tf.sparse.from_dense`` (which would drop real id 0). With ``multi_hot_format``
``"sparse"`` or ``"ragged"`` the multi-hot ids and weights are instead SparseTensor /
RaggedTensor int32 holding exactly the real (truncated) ids, for TPU host enqueue.

All checks are vectorized asserts whose messages name the feature and the value found.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfinput.schema import Categorical, Dense, MultiHot, Schema

__all__ = ["parse_spec", "transform_batch", "MULTI_HOT_FORMATS"]

MULTI_HOT_FORMATS = ("dense", "sparse", "ragged")
_TF_DTYPES = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}


def parse_spec(schema: Schema) -> dict[str, Any]:
    """The `tf.io.parse_example` spec for a schema's tf.train.Example keys."""
    spec: dict[str, Any] = {}
    for f in schema.features:
        if isinstance(f, Dense):
            shape = [] if f.length is None else [f.length]
            default = f.default if f.length is None else [f.default] * f.length
            if f.dtype == "int64":
                default = int(f.default) if f.length is None else [int(f.default)] * f.length
            spec[f.source] = tf.io.FixedLenFeature(shape, _TF_DTYPES[f.dtype], default)
        elif isinstance(f, Categorical):
            spec[f.source] = tf.io.FixedLenFeature([], _TF_DTYPES[f.dtype], f.default)
        elif isinstance(f, MultiHot):
            spec[f.source] = tf.io.RaggedFeature(_TF_DTYPES[f.dtype], row_splits_dtype=tf.int64)
            if f.weights:
                spec[f.weights] = tf.io.RaggedFeature(tf.float32, row_splits_dtype=tf.int64)
    for lab in schema.labels:
        spec[lab.source] = tf.io.FixedLenFeature([], _TF_DTYPES[lab.dtype], lab.default)
    return spec


def _checked(value: tf.Tensor, cond: tf.Tensor, message: list[Any]) -> tf.Tensor:
    """``value`` with a data dependency on ``Assert(cond, message)``."""
    with tf.control_dependencies([tf.debugging.Assert(cond, message, summarize=8)]):
        return tf.identity(value)


def _to_ids(values: tf.Tensor, feature: Categorical | MultiHot, vocab: int) -> tf.Tensor:
    """Map raw values (int64 or string, any shape) to int32 ids in ``[0, vocab)``."""
    name = feature.name
    if feature.dtype == "string":
        # FarmHash fingerprint modulo vocab: identical in training and serving graphs.
        ids = tf.strings.to_hash_bucket_fast(values, vocab)
    else:
        values = tf.cast(values, tf.int64)
        # On an empty tensor reduce_min/max give int64 max/min, which pass both checks.
        lo = tf.reduce_min(values)
        hi = tf.reduce_max(values)
        values = _checked(
            values,
            lo >= 0,
            [f"tfinput DataError: feature '{name}': negative id; expected ids in "
             f"[0, {vocab}). Smallest id found:", lo],
        )
        if feature.out_of_range == "error":
            values = _checked(
                values,
                hi < vocab,
                [f"tfinput DataError: feature '{name}': id out of range; expected ids in "
                 f"[0, {vocab}) (table '{feature.table}'), or set out_of_range='modulo'. "
                 "Largest id found:", hi],
            )
            ids = values
        else:
            ids = tf.math.floormod(values, vocab)
    # vocab <= 2**31 - 1 is enforced by Table, so the cast is exact.
    return tf.cast(ids, tf.int32)


def _dense(x: tf.Tensor, f: Dense) -> tf.Tensor:
    x = tf.cast(x, tf.float32)
    x = _checked(
        x,
        tf.reduce_all(tf.math.is_finite(x)),
        [f"tfinput DataError: feature '{f.name}': NaN or inf in a dense feature; "
         "expected finite numbers (write missing values as absent, not NaN)"],
    )
    if f.clip is not None:
        lo, hi = f.clip
        if lo is not None:
            x = tf.maximum(x, lo)
        if hi is not None:
            x = tf.minimum(x, hi)
    if f.log1p:
        x = _checked(
            x,
            tf.reduce_all(x > -1.0),
            [f"tfinput DataError: feature '{f.name}': log1p needs values > -1; set "
             "clip=[0, null] in the schema. Smallest value found:", tf.reduce_min(x)],
        )
        x = tf.math.log1p(x)
    return x


def _multi_hot(
    ids: tf.RaggedTensor,
    weights: tf.RaggedTensor | None,
    f: MultiHot,
    vocab: int,
    batch: int | None,
    fmt: str,
) -> tuple[Any, Any]:
    if weights is not None:
        same = tf.reduce_all(tf.equal(ids.row_lengths(), weights.row_lengths()))
        weights = weights.with_values(
            _checked(
                weights.values,
                same,
                [f"tfinput DataError: feature '{f.name}': weights column '{f.weights}' has "
                 "a different number of values than the ids in some row"],
            )
        )
        weights = weights[:, : f.max_len]
    ids = ids[:, : f.max_len]
    ids = ids.with_values(_to_ids(ids.values, f, vocab))
    if weights is None:
        weights = tf.ones_like(ids, dtype=tf.float32)
    if fmt == "ragged":
        return ids, weights
    if fmt == "sparse":
        rows = ids.nrows() if batch is None else batch
        dense_shape = tf.stack([tf.cast(rows, tf.int64), tf.constant(f.max_len, tf.int64)])
        sp_ids = ids.to_sparse()
        sp_w = weights.to_sparse()
        return (
            tf.SparseTensor(sp_ids.indices, sp_ids.values, dense_shape),
            tf.SparseTensor(sp_w.indices, sp_w.values, dense_shape),
        )
    shape = [batch, f.max_len]
    return ids.to_tensor(0, shape=shape), weights.to_tensor(0.0, shape=shape)


def transform_batch(
    raw: dict[str, Any],
    schema: Schema,
    *,
    batch_size: int | None,
    multi_hot_format: str = "dense",
) -> tuple[dict[str, dict[str, Any]], Any]:
    """Turn a raw batch into ``(features, labels)``; see the module docstring.

    Args:
      raw: Raw batch keyed by source column.
      schema: The schema.
      batch_size: Static batch size to stamp on every output (None if the last batch
        may be partial).
      multi_hot_format: ``dense``, ``sparse`` or ``ragged`` for multi-hot outputs.
    """
    tables = {t.name: t for t in schema.tables}
    dense: dict[str, Any] = {}
    ids: dict[str, Any] = {}
    weights: dict[str, Any] = {}
    for f in schema.features:
        if isinstance(f, Dense):
            dense[f.name] = _dense(raw[f.source], f)
        elif isinstance(f, Categorical):
            ids[f.name] = _to_ids(raw[f.source], f, tables[f.table].vocabulary_size)
        else:
            w = raw.get(f.weights) if f.weights else None
            ids[f.name], weights[f.name] = _multi_hot(
                raw[f.source], w, f, tables[f.table].vocabulary_size, batch_size,
                multi_hot_format,
            )
    features: dict[str, dict[str, Any]] = {"dense": dense, "ids": ids, "weights": weights}
    labels = {lab.name: tf.cast(raw[lab.source], tf.float32) for lab in schema.labels}
    if batch_size is not None:
        for group in (dense, ids, weights, labels):
            for key, value in group.items():
                if isinstance(value, tf.Tensor):
                    shape = [batch_size] + value.shape.as_list()[1:]
                    group[key] = tf.ensure_shape(value, shape)
    out_labels: Any = labels
    if len(schema.labels) == 1:
        out_labels = labels[schema.labels[0].name]
    return features, out_labels

