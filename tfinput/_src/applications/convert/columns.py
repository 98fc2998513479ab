"""The columns of a conversion: the presets (the column names and schemas of known data
sets), the plan (which input columns a schema reads, and how each is converted), and the
conversion of their values to the output types, row by row checked: CSV text batches and
typed (Parquet, parsed TFRecord) blocks, each giving the good rows' table and the bad rows
with their reasons."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from tfinput._src.core.errors import ConfigError, DataError, SchemaError
from tfinput._src.core.formats.csv import KNOWN_COLUMNS
from tfinput._src.core.schema import Categorical, Dense, Label, MultiHot, Schema, Table

if TYPE_CHECKING:
    import pyarrow as pa


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
    def arrow_type(self) -> pa.DataType:
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


def _id_checks(
    f: Categorical | MultiHot, tables: Mapping[str, int]
) -> dict[str, bool | int | None]:
    """``is_id`` and ``vocab`` of a categorical column: int ids with
    ``out_of_range="error"`` are checked against their table."""
    strict = f.dtype == "int64" and f.out_of_range == "error"
    return {"is_id": strict, "vocab": tables[f.table] if strict else None}


PRESETS = ("criteo", "movielens")


def preset_schema(name: str, *, hash_buckets: int = 100_000, dim: int = 16) -> Schema:
    """The schema of a conversion preset (see the `tfinput.convert` docstring).

    Args:
      name: ``criteo`` or ``movielens``.
      hash_buckets: Rows of the tables of hashed high-cardinality string columns.
      dim: Embedding dimension of every table.

    Returns:
      The preset's schema.

    Raises:
      ConfigError: unknown preset.
    """
    if name == "criteo":
        features: list[Dense | Categorical | MultiHot] = [
            Dense(name=f"I{i}", dtype="int64", clip=(0.0, None), log1p=True) for i in range(1, 14)
        ]
        tables = [Table(name=f"C{i}", vocabulary_size=hash_buckets, dim=dim) for i in range(1, 27)]
        features += [
            Categorical(name=f"C{i}", table=f"C{i}", dtype="string", default="")
            for i in range(1, 27)
        ]
        return Schema(
            features=tuple(features),
            tables=tuple(tables),
            labels=(Label(name="label", dtype="int64"),),
        )
    if name == "movielens":
        tables = (
            Table(name="user_id", vocabulary_size=300_000, dim=dim),
            Table(name="movie_id", vocabulary_size=300_000, dim=dim),
            Table(name="title", vocabulary_size=hash_buckets, dim=dim),
            Table(name="genres", vocabulary_size=16_384, dim=dim),
            Table(name="gender", vocabulary_size=1_024, dim=dim),
            Table(name="age", vocabulary_size=100, dim=dim),
            Table(name="occupation", vocabulary_size=21, dim=dim),
            Table(name="zip", vocabulary_size=hash_buckets, dim=dim),
        )
        features = [
            Categorical(name="user_id", table="user_id"),
            Categorical(name="movie_id", table="movie_id"),
            Categorical(name="title", table="title", dtype="string", default=""),
            MultiHot(name="genres", table="genres", max_len=6, dtype="string"),
            Categorical(name="gender", table="gender", dtype="string", default=""),
            Categorical(name="age", table="age", default=0),
            Categorical(name="occupation", table="occupation", default=0),
            Categorical(name="zip", table="zip", dtype="string", default=""),
        ]
        return Schema(features=tuple(features), tables=tables, labels=(Label(name="rating"),))
    raise ConfigError(f"convert: unknown preset {name!r}; expected one of {list(PRESETS)}")


PRESET_COLUMNS: dict[str, list[str]] = KNOWN_COLUMNS
PRESET_LISTS: dict[str, dict[str, str]] = {"criteo": {}, "movielens": {"genres": "|"}}


def convert_batch(
    batch: pa.RecordBatch, plan: Mapping[str, Column]
) -> tuple[pa.Table, dict[int, str], int]:
    """Convert one CSV text batch.

    Args:
      batch: An Arrow record batch of text columns.
      plan: The planned columns.

    Returns:
      The good rows' table, bad rows (0-based within ``batch``) with reasons, and the
      number of blank lines.
    """
    import pyarrow as pa

    n = batch.num_rows
    valid = np.zeros(n, dtype=bool)
    for col in batch.columns:
        valid |= col.is_valid().to_numpy(zero_copy_only=False)
    blank = ~valid
    bad: dict[int, str] = {}
    arrays = {}
    for name, col in plan.items():
        arrays[name], col_bad = _convert_column(batch.column(name), col)
        for row, reason in col_bad.items():
            if not blank[row]:
                bad.setdefault(row, reason)
    keep = ~blank
    if bad:
        keep[list(bad)] = False
    table = pa.table(arrays)
    if not keep.all():
        table = table.filter(pa.array(keep))
    return table, bad, int(blank.sum())


def convert_typed(
    raw: pa.Table | pa.RecordBatch, plan: Mapping[str, Column], path: str
) -> tuple[pa.Table, dict[int, str]]:
    """Cast and check typed columns (Parquet or parsed TFRecord) like CSV text columns.

    Args:
      raw: An Arrow table or record batch holding the planned columns.
      plan: The planned columns.
      path: The input file, for error messages.

    Returns:
      The good rows' table, and bad rows (0-based within ``raw``) with reasons.

    Raises:
      DataError: a string column whose values cannot be read as text.
    """
    import pyarrow as pa

    bad: dict[int, str] = {}
    arrays = {name: _typed_column(raw.column(name), col, path, bad) for name, col in plan.items()}
    table = pa.table(arrays)
    if bad:
        keep = np.ones(raw.num_rows, dtype=bool)
        keep[list(bad)] = False
        table = table.filter(pa.array(keep))
    return table, bad


def is_list_type(t: pa.DataType) -> bool:
    """Whether an Arrow type is a list (plain, large or fixed-size)."""
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _convert_column(text: pa.Array, col: Column) -> tuple[pa.Array, dict[int, str]]:
    """One column of a batch (text) to its output type; bad rows with reasons."""
    import pyarrow as pa
    import pyarrow.compute as pc

    where = f"column {col.name!r}:"
    bad: dict[int, str] = {}
    if not col.is_list:
        return _convert_scalars(text, col, where, bad), bad
    parts = pc.split_pattern(text.fill_null(""), pattern=col.delimiter)
    lengths = pc.list_value_length(parts).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(parts)
    keep = pc.not_equal(flat, "").to_numpy(zero_copy_only=False)
    row_of = np.repeat(np.arange(len(text)), lengths)
    flat = flat.filter(pa.array(keep))
    lengths = np.bincount(row_of[keep], minlength=len(text)).astype(np.int32)
    return _convert_lists(flat, lengths, col, where, bad), bad


def _typed_column(
    arr: pa.Array | pa.ChunkedArray, col: Column, path: str, bad: dict[int, str]
) -> pa.Array:
    """One typed column to its output type; bad rows go to ``bad``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    where = f"column {col.name!r}:"
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not col.is_list and is_list_type(arr.type):  # TFRecord: several values for a scalar key
        lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
        for p in np.flatnonzero(lengths > 1).tolist():
            bad.setdefault(p, f"{where} expected one value, found {int(lengths[p])}")
        arr = pc.list_element(pc.if_else(pa.array(lengths == 1), arr, pa.scalar(None, arr.type)), 0)
    if not col.is_list:
        return _convert_scalars(_as_text_if_string(arr, col, path), col, where, bad)
    null_rows = arr.is_null().to_numpy(zero_copy_only=False)
    lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    flat = _as_text_if_string(pc.list_flatten(arr), col, path)
    return _convert_lists(flat, lengths, col, where, bad, null_rows=null_rows)


