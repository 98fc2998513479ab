"""Counting ids per SparseCore partition, vectorized (one 64-bit key per id, one sort
per batch and stack). `tfinput.sparsecore` is the public API."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from tfinput._src.applications._sparsecore_stacks import ALIGNMENT, Stack
from tfinput._src.core.errors import ConfigError
from tfinput._src.core.schema import Schema

__all__ = ["IdCounter"]


# ------------------------------------------------------------------ counting
class IdCounter:
    """The per-batch computation for every stack.

    TensorFlow gathers each stack's ids (dense features as one ``[B, n]`` matrix); a
    numpy function counts them (`_count`). numpy's sorts release the GIL, so batches
    count in parallel inside the pipeline's map.
    """

    def __init__(
        self,
        schema: Schema,
        stacks: Sequence[Stack],
        *,
        global_batch_size: int,
        devices: int,
        sparsecores_per_device: int,
    ) -> None:
        import numpy as np

        self.stacks = tuple(stacks)
        self.batch = global_batch_size
        self.num_sc = devices * sparsecores_per_device
        self.rows_per_slice = global_batch_size // self.num_sc
        by_table: dict[str, list[Any]] = {}
        for f in sorted(schema.categorical, key=lambda f: f.name):
            by_table.setdefault(f.table, []).append(f)
        self.max_len = {f.name: f.max_len for f in schema.multi_hot}
        self.plans = []
        for s in self.stacks:
            members = [
                (f, shift, offset)
                for table, shift, offset in zip(s.tables, s.shifts, s.offsets, strict=True)
                for f in by_table.get(table, ())
            ]
            column_bits = max(1, (s.columns - 1).bit_length())
            slice_bits = max(1, (self.num_sc - 1).bit_length())
            row_bits = max(1, (self.batch - 1).bit_length())
            if max(slice_bits, row_bits) + column_bits > 62:
                raise ConfigError(
                    f"stack {s.name!r}: {s.columns:,} stacked rows are too many to count "
                    "with 64-bit keys; stack fewer tables together (stacking=[...] or 'none')"
                )
            self.plans.append(
                _StackPlan(
                    stack=s,
                    features=tuple(f.name for f, _, _ in members),
                    shift=np.array([sh for _, sh, _ in members], np.int64),
                    offset=np.array([off for _, _, off in members], np.int64),
                    slice_bits=slice_bits,
                    column_bits=column_bits,
                )
            )

    def __call__(self, features: Mapping[str, Any]) -> dict[str, Any]:
        import numpy as np
        import tensorflow as tf

        ids = features["ids"]
        out = {}
        S = self.num_sc
        for plan in self.plans:
            singles, single_index, parts, layout = [], [], [], []
            for index, name in enumerate(plan.features):
                value = ids[name]
                if isinstance(value, (tf.SparseTensor, tf.RaggedTensor)):
                    # Only real ids are fed: pad with -1 to count them as a dense block.
                    shape = [self.batch, self.max_len[name]]
                    if isinstance(value, tf.SparseTensor):
                        value = tf.sparse.to_dense(
                            tf.sparse.reset_shape(value, shape), default_value=-1
                        )
                    else:
                        value = value.to_tensor(-1, shape=shape)
                    parts.append(tf.cast(value, plan.dtype))
                    layout.append(("listed", index))
                elif value.shape.rank == 1:
                    singles.append(tf.cast(value, plan.dtype))
                    single_index.append(index)
                else:  # dense [B, max_len]: every entry is fed, padding included
                    parts.append(tf.cast(value, plan.dtype))
                    layout.append(("dense", index))
            args = [tf.stack(singles, 1) if singles else tf.zeros([self.batch, 0], plan.dtype)]
            result = tf.numpy_function(
                functools.partial(
                    _count,
                    plan=plan,
                    single_index=np.asarray(single_index, np.int64),
                    layout=tuple(layout),
                    sparsecores=S,
                    rows_per_slice=self.rows_per_slice,
                ),
                args + parts,
                [tf.int64] * 5,
                stateful=False,
                name="sparsecore_count",
            )
            shapes = ([], [], [], [S], [S])
            names = ("ids", "unique", "buffer", "partition_ids", "partition_unique")
            out[plan.stack.name] = {
                k: tf.ensure_shape(v, shape)
                for k, v, shape in zip(names, result, shapes, strict=True)
            }
        return out


@dataclasses.dataclass(frozen=True)
class _StackPlan:
    """One stack's features in key order, with each one's table shift and offset."""

    stack: Stack
    features: tuple[str, ...]
    shift: Any
    offset: Any
    slice_bits: int
    column_bits: int

    @property
    def rotated(self) -> bool:
        return bool(self.shift.any())

    @property
    def dtype(self) -> Any:
        """int32 while stacked columns fit (half the memory traffic), else int64."""
        import tensorflow as tf

        return tf.int32 if self.column_bits <= 31 else tf.int64


def _count(
    singles: Any,
    *parts: Any,
    plan: _StackPlan,
    single_index: Any,
    layout: tuple[tuple[str, int], ...],
    sparsecores: int,
    rows_per_slice: int,
) -> tuple[Any, ...]:
    """One batch's counts for one stack: max ids and unique ids per partition, the
    largest per-slice buffer, and the per-partition maxima.

    Args:
      singles: ``[B, n]`` single ids (column ``j`` is feature ``single_index[j]``).
      parts: Per ``layout`` entry, a ``[B, max_len]`` block: ``dense`` (every entry is
        fed, padding included) or ``listed`` (sparse/ragged input padded with -1 here:
        only real ids are fed).

    A multi-hot row's repeated ids are merged (each row sorted, first occurrences kept);
    ids per (slice, partition) are counted from what is left, and unique ids are the
    distinct ``(slice, column)`` keys (one sort per batch).
    """
    import numpy as np

    S = sparsecores
    mask = S - 1
    cb = plan.column_bits
    wide = plan.slice_bits + cb > 31
    keys = []  # (slice << column_bits) + stacked column, one per id fed

    def key(col: Any, slices: Any) -> Any:
        if wide:
            col = col.astype(np.int64)
        col += slices.astype(col.dtype) << cb
        return col

    def column(ids: Any, feature: Any) -> Any:
        # jax-tpu-embedding's CooFormat::GetColId: rotate the shard bits, add the offset.
        offset = plan.offset[feature].astype(ids.dtype)
        if not plan.rotated:  # no table of the stack is rotated (S divides the rotation)
            return ids + offset
        col = ids + plan.shift[feature].astype(ids.dtype)
        col &= mask
        col += ids & ~mask
        col += offset
        return col

    batch = singles.shape[0]
    row_slices = (np.arange(batch, dtype=np.int32) // rows_per_slice)[:, None]
    if singles.shape[1]:
        keys.append(key(column(singles, single_index), row_slices).ravel())
    for (kind, feature), block in zip(layout, parts, strict=True):
        block = np.sort(block, axis=1)
        first = np.empty(block.shape, bool)
        first[:, :1] = True
        np.not_equal(block[:, 1:], block[:, :-1], out=first[:, 1:])
        if kind == "listed":  # padded with -1, which sorts first
            first &= block >= 0
        keys.append(key(column(block, feature), row_slices)[first])
    n = S * S
    keys = np.concatenate(keys)
    ids_grid = np.bincount((keys >> cb) * S + (keys & mask), minlength=n).reshape(S, S)
    keys.sort()
    distinct = np.empty(keys.shape, bool)
    distinct[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=distinct[1:])
    keys = keys[distinct]
    unique_grid = np.bincount((keys >> cb) * S + (keys & mask), minlength=n).reshape(S, S)
    buffer = ((ids_grid + (ALIGNMENT - 1)) // ALIGNMENT * ALIGNMENT).sum(axis=1) + 1
    return (
        np.int64(ids_grid.max()),
        np.int64(unique_grid.max()),
        np.int64(buffer.max()),
        ids_grid.max(axis=0).astype(np.int64),
        unique_grid.max(axis=0).astype(np.int64),
    )
