"""What a SparseCore feed measured per table (`TableUsage`, `SparseCoreFeedStats`).
`tfinput.integrations.sparsecore_feed` is the public API."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["SparseCoreFeedStats", "TableUsage", "used_entries"]


@dataclasses.dataclass
class TableUsage:
    """One stacked table's COO buffers over the batches fed so far.

    Attributes:
      batches: Batches preprocessed.
      buffer_entries: Entries of the table's static COO buffers, summed over batches.
      used_entries: Entries that carry an id (the rest is padding).
      dropped_ids: Ids dropped because a partition overflowed (``allow_id_dropping``).
      max_ids_per_partition: The most ids one partition needed in one batch.
      max_unique_ids_per_partition: The most distinct ids one partition needed.
    """

    batches: int = 0
    buffer_entries: int = 0
    used_entries: int = 0
    dropped_ids: int = 0
    max_ids_per_partition: int = 0
    max_unique_ids_per_partition: int = 0

    @property
    def usage(self) -> float:
        """The share of the buffers that carried ids."""
        return self.used_entries / self.buffer_entries if self.buffer_entries else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "usage": round(self.usage, 4)}


@dataclasses.dataclass
class SparseCoreFeedStats:
    """What a `SparseCoreFeed` did.

    Attributes:
      batches: Batches handed to the training loop.
      tables: `TableUsage` per stacked table.
      preprocess_seconds: Wall time of the preprocessing calls, summed over workers.
      wait_seconds: Time the training loop waited in ``next()`` for a ready batch.
    """

    batches: int = 0
    tables: dict[str, TableUsage] = dataclasses.field(default_factory=dict)
    preprocess_seconds: float = 0.0
    wait_seconds: float = 0.0

    @property
    def dropped_ids(self) -> int:
        """Ids dropped over every table."""
        return sum(t.dropped_ids for t in self.tables.values())

    def add(self, other: SparseCoreFeedStats) -> None:
        """Add another feed's statistics to these (maxima: the larger)."""
        self.batches += other.batches
        self.preprocess_seconds += other.preprocess_seconds
        self.wait_seconds += other.wait_seconds
        for name, t in other.tables.items():
            mine = self.tables.setdefault(name, TableUsage())
            for field in ("batches", "buffer_entries", "used_entries", "dropped_ids"):
                setattr(mine, field, getattr(mine, field) + getattr(t, field))
            for field in ("max_ids_per_partition", "max_unique_ids_per_partition"):
                setattr(mine, field, max(getattr(mine, field), getattr(t, field)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "preprocess_seconds": round(self.preprocess_seconds, 4),
            "wait_seconds": round(self.wait_seconds, 4),
            "dropped_ids": self.dropped_ids,
            "tables": {name: t.to_dict() for name, t in sorted(self.tables.items())},
        }


def used_entries(row_pointers: np.ndarray, buffer_size: int, partitions: int) -> int:
    """Ids in one table's flat COO buffer: per SparseCore, its partitions' row pointers
    are running ends, and each partition starts at the previous end rounded up to 8."""
    ends = np.asarray(row_pointers, dtype=np.int64).reshape(-1)
    if ends.size == 0:
        return 0
    per_sc = ends.reshape(-1, partitions) if ends.size % partitions == 0 else ends[None, :]
    starts = np.zeros_like(per_sc)
    starts[:, 1:] = -(-per_sc[:, :-1] // 8) * 8  # the previous end rounded up to 8
    return min(int(np.clip(per_sc - starts, 0, None).sum()), buffer_size)