def _convert_scalars(values: pa.Array, col: Column, where: str, bad: dict[int, str]) -> pa.Array:
    """A scalar column to its output type; bad values and missing required values mark
    their rows in ``bad``."""
    out, value_bad = _convert_values(values, col, f"{where} value")
    for p, reason in value_bad.items():
        bad.setdefault(p, reason)
    if col.required and values.null_count:
        nulls = np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))
        for p in nulls.tolist():
            bad.setdefault(p, f"{where} missing value, and feature {col.feature!r} has no default")
    return out


def _convert_lists(
    flat: pa.Array,
    lengths: np.ndarray,
    col: Column,
    where: str,
    bad: dict[int, str],
    *,
    null_rows: np.ndarray | None = None,
) -> pa.ListArray:
    """A list column from its flat items (``lengths`` per row, ``null_rows`` missing);
    bad or null items and wrong lengths mark their rows in ``bad``."""
    import pyarrow as pa

    row_of = np.repeat(np.arange(len(lengths)), lengths)
    typed, value_bad = _convert_values(flat, col, f"{where} item")
    for p, reason in value_bad.items():
        bad.setdefault(int(row_of[p]), reason)
    if typed.null_count:
        for p in np.flatnonzero(typed.is_null().to_numpy(zero_copy_only=False)).tolist():
            bad.setdefault(int(row_of[p]), f"{where} null item in a list")
    if col.fixed_len is not None:
        wrong = lengths != col.fixed_len
        if null_rows is not None:
            wrong &= ~null_rows
        for p in np.flatnonzero(wrong).tolist():
            bad.setdefault(p, f"{where} expected {col.fixed_len} values, found {int(lengths[p])}")
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    mask = pa.array(null_rows) if null_rows is not None and null_rows.any() else None
    return pa.ListArray.from_arrays(offsets, typed, mask=mask)


