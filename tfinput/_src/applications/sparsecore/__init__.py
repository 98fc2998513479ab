"""SparseCore: the buffer limits measured from the data, and batches preprocessed for it.

The package's modules: `stacks` (which tables share a stack, counting ids per
partition), `results` (what `sparsecore_stats` reports), this module (`sparsecore_stats`,
the scan over the data), `plan` (`SparseCorePlan`: what a feed computes per batch),
`workers` (the feed's workers and what they measure) and `feed` (`sparsecore_feed`,
`sparsecore_step`: jax-tpu-embedding's preprocessing off the training thread).
`tfinput.sparsecore` is the public API.

A TPU SparseCore looks up a table's ids from static buffers whose sizes are fixed at
compile time: ``max_ids_per_partition`` and ``max_unique_ids_per_partition`` per table
(keras-rs `TableConfig`, TensorFlow `SparseCoreEmbeddingConfig`). A batch that needs more
fails, or has ids dropped; an oversized limit wastes SparseCore memory. keras-rs learns
the limits online on JAX only, and its own examples hard-code 8192. `sparsecore_stats` scans
the data through the same pipeline and computes them::

    stats = tfinput.sparsecore_stats(pipeline, per_replica_batch_size=512, devices=8)
    tables, features = tfinput.keras_rs_configs(schema, per_replica_batch_size=512,
                                                limits=stats)
    print(stats.overflows({"user_id": (256, 256)}))   # which batches a limit overflows

**The partitioning rule** is the one jax-tpu-embedding's input preprocessing applies
(``input_preprocessing_util.cc``, ``SortAndGroupCooTensorsPerLocalDevice``; keras-rs 0.4
calls it on JAX, and TensorFlow's `TPUEmbeddingV2` mod-shards the same way):

- ``S = devices * sparsecores_per_device`` SparseCores in all (a power of two). A table
  is mod-sharded over them: id ``i`` lives in partition ``(i + shift) % S``, where
  ``shift`` rotates each table of a stack (``table_index * sparsecores_per_device % S``)
  and is 0 for a table alone.
- The global batch is split into ``devices`` contiguous per-device batches, and each of
  those into ``sparsecores_per_device`` contiguous slices (feature stacking
  "split then stack": each SparseCore takes the same rows of every feature of a stack).
- Within one slice, for each partition: the *ids* are the distinct (feature, row, id)
  entries (an id repeated in one row of one feature is merged, its weights added); the
  *unique ids* are the distinct ids. ``max_ids_per_partition`` and
  ``max_unique_ids_per_partition`` are the maxima over slices, partitions and batches.
- A slice's COO buffer needs ``1 + sum over partitions of round_up(ids, 8)`` entries
  (``required_buffer_size_per_sc``); a device ``sparsecores_per_device`` times that.
- Tables stacked together share the limits (the stack's maxima). ``stacking="auto"``
  groups tables the way jax-tpu-embedding's ``auto_stack_tables`` (keras-rs's default on
  JAX) does: same embedding width rounded up to 8 and same combiner, alphabetical order,
  at most 2 MiB of activations per stack.
- A multi-hot list's padding is not fed: `sparsecore_feed` leaves every entry of weight
  0 out (the ``dense`` format pads with id 0, weight 0), and the dense counts leave them
  out too, so every format counts the same ids. ``sparse`` and ``ragged`` count every id
  they list (TensorFlow's TPUEmbedding enqueue sends ids of weight 0 too; the feed, at
  most those).

The counting is vectorized: one 64-bit key per id and one numpy sort per batch and stack
give both counts, inside the pipeline's map (batches count in parallel): no per-example
Python.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfinput._src.applications.sparsecore.results import SparseCoreStats, StackStats
from tfinput._src.applications.sparsecore.stacks import (
    DEFAULT_SPARSECORES_PER_DEVICE,
    IdCounter,
    Stack,
    plan_stacks,
)
from tfinput._src.core.errors import ConfigError
from tfinput._src.core.schema import Schema

if TYPE_CHECKING:
    import tensorflow as tf

    from tfinput._src.core.config import PipelineConfig
    from tfinput._src.core.pipeline import Pipeline


def _check_positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}: expected a positive int, got {value!r}")
    return value


def sparsecore_stats(
    pipeline: Pipeline,
    *,
    per_replica_batch_size: int,
    devices: int = 1,
    sparsecores_per_device: int = DEFAULT_SPARSECORES_PER_DEVICE,
    stacking: str | Sequence[Sequence[str]] | None = "auto",
    margin: float = 0.2,
    max_batches: int | None = None,
    config: PipelineConfig | None = None,
    schema: Schema | None = None,
    multi_hot_format: str | None = None,
    tick: Callable[[int], None] | None = None,
) -> SparseCoreStats:
    """Scan the data and measure the SparseCore limits each table (stack) needs.

    Args:
      pipeline: A tfinput `Pipeline` (built once, in its multi-hot format, with batches
        of ``per_replica_batch_size * devices`` rows), or a `tf.data.Dataset` of
        ``(features, labels)`` global batches with ``schema`` given.
      per_replica_batch_size: Rows each chip takes per step; a multiple of
        ``sparsecores_per_device``.
      devices: Chips in all (the limits are per partition over all of them).
      sparsecores_per_device: 4 on TPU v5p, 2 on v6e; ``devices * sparsecores_per_device``
        must be a power of two.
      stacking: ``"auto"`` (keras-rs's default on JAX), ``"none"``, or lists of tables.
      margin: Suggested limits are the observed maxima times ``1 + margin``.
      max_batches: Scan only this many batches (a sample: the result says what that
        can miss); None scans everything.
      config: `PipelineConfig` for the build (its batch size, layout and epochs are
        replaced); None reads in file order with default knobs.
      schema: Needed only when ``pipeline`` is a dataset.
      multi_hot_format: The format to read a pipeline's multi-hot features in
        (default: its own), or the one a dataset's are in (recorded in the result);
        the counts are the same in each.
      tick: Called with the number of batches done after each batch (progress).

    Returns:
      A `SparseCoreStats`.

    Raises:
      ConfigError: bad sizes, a batch size not divisible into SparseCore slices, or a
        dataset without a schema.
    """
    _check_sizes(per_replica_batch_size, devices, sparsecores_per_device, max_batches, margin)
    global_batch = per_replica_batch_size * devices
    ds, schema, fmt = _ids_dataset(
        pipeline,
        global_batch=global_batch,
        config=config,
        schema=schema,
        multi_hot_format=multi_hot_format,
    )
    sizes = {
        "global_batch_size": global_batch,
        "devices": devices,
        "sparsecores_per_device": sparsecores_per_device,
    }
    stacks = plan_stacks(schema, stacking=stacking, **sizes)
    counter = IdCounter(schema, stacks, **sizes)
    series, batches, complete = _scan(ds, counter, stacks, global_batch, max_batches, tick)
    if batches == 0:
        raise ConfigError(
            f"sparsecore_stats: no full batch of {global_batch} rows in the data "
            f"(per_replica_batch_size {per_replica_batch_size} x {devices} devices)"
        )
    return SparseCoreStats(
        devices=devices,
        sparsecores_per_device=sparsecores_per_device,
        per_replica_batch_size=per_replica_batch_size,
        multi_hot_format=fmt,
        margin=float(margin),
        batches=batches,
        complete=complete,
        stacks=tuple(_stack_stats(s, series[s.name]) for s in stacks),
    )


def _check_sizes(
    per_replica_batch_size: int,
    devices: int,
    sparsecores_per_device: int,
    max_batches: int | None,
    margin: float,
) -> None:
    """Raise `ConfigError` for sizes `sparsecore_stats` cannot count with."""
    _check_positive("per_replica_batch_size", per_replica_batch_size)
    _check_positive("devices", devices)
    _check_positive("sparsecores_per_device", sparsecores_per_device)
    if max_batches is not None:
        _check_positive("max_batches", max_batches)
    if (
        not isinstance(margin, (int, float))
        or isinstance(margin, bool)
        or not math.isfinite(margin)
        or margin < 0
    ):
        raise ConfigError(f"margin: expected a finite number >= 0 (0.2 = 20%), got {margin!r}")
    num_sc = devices * sparsecores_per_device
    if num_sc & (num_sc - 1):
        raise ConfigError(
            f"devices * sparsecores_per_device = {num_sc} SparseCores: SparseCore mod "
            "sharding needs a power of two"
        )
    if per_replica_batch_size % sparsecores_per_device:
        raise ConfigError(
            f"per_replica_batch_size {per_replica_batch_size} does not split evenly over "
            f"{sparsecores_per_device} SparseCores per device; use a multiple of "
            f"{sparsecores_per_device}"
        )


def _ids_dataset(
    pipeline: Pipeline,
    *,
    global_batch: int,
    config: PipelineConfig | None,
    schema: Schema | None,
    multi_hot_format: str | None,
) -> tuple[Any, Schema, str]:
    """``(dataset of global batches, schema, multi-hot format)``: a tfinput pipeline
    built with its ids only (no dense features or labels to parse), or the user's
    dataset as it is."""
    import tensorflow as tf

    if isinstance(pipeline, tf.data.Dataset):
        if schema is None:
            raise ConfigError("sparsecore_stats: pass schema= with a tf.data.Dataset")
        ds = pipeline
        fmt = multi_hot_format or "dense"
    else:
        from tfinput._src.core.config import PipelineConfig

        schema = pipeline.schema
        fmt = pipeline.multi_hot_format
        if multi_hot_format is not None and multi_hot_format != fmt:
            pipeline = pipeline.with_multi_hot_format(multi_hot_format)
            fmt = multi_hot_format
        # Only the ids are counted: read no dense features or labels (less to parse).
        ids_only = Schema(features=schema.categorical, tables=schema.tables, labels=())
        base = config if config is not None else PipelineConfig()
        ds = pipeline.with_schema(ids_only).build(
            dataclasses.replace(
                base, batch_size=global_batch, drop_remainder=True, layout="per_feature"
            )
        )
    return ds, schema, fmt


def _scan(
    ds: tf.data.Dataset,
    counter: IdCounter,
    stacks: Sequence[Stack],
    global_batch: int,
    max_batches: int | None,
    tick: Callable[[int], None] | None,
) -> tuple[dict[str, dict[str, list[Any]]], int, bool]:
    """Count every batch (up to ``max_batches``) in parallel tf.data maps: ``(per stack,
    per count, one array per batch; batches counted; whether the data were all read)``."""
    import tensorflow as tf

    def count(features: Any, *_: Any) -> Any:
        first = next(iter(features["ids"].values()))
        rows = (
            first.dense_shape[0]
            if isinstance(first, tf.SparseTensor)
            else (first.nrows() if isinstance(first, tf.RaggedTensor) else tf.shape(first)[0])
        )
        check = tf.debugging.assert_equal(
            tf.cast(rows, tf.int64),
            tf.constant(global_batch, tf.int64),
            message=f"sparsecore_stats: every batch must have {global_batch} rows "
            "(per_replica_batch_size * devices, drop_remainder=True)",
        )
        with tf.control_dependencies([check]):
            return counter(features)

    if max_batches is not None:
        ds = ds.take(max_batches + 1)
    ds = ds.map(count, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(2)
    series: dict[str, dict[str, list[Any]]] = {
        s.name: {k: [] for k in ("ids", "unique", "buffer", "partition_ids", "partition_unique")}
        for s in stacks
    }
    batches = 0
    complete = True
    for out in ds:
        if max_batches is not None and batches == max_batches:
            complete = False
            break
        for name, values in out.items():
            for k, v in values.items():
                series[name][k].append(v.numpy())
        batches += 1
        if tick is not None:
            tick(batches)
    return series, batches, complete


def _stack_stats(stack: Stack, v: Mapping[str, list[Any]]) -> StackStats:
    """One stack's `StackStats` from its per-batch counts."""
    import numpy as np

    return StackStats(
        stack=stack,
        ids=np.asarray(v["ids"], np.int64),
        unique=np.asarray(v["unique"], np.int64),
        buffer=np.asarray(v["buffer"], np.int64),
        partition_ids=np.max(np.stack(v["partition_ids"]), axis=0),
        partition_unique=np.max(np.stack(v["partition_unique"]), axis=0),
    )
