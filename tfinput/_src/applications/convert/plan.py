"""The plan: which input columns a schema reads, and how each is converted."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from tfinput._src.core.errors import SchemaError
from tfinput._src.core.schema import Categorical, Dense, MultiHot, Schema

__all__ = ["Column", "match_columns", "plan_columns"]


@dataclasses.dataclass
class Column:
    """How one input column is converted."""

    name: str
    kind: str  # float32, int64, string
    is_list: bool = False
    delimiter: str = "|"
    required: bool = False
    fixed_len: int | None = None
    finite: bool = False
    is_id: bool = False  # strict int ids: negative values are bad rows (modulo folds them)
    vocab: int | None = None  # int ids: upper bound checked
    feature: str = ""

    @property
    def arrow_type(self) -> Any:
        """The column's Arrow type in the output."""
        import pyarrow as pa

        base = {"float32": pa.float32(), "int64": pa.int64(), "string": pa.string()}[self.kind]
        return pa.list_(base) if self.is_list else base


def plan_columns(schema: Schema, lists: Mapping[str, str]) -> dict[str, Column]:
    """The input columns ``schema`` reads, in order, each with how it is converted.

    Args:
      schema: The output schema.
      lists: ``{column: item delimiter}`` of multi-valued CSV columns (default ``|``).

    Returns:
      ``{column name: Column}``; a column read by several features appears once.

    Raises:
      SchemaError: a column is read by features with different types.
    """
    tables = {t.name: t.vocabulary_size for t in schema.tables}
    plan: dict[str, Column] = {}
    for col in _columns(schema, tables, lists):
        old = plan.get(col.name)
        if old is not None and (old.kind, old.is_list) != (col.kind, col.is_list):
            raise SchemaError(
                f"convert: column {col.name!r} is used by features {old.feature!r} and "
                f"{col.feature!r} with different types"
            )
        if old is not None:
            old.required |= col.required
            continue
        plan[col.name] = col
    return plan


def match_columns(
    plan: Mapping[str, Column], *, names: list[str], names_from: str, path: str
) -> tuple[str, ...]:
    """Check that the input has every planned column.

    Args:
      plan: The planned columns.
      names: The input's columns.
      names_from: Where ``names`` come from, for the error message.
      path: The (first) input file, for the error message.

    Returns:
      The input columns the plan does not use (dropped from the output).

    Raises:
      SchemaError: a planned column is missing (with a close match, if any).
    """
    missing = [c for c in plan if c not in names]
    if missing:
        import difflib

        hints = {m: difflib.get_close_matches(m, names, n=1) for m in missing}
        hint = "; ".join(f"{m!r} -> did you mean {h[0]!r}?" for m, h in hints.items() if h)
        raise SchemaError(
            f"{path}: the schema needs column(s) {missing} which the input does not "
            f"have; columns ({names_from}): {names}" + (f"; {hint}" if hint else "")
        )
    return tuple(n for n in names if n not in plan)


def _columns(
    schema: Schema, tables: Mapping[str, int], lists: Mapping[str, str]
) -> Iterator[Column]:
    """One `Column` per column use, features first, then labels."""
    for f in schema.features:
        if isinstance(f, Dense):
            yield Column(
                name=f.source,
                kind=f.dtype,
                is_list=f.length is not None,
                delimiter=lists.get(f.source, "|"),
                fixed_len=f.length,
                finite=True,
                feature=f.name,
            )
        elif isinstance(f, Categorical):
            yield Column(
                name=f.source,
                kind=f.dtype,
                required=f.default is None,
                feature=f.name,
                **_id_checks(f, tables),
            )
        else:
            yield Column(
                name=f.source,
                kind=f.dtype,
                is_list=True,
                delimiter=lists.get(f.source, "|"),
                feature=f.name,
                **_id_checks(f, tables),
            )
            if f.weights:
                yield Column(
                    name=f.weights,
                    kind="float32",
                    is_list=True,
                    delimiter=lists.get(f.weights, "|"),
                    finite=True,
                    feature=f.name,
                )
    for lab in schema.labels:
        yield Column(
            name=lab.source,
            kind=lab.dtype,
            required=lab.default is None,
            finite=True,
            feature=lab.name,
        )


def _id_checks(f: Categorical | MultiHot, tables: Mapping[str, int]) -> dict[str, Any]:
    """``is_id`` and ``vocab`` of a categorical column: int ids with
    ``out_of_range="error"`` are checked against their table."""
    strict = f.dtype == "int64" and f.out_of_range == "error"
    return {"is_id": strict, "vocab": tables[f.table] if strict else None}