def _cast_int(arr: pa.Array) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.cast(arr, pa.int64())
    except pa.ArrowInvalid:
        return pc.cast(pc.cast(arr, pa.float64()), pa.int64())  # "260.0"; 260.5 raises


def _caster(kind: str) -> Callable[[pa.Array], pa.Array]:
    import pyarrow as pa
    import pyarrow.compute as pc

    if kind == "int64":
        return _cast_int
    if kind == "float32":
        return lambda a: pc.cast(a, pa.float32())
    return lambda a: a


def _bad_positions(arr: pa.Array, fn: Callable[[pa.Array], pa.Array], base: int = 0) -> list[int]:
    """Positions where ``fn`` fails, found by bisection (a few casts per bad value)."""
    import pyarrow as pa

    try:
        fn(arr)
        return []
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if len(arr) == 1:
            return [base]
    half = len(arr) // 2
    return _bad_positions(arr.slice(0, half), fn, base) + _bad_positions(
        arr.slice(half), fn, base + half
    )


def _convert_values(
    values: pa.Array, col: Column, kind_name: str
) -> tuple[pa.Array, dict[int, str]]:
    """Cast a text array; returns the typed array (bad entries null) and the reasons."""
    import pyarrow as pa
    import pyarrow.compute as pc

    fn = _caster(col.kind)
    bad: dict[int, str] = {}
    try:
        out = fn(values)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        positions = _bad_positions(values, fn)
        for p in positions:
            bad[p] = f"{kind_name} {values[p].as_py()!r} is not a valid {col.kind}"
        mask = np.zeros(len(values), dtype=bool)
        mask[positions] = True
        out = fn(pc.if_else(pa.array(mask), pa.scalar(None, values.type), values))
    if col.finite and col.kind == "float32" and len(out):
        finite = pc.is_finite(out).fill_null(True).to_numpy(zero_copy_only=False)
        for p in np.flatnonzero(~finite).tolist():
            bad.setdefault(p, f"{kind_name} {values[p].as_py()!r} is not a finite number")
    if col.is_id and len(out):
        ints = out.fill_null(0).to_numpy(zero_copy_only=False)
        for p in np.flatnonzero(ints < 0).tolist():
            bad.setdefault(p, f"{kind_name} {int(ints[p])} is a negative id")
        if col.vocab is not None:
            for p in np.flatnonzero(ints >= col.vocab).tolist():
                bad.setdefault(
                    p,
                    f"{kind_name} {int(ints[p])} is out of range: feature {col.feature!r} "
                    f"expects ids in [0, {col.vocab}) (enlarge its table or set "
                    "out_of_range='modulo' in the schema)",
                )
    return out, bad


def _as_text_if_string(arr: pa.Array, col: Column, path: str) -> pa.Array:
    """String columns as Arrow strings (binary must be UTF-8); others unchanged."""
    import pyarrow as pa

    if col.kind != "string":
        return arr
    if pa.types.is_string(arr.type):
        return arr
    if pa.types.is_null(arr.type):
        return arr.cast(pa.string())
    try:
        return arr.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise DataError(
            f"{path}: column {col.name!r}: values of type {arr.type} cannot be stored as text "
            f"({e}); the schema declares dtype string"
        ) from e
