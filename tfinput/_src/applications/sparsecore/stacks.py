"""SparseCore stacks: which tables share a SparseCore stack, the constants of the
hardware (and jax-tpu-embedding, the library that preprocesses for it), and counting
ids per partition of each stack (vectorized: one 64-bit key per id, one sort per batch
and stack). `tfinput.sparsecore` is the public API."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from tfinput._src.core.errors import ConfigError
from tfinput._src.core.schema import Schema, Table

#: SparseCores per chip: 4 on TPU v5p, 2 on v6e (Trillium).
DEFAULT_SPARSECORES_PER_DEVICE = 4
#: keras-rs `TableConfig` default for both limits.
KERAS_RS_DEFAULT_LIMIT = 256
#: What keras-rs's MLPerf DLRM example hard-codes for every table.
MLPERF_LIMIT = 8192
#: TPU vector register alignment: buffers are rounded up to multiples of it.
ALIGNMENT = 8
#: ``auto_stack_tables``'s default activation memory limit per stack.
ACTIVATION_BYTES_LIMIT = 2 * 1024 * 1024
#: Bytes per COO buffer entry (int32 id, int32 sample, float32 gain).
COO_ENTRY_BYTES = 12


_INSTALL = (
    "pip install 'tfinput[sparsecore]' (jax-tpu-embedding; wheels for CPython 3.12+ on "
    "x86-64 Linux)"
)


def embedding_module() -> Any:
    """jax-tpu-embedding's ``embedding`` module (imported on first use).

    Raises:
      ConfigError: jax-tpu-embedding is not installed: names what to install.
    """
    try:
        from jax_tpu_embedding.sparsecore.lib.nn import embedding
    except ImportError as e:
        raise ConfigError(f"SparseCore preprocessing needs jax-tpu-embedding: {_INSTALL}") from e
    return embedding


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


# ------------------------------------------------------------------ stacks
@dataclasses.dataclass(frozen=True, kw_only=True)
class Stack:
    """Tables that share one SparseCore buffer (a keras-rs / jax-tpu-embedding stack).

    Attributes:
      name: Stack name (the table name for a table alone; keras-rs's naming otherwise).
      tables: Member tables in stacking order.
      shifts: Each table's shard rotation (its id ``i`` goes to ``(i + shift) % S``).
      offsets: Each table's column offset in the stack (a multiple of ``S``).
      columns: Rows of the stacked table (each member padded to a multiple of ``8 S``).
    """

    name: str
    tables: tuple[str, ...]
    shifts: tuple[int, ...]
    offsets: tuple[int, ...]
    columns: int


def _stack_name(tables: Sequence[str]) -> str:
    """keras-rs / jax-tpu-embedding's short stack name."""
    name = "_".join(tables)
    if len(name) <= 50:
        return name
    return name[:50] + "..." + hashlib.sha256(name.encode()).hexdigest()[:12]


def _auto_groups(
    order: list[str], used: dict[str, list[str]], tables: dict[str, Table], per_sparsecore: int
) -> list[list[str]]:
    """keras-rs's automatic stacking: tables of one padded width and combiner stacked
    while their activations fit `ACTIVATION_BYTES_LIMIT`."""
    keyed: dict[tuple[int, str], list[str]] = {}
    for t in order:
        key = (round_up(tables[t].dim, ALIGNMENT), tables[t].combiner)
        keyed.setdefault(key, []).append(t)
    samples = {t: len(used[t]) * per_sparsecore for t in order}
    groups = []
    for group in keyed.values():
        split: list[list[str]] = []
        for t in group:
            cost = round_up(tables[t].dim, ALIGNMENT) * samples[t] * 4
            for candidate in split:
                held = sum(round_up(tables[c].dim, ALIGNMENT) * samples[c] * 4 for c in candidate)
                if held + cost <= ACTIVATION_BYTES_LIMIT:
                    candidate.append(t)
                    break
            else:
                split.append([t])
        groups.extend(split)
    return groups


def _given_groups(
    stacking: Sequence[Sequence[str] | str],
    order: list[str],
    used: dict[str, list[str]],
    tables: dict[str, Table],
) -> list[list[str]]:
    """The user's stacks (checked), then every other used table alone."""
    groups = []
    seen: set[str] = set()
    for group in stacking:
        group = [group] if isinstance(group, str) else list(group)
        for t in group:
            if t not in tables:
                raise ConfigError(
                    f"stacking: no table {t!r} in the schema; tables: {sorted(tables)}"
                )
            if t in seen:
                raise ConfigError(f"stacking: table {t!r} is in more than one stack")
            seen.add(t)
        combiners = {tables[t].combiner for t in group}
        if len(combiners) > 1:
            raise ConfigError(
                f"stacking: tables {group} have different combiners {sorted(combiners)}; "
                "keras-rs stacks only tables with the same combiner and optimizer"
            )
        group = [t for t in group if t in used]
        if group:
            groups.append(group)
    groups.extend([t] for t in order if t not in seen)
    return groups


def plan_stacks(
    schema: Schema,
    *,
    global_batch_size: int,
    devices: int,
    sparsecores_per_device: int = DEFAULT_SPARSECORES_PER_DEVICE,
    stacking: str | Sequence[Sequence[str]] | None = "auto",
) -> tuple[Stack, ...]:
    """Group the schema's tables into stacks and place each table in its stack.

    Args:
      schema: The schema; every table that a feature uses takes part.
      global_batch_size: Rows per step on all devices (``per_replica * devices``).
      devices: Chips (TPU devices) in all.
      sparsecores_per_device: SparseCores per chip.
      stacking: ``"auto"`` (keras-rs's default on JAX), None or ``"none"`` (every table
        alone), or lists of table names stacked together (other tables stay alone).

    Returns:
      The stacks, in a stable order.

    Raises:
      ConfigError: an unknown or repeated table, or stacked tables whose combiners differ.
    """
    num_sc = devices * sparsecores_per_device
    used: dict[str, list[str]] = {}
    for f in sorted(schema.categorical, key=lambda f: f.name):
        used.setdefault(f.table, []).append(f.name)
    order = list(used)  # by first feature name, as jax.tree.leaves orders a dict
    tables = {t.name: t for t in schema.tables}
    groups: list[list[str]]
    if stacking is None or stacking == "none":
        groups = [[t] for t in order]
    elif stacking == "auto":
        groups = _auto_groups(order, used, tables, global_batch_size // num_sc)
    elif isinstance(stacking, str):
        raise ConfigError(
            f'stacking: expected "auto", "none" or lists of table names, got {stacking!r}'
        )
    else:
        groups = _given_groups(stacking, order, used, tables)
    stacks = []
    for group in groups:
        shifts, offsets, rows = [], [], 0
        for i, t in enumerate(group):
            shifts.append((i * sparsecores_per_device) % num_sc)
            offsets.append(rows)
            rows += round_up(tables[t].vocabulary_size, ALIGNMENT * num_sc)
        stacks.append(
            Stack(
                name=_stack_name(group),
                tables=tuple(group),
                shifts=tuple(shifts),
                offsets=tuple(offsets),
                columns=rows,
            )
        )
    return tuple(stacks)


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
        weights = features.get("weights")
        weights = weights if isinstance(weights, Mapping) else {}
        out = {}
        S = self.num_sc
        for plan in self.plans:
            singles, single_index, parts, listed = [], [], [], []
            for index, name in enumerate(plan.features):
                value = ids[name]
                if isinstance(value, (tf.SparseTensor, tf.RaggedTensor)):
                    # Every listed id counts (TPUEmbedding's enqueue sends them all):
                    # pad with -1 to count them as a dense block.
                    shape = [self.batch, self.max_len[name]]
                    if isinstance(value, tf.SparseTensor):
                        value = tf.sparse.to_dense(
                            tf.sparse.reset_shape(value, shape), default_value=-1
                        )
                    else:
                        value = value.to_tensor(-1, shape=shape)
                elif value.shape.rank == 1:
                    singles.append(tf.cast(value, plan.dtype))
                    single_index.append(index)
                    continue
                elif name in weights:
                    # Dense [B, max_len]: the feed sends no entry of weight 0 (the
                    # padding), so none counts.
                    fed = tf.not_equal(weights[name], 0)
                    value = tf.where(fed, value, tf.constant(-1, value.dtype))
                parts.append(tf.cast(value, plan.dtype))
                listed.append(index)
            args = [tf.stack(singles, 1) if singles else tf.zeros([self.batch, 0], plan.dtype)]
            result = tf.numpy_function(
                functools.partial(
                    _count,
                    plan=plan,
                    single_index=np.asarray(single_index, np.int64),
                    listed=tuple(listed),
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
    listed: tuple[int, ...],
    sparsecores: int,
    rows_per_slice: int,
) -> tuple[Any, ...]:
    """One batch's counts for one stack: max ids and unique ids per partition, the
    largest per-slice buffer, and the per-partition maxima.

    Args:
      singles: ``[B, n]`` single ids (column ``j`` is feature ``single_index[j]``).
      parts: A ``[B, max_len]`` block of multi-hot ids per feature ``listed[k]``; its
        entries of -1 are not fed (padding, or entries of weight 0).

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
    for feature, block in zip(listed, parts, strict=True):
        block = np.sort(block, axis=1)
        first = np.empty(block.shape, bool)
        first[:, :1] = True
        np.not_equal(block[:, 1:], block[:, :-1], out=first[:, 1:])
        first &= block >= 0  # -1 (not fed) sorts first
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
