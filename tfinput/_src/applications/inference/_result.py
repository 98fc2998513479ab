"""What `tfinput.infer_schema` returns: the schema plus, column by column, what was
observed and decided."""

from __future__ import annotations

import dataclasses
from typing import Any

from tfinput._src.core.schema import Schema

__all__ = ["ColumnStats", "Inference"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColumnStats:
    """What sampling saw in one column."""

    name: str
    dtype: str  # "int64" | "float32" | "string"
    is_list: bool
    rows: int
    missing: int
    length_p50: float | None = None
    length_p90: float | None = None
    length_p99: float | None = None
    length_max: int | None = None
    min_value: float | None = None
    max_value: float | None = None
    distinct: int | None = None
    kind: str = ""  # the kind chosen
    note: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Inference:
    """The inferred schema plus the statistics it was inferred from."""

    schema: Schema
    columns: tuple[ColumnStats, ...]
    files: tuple[str, ...]
    sampled_rows: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the files, the rows sampled, every column's statistics and the
        schema (``Schema.to_dict``)."""
        return {
            "files": list(self.files),
            "sampled_rows": self.sampled_rows,
            "columns": [dataclasses.asdict(c) for c in self.columns],
            "schema": self.schema.to_dict(),
        }
