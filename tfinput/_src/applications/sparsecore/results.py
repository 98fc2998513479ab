"""What `tfinput.sparsecore.sparsecore_stats` reports: limits, overflows, per-stack
and overall statistics. `tfinput.sparsecore` is the public API."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tfinput._src.applications.sparsecore.stacks import (
    ALIGNMENT,
    COO_ENTRY_BYTES,
    Stack,
    embedding_module,
    round_up,
)
from tfinput._src.core.errors import ConfigError


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
            return max(ALIGNMENT, round_up(math.ceil(v * (1 + margin)), ALIGNMENT))

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
      multi_hot_format: The multi-hot format read (the counts are the same in each:
        a list's padding, weight 0, is not fed, so not counted).
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

    def input_stats(self) -> Any:
        """The statistics as jax-tpu-embedding's ``SparseDenseMatmulInputStats``, the form
        its FDO clients record and load: per stack, the maxima over the batches scanned
        (per partition: ``partition_ids`` and ``partition_unique``; the buffer, per
        SparseCore), without the margin (`SparseCorePlan.with_limits` adds one).

        Raises:
          ConfigError: jax-tpu-embedding is missing.
        """
        embedding = embedding_module()
        return embedding.SparseDenseMatmulInputStats(
            max_ids_per_partition={
                s.stack.name: np.asarray(s.partition_ids, np.int64) for s in self.stacks
            },
            max_unique_ids_per_partition={
                s.stack.name: np.asarray(s.partition_unique, np.int64) for s in self.stacks
            },
            required_buffer_size_per_sc={
                s.stack.name: np.full(self.sparsecores, s.observed.required_buffer_size_per_sc)
                for s in self.stacks
            },
            id_drop_counters={s.stack.name: 0 for s in self.stacks},
        )

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
        entries = round_up(limit, ALIGNMENT) * self.sparsecores_per_device * self.sparsecores
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
