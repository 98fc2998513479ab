"""SparseCore buffer limits measured from the data.

A TPU SparseCore looks up a table's ids from static buffers whose sizes are fixed at
compile time: ``max_ids_per_partition`` and ``max_unique_ids_per_partition`` per table
(keras-rs `TableConfig`, TensorFlow `SparseCoreEmbeddingConfig`). A batch that needs more
fails, or has ids dropped; an oversized limit wastes SparseCore memory. keras-rs learns
the limits online on JAX only, and its own examples hard-code 8192. This module scans
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
- Multi-hot features fed in the ``dense`` format pass their padding to the SparseCore as
  id 0 with weight 0: one extra entry per padded row, all in id 0's partition. The
  statistics count what the chosen format feeds; ``sparse`` and ``ragged`` feed only
  real ids.

The counting is vectorized: one 64-bit key per id and one numpy sort per batch and stack
give both counts, inside the pipeline's map (batches count in parallel): no per-example
Python.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tfinput.errors import ConfigError
from tfinput.schema import Schema

__all__ = [
    "sparsecore_stats",
    "plan_stacks",
    "SparseCoreStats",
    "StackStats",
    "Stack",
    "Limits",
    "Overflow",
    "DEFAULT_SPARSECORES_PER_DEVICE",
    "KERAS_RS_DEFAULT_LIMIT",
]

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


def _round_up(value: int, multiple: int) -> int:
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
        keyed: dict[tuple[int, str], list[str]] = {}
        for t in order:
            key = (_round_up(tables[t].dim, ALIGNMENT), tables[t].combiner)
            keyed.setdefault(key, []).append(t)
        samples = {t: len(used[t]) * (global_batch_size // num_sc) for t in order}
        groups = []
        for group in keyed.values():
            split: list[list[str]] = []
            for t in group:
                cost = _round_up(tables[t].dim, ALIGNMENT) * samples[t] * 4
                for candidate in split:
                    held = sum(
                        _round_up(tables[c].dim, ALIGNMENT) * samples[c] * 4 for c in candidate
                    )
                    if held + cost <= ACTIVATION_BYTES_LIMIT:
                        candidate.append(t)
                        break
                else:
                    split.append([t])
            groups.extend(split)
    elif isinstance(stacking, str):
        raise ConfigError(
            f'stacking: expected "auto", "none" or lists of table names, got {stacking!r}'
        )
    else:
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
    stacks = []
    for group in groups:
        shifts, offsets, rows = [], [], 0
        for i, t in enumerate(group):
            shifts.append((i * sparsecores_per_device) % num_sc)
            offsets.append(rows)
            rows += _round_up(tables[t].vocabulary_size, ALIGNMENT * num_sc)
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


# ------------------------------------------------------------------ results
@dataclasses.dataclass(frozen=True)
class Limits:
    """Buffer limits for one stack (and each of its tables).

    Attributes:
      max_ids_per_partition: For `TableConfig.max_ids_per_partition`.
      max_unique_ids_per_partition: For `TableConfig.max_unique_ids_per_partition`.
      required_buffer_size_per_sc: COO buffer entries one SparseCore needs (jax-tpu-
        embedding's ``suggested_coo_buffer_size`` is this times SparseCores per device).
    """

    max_ids_per_partition: int
    max_unique_ids_per_partition: int
    required_buffer_size_per_sc: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Overflow:
    """How often and by how much a stack's batches exceed given limits.

    Attributes:
      stack: Stack name.
      limits: The limits checked.
      batches: Batches checked.
      over_any: Batches that exceed at least one limit.
      over_ids: Batches whose max ids per partition exceed the limit.
      over_unique: Batches whose max unique ids per partition exceed the limit.
      over_buffer: Batches whose per-SparseCore buffer exceeds the limit (0 when no
        buffer limit was given).
      worst_ids: Largest excess of ids over the limit (0 if none).
      worst_unique: Largest excess of unique ids over the limit.
      worst_buffer: Largest excess of buffer entries over the limit.
      first_batches: Indices (in scan order) of the first overflowing batches.
    """

    stack: str
    limits: Limits
    batches: int
    over_any: int
    over_ids: int
    over_unique: int
    over_buffer: int
    worst_ids: int
    worst_unique: int
    worst_buffer: int
    first_batches: tuple[int, ...]

    def __str__(self) -> str:
        if not self.over_any:
            lim = self.limits
            text = (
                f"{self.stack}: no batch of {self.batches} exceeds max_ids_per_partition "
                f"{lim.max_ids_per_partition}, max_unique_ids_per_partition "
                f"{lim.max_unique_ids_per_partition}"
            )
            if lim.required_buffer_size_per_sc:
                text += f", buffer {lim.required_buffer_size_per_sc} per SparseCore"
            return text
        parts = []
        if self.over_ids:
            parts.append(
                f"{self.over_ids} batches exceed max_ids_per_partition "
                f"{self.limits.max_ids_per_partition} (by up to {self.worst_ids})"
            )
        if self.over_unique:
            parts.append(
                f"{self.over_unique} batches exceed max_unique_ids_per_partition "
                f"{self.limits.max_unique_ids_per_partition} (by up to {self.worst_unique})"
            )
        if self.over_buffer:
            parts.append(
                f"{self.over_buffer} batches exceed the buffer of "
                f"{self.limits.required_buffer_size_per_sc} per SparseCore "
                f"(by up to {self.worst_buffer})"
            )
        first = ", ".join(map(str, self.first_batches))
        return (
            f"{self.stack}: {self.over_any} of {self.batches} batches overflow: "
            + "; ".join(parts)
            + f" (first: {first})"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class StackStats:
    """What one stack's batches need.

    Attributes:
      stack: The stack.
      ids: Per batch, the max ids per partition (over slices and partitions).
      unique: Per batch, the max unique ids per partition.
      buffer: Per batch, the largest per-SparseCore buffer.
      partition_ids: Per partition, the max ids over slices and batches (shows skew:
        a hot id, or dense-format padding, fills one partition).
      partition_unique: Per partition, the max unique ids.
    """

    stack: Stack
    ids: Any
    unique: Any
    buffer: Any
    partition_ids: Any
    partition_unique: Any

    @property
    def observed(self) -> Limits:
        """The maxima over every batch scanned."""
        return Limits(
            int(self.ids.max(initial=0)),
            int(self.unique.max(initial=0)),
            int(self.buffer.max(initial=0)),
        )

    def limits(self, margin: float) -> Limits:
        """The observed maxima times ``1 + margin``, rounded up to multiples of 8."""
        o = self.observed

        def up(v: int) -> int:
            return max(ALIGNMENT, _round_up(math.ceil(v * (1 + margin)), ALIGNMENT))

        return Limits(
            up(o.max_ids_per_partition),
            up(o.max_unique_ids_per_partition),
            up(o.required_buffer_size_per_sc),
        )

    def overflow(self, limits: Limits | tuple[int, ...] | int) -> Overflow:
        """Which scanned batches would exceed ``limits``.

        Args:
          limits: A `Limits`, ``(max_ids, max_unique[, buffer])`` or one int for both id
            limits. A buffer limit of 0 (or absent) is not checked.
        """
        import numpy as np

        lim = _as_limits(limits)
        over_ids = self.ids - lim.max_ids_per_partition
        over_unique = self.unique - lim.max_unique_ids_per_partition
        over_buffer = (
            self.buffer - lim.required_buffer_size_per_sc
            if lim.required_buffer_size_per_sc
            else np.zeros_like(self.buffer)
        )
        bad = (over_ids > 0) | (over_unique > 0) | (over_buffer > 0)
        return Overflow(
            stack=self.stack.name,
            limits=lim,
            batches=len(self.ids),
            over_any=int(bad.sum()),
            over_ids=int((over_ids > 0).sum()),
            over_unique=int((over_unique > 0).sum()),
            over_buffer=int((over_buffer > 0).sum()),
            worst_ids=int(max(0, over_ids.max(initial=0))),
            worst_unique=int(max(0, over_unique.max(initial=0))),
            worst_buffer=int(max(0, over_buffer.max(initial=0))),
            first_batches=tuple(int(i) for i in np.flatnonzero(bad)[:10]),
        )


def _as_limits(limits: Limits | tuple[int, ...] | int) -> Limits:
    if isinstance(limits, Limits):
        return limits
    if isinstance(limits, int) and not isinstance(limits, bool):
        return Limits(limits, limits, 0)
    values = tuple(limits)
    if len(values) == 2:
        values = (*values, 0)
    if len(values) != 3 or not all(isinstance(v, int) and v >= 0 for v in values):
        raise ConfigError(
            "limits: expected an int, (max_ids, max_unique) or (max_ids, max_unique, "
            f"buffer) of non-negative ints, got {limits!r}"
        )
    return Limits(*values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SparseCoreStats:
    """The result of `sparsecore_stats`.

    Attributes:
      devices: Chips in all.
      sparsecores_per_device: SparseCores per chip.
      per_replica_batch_size: Rows each chip takes per step.
      multi_hot_format: The multi-hot format counted (``dense`` counts its padding).
      margin: Safety margin the suggested limits add (0.2 = 20%).
      batches: Global batches scanned.
      complete: True when every batch of the data was scanned (no ``max_batches`` cut).
      stacks: Per stack, what its batches need.
    """

    devices: int
    sparsecores_per_device: int
    per_replica_batch_size: int
    multi_hot_format: str
    margin: float
    batches: int
    complete: bool
    stacks: tuple[StackStats, ...]

    @property
    def sparsecores(self) -> int:
        return self.devices * self.sparsecores_per_device

    @property
    def examples(self) -> int:
        return self.batches * self.per_replica_batch_size * self.devices

    def stack(self, name: str) -> StackStats:
        for s in self.stacks:
            if s.stack.name == name:
                return s
        raise ConfigError(f"no stack {name!r}; stacks: {[s.stack.name for s in self.stacks]}")

    def limits(self) -> dict[str, Limits]:
        """Suggested limits (observed maxima plus the margin) by stack name."""
        return {s.stack.name: s.limits(self.margin) for s in self.stacks}

    def table_limits(self) -> dict[str, tuple[int, int]]:
        """``table -> (max_ids_per_partition, max_unique_ids_per_partition)``, the
        suggested limits of each table's stack: what `keras_rs_configs(limits=...)`
        writes into the keras-rs `TableConfig`s."""
        out = {}
        for s in self.stacks:
            lim = s.limits(self.margin)
            for t in s.stack.tables:
                out[t] = (lim.max_ids_per_partition, lim.max_unique_ids_per_partition)
        return out

    def apply(self, table_configs: Mapping[str, Any]) -> dict[str, Any]:
        """Copies of keras-rs `TableConfig`s (by table name) with the suggested limits.

        Tables the statistics do not cover keep theirs. Features' `FeatureConfig`s hold
        their table: rebuild them with `tfinput.keras_rs_configs(limits=stats)` instead
        when the features are already made.
        """
        limits = self.table_limits()
        out = {}
        for name, cfg in table_configs.items():
            if name in limits:
                ids, unique = limits[name]
                cfg = dataclasses.replace(
                    cfg, max_ids_per_partition=ids, max_unique_ids_per_partition=unique
                )
            out[name] = cfg
        return out

    def tf_config(self, **kwargs: Any) -> Any:
        """A TensorFlow `tf.tpu.experimental.embedding.SparseCoreEmbeddingConfig` with
        the suggested limits per stack (`TPUEmbeddingV2` keys them by stacked table).

        Unless every stack is a single table, TensorFlow must stack the same way: it
        stacks tables of equal width and optimizer itself; pass
        ``disable_table_stacking=True`` (the default here when no table is stacked) or
        compute the statistics with ``stacking="none"``.

        Args:
          **kwargs: Other `SparseCoreEmbeddingConfig` fields (``allow_id_dropping``...).

        Raises:
          ConfigError: a TensorFlow without `SparseCoreEmbeddingConfig` (before 2.18).
        """
        import tensorflow as tf

        embedding = tf.tpu.experimental.embedding
        if not hasattr(embedding, "SparseCoreEmbeddingConfig"):
            raise ConfigError(
                f"SparseCoreEmbeddingConfig needs TensorFlow 2.18 or newer (this is "
                f"{tf.__version__}); the limits are in stats.limits()"
            )
        limits = self.limits()
        kwargs.setdefault(
            "disable_table_stacking", all(len(s.stack.tables) == 1 for s in self.stacks)
        )
        return embedding.SparseCoreEmbeddingConfig(
            max_ids_per_table={n: v.max_ids_per_partition for n, v in limits.items()},
            max_unique_ids_per_table={n: v.max_unique_ids_per_partition for n, v in limits.items()},
            **kwargs,
        )

    def overflows(
        self, limits: Mapping[str, Limits | tuple[int, ...] | int] | Limits | tuple[int, ...] | int
    ) -> list[Overflow]:
        """Which batches would overflow existing limits.

        Args:
          limits: One limit for every stack, or a mapping by stack or table name (a
            stack takes the smallest limit of its tables: keras-rs uses one per stack).

        Raises:
          ConfigError: a name that is neither a stack nor a table.
        """
        if not isinstance(limits, Mapping):
            return [s.overflow(limits) for s in self.stacks]
        names = {s.stack.name for s in self.stacks} | {
            t for s in self.stacks for t in s.stack.tables
        }
        unknown = sorted(set(limits) - names)
        if unknown:
            raise ConfigError(f"limits: unknown stacks or tables {unknown}; known: {sorted(names)}")
        out = []
        for s in self.stacks:
            given = [_as_limits(limits[n]) for n in (s.stack.name, *s.stack.tables) if n in limits]
            if not given:
                continue
            out.append(
                s.overflow(
                    Limits(
                        min(g.max_ids_per_partition for g in given),
                        min(g.max_unique_ids_per_partition for g in given),
                        min(g.required_buffer_size_per_sc for g in given),
                    )
                )
            )
        return out

    def coo_buffer_bytes(self, limit: int) -> int:
        """Bytes of COO buffer one device allocates per stack for a max-ids limit when
        no buffer size is given (jax-tpu-embedding's "theoretical max":
        ``round_up(limit, 8) * sparsecores_per_device * S`` entries of 12 bytes)."""
        entries = _round_up(limit, ALIGNMENT) * self.sparsecores_per_device * self.sparsecores
        return entries * COO_ENTRY_BYTES

    @property
    def sampling_note(self) -> str:
        """What a partial scan can miss."""
        if self.complete:
            return f"all {self.batches} batches scanned: the maxima are exact for this data"
        return (
            f"{self.batches} batches sampled: the maxima are those of the sample. For "
            "batches drawn like the sample, an unseen batch exceeds a sampled maximum with "
            f"probability at most 1/(n+1) = {1 / (self.batches + 1):.2%} (rank argument); "
            "the margin covers batches up to that much larger"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "devices": self.devices,
            "sparsecores_per_device": self.sparsecores_per_device,
            "sparsecores": self.sparsecores,
            "per_replica_batch_size": self.per_replica_batch_size,
            "multi_hot_format": self.multi_hot_format,
            "margin": self.margin,
            "batches": self.batches,
            "examples": self.examples,
            "complete": self.complete,
            "sampling": self.sampling_note,
            "stacks": [
                {
                    "stack": s.stack.name,
                    "tables": list(s.stack.tables),
                    "observed": dataclasses.asdict(s.observed),
                    "suggested": dataclasses.asdict(s.limits(self.margin)),
                    "hottest_partition": int(s.partition_ids.argmax()) if s.ids.size else None,
                    "partition_max_ids": [int(v) for v in s.partition_ids],
                    "partition_max_unique_ids": [int(v) for v in s.partition_unique],
                }
                for s in self.stacks
            ],
        }


# ------------------------------------------------------------------ counting
class _Counter:
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


def _check_positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}: expected a positive int, got {value!r}")
    return value


def sparsecore_stats(
    pipeline: Any,
    *,
    per_replica_batch_size: int,
    devices: int = 1,
    sparsecores_per_device: int = DEFAULT_SPARSECORES_PER_DEVICE,
    stacking: str | Sequence[Sequence[str]] | None = "auto",
    margin: float = 0.2,
    max_batches: int | None = None,
    config: Any = None,
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
      multi_hot_format: Needed only when ``pipeline`` is a dataset whose multi-hot
        features are dense but will be fed sparse (or the reverse); defaults to the
        pipeline's format.
      tick: Called with the number of batches done after each batch (progress).

    Returns:
      A `SparseCoreStats`.

    Raises:
      ConfigError: bad sizes, a batch size not divisible into SparseCore slices, or a
        dataset without a schema.
    """
    import numpy as np
    import tensorflow as tf

    _check_positive("per_replica_batch_size", per_replica_batch_size)
    _check_positive("devices", devices)
    _check_positive("sparsecores_per_device", sparsecores_per_device)
    if max_batches is not None:
        _check_positive("max_batches", max_batches)
    if not isinstance(margin, (int, float)) or isinstance(margin, bool) or margin < 0:
        raise ConfigError(f"margin: expected a number >= 0 (0.2 = 20%), got {margin!r}")
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
    global_batch = per_replica_batch_size * devices
    if isinstance(pipeline, tf.data.Dataset):
        if schema is None:
            raise ConfigError("sparsecore_stats: pass schema= with a tf.data.Dataset")
        ds = pipeline
        fmt = multi_hot_format or "dense"
    else:
        from tfinput.config import PipelineConfig

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
    stacks = plan_stacks(
        schema,
        global_batch_size=global_batch,
        devices=devices,
        sparsecores_per_device=sparsecores_per_device,
        stacking=stacking,
    )
    counter = _Counter(
        schema,
        stacks,
        global_batch_size=global_batch,
        devices=devices,
        sparsecores_per_device=sparsecores_per_device,
    )

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
    if batches == 0:
        raise ConfigError(
            f"sparsecore_stats: no full batch of {global_batch} rows in the data "
            f"(per_replica_batch_size {per_replica_batch_size} x {devices} devices)"
        )
    results = []
    for s in stacks:
        v = series[s.name]
        results.append(
            StackStats(
                stack=s,
                ids=np.asarray(v["ids"], np.int64),
                unique=np.asarray(v["unique"], np.int64),
                buffer=np.asarray(v["buffer"], np.int64),
                partition_ids=np.max(np.stack(v["partition_ids"]), axis=0),
                partition_unique=np.max(np.stack(v["partition_unique"]), axis=0),
            )
        )
    return SparseCoreStats(
        devices=devices,
        sparsecores_per_device=sparsecores_per_device,
        per_replica_batch_size=per_replica_batch_size,
        multi_hot_format=fmt,
        margin=float(margin),
        batches=batches,
        complete=complete,
        stacks=tuple(results),
    )
