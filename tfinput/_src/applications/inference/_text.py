"""Sampling CSV/TSV text as `tfinput.convert` reads it (`tfinput.formats.csv`), and typing each column from its
text: integers, floats or strings, with a note on the values that do not fit."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfinput._src.applications.inference._sample import SampledColumn
from tfinput._src.core.errors import DataError, SchemaError

__all__ = ["NON_NUMERIC_TOLERANCE", "sample_csv", "text_kind"]

#: A CSV field read as an integer (``260.0`` too: writers that went through floats).
_INT_TEXT = r"^[+-]?[0-9]+(\.0*)?$"
#: A CSV field read as a finite number.
_NUMBER_TEXT = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
#: Non-numeric values tolerated in a numeric CSV column: fewer than 1 in 1,000.
NON_NUMERIC_TOLERANCE = 0.001


def text_kind(text: Any, where: list[str]) -> tuple[str, np.ndarray, str]:
    """The type of a CSV column from its non-null text values: ``(dtype, values,
    note)``, values as int64, float64 or str numpy arrays. ``where[i]`` is the
    ``file:line`` of ``text[i]`` (for notes).

    A column is numeric when fewer than `NON_NUMERIC_TOLERANCE` of its values are not
    numbers (those are left out of the statistics and named in the note; the
    converter counts them as bad rows); integer text stays int64, and integers beyond
    int64 make the column a string column.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(text)
    if n == 0:
        return "string", np.array([], dtype=object), ""
    is_num = pc.match_substring_regex(text, _NUMBER_TEXT).to_numpy(zero_copy_only=False)
    bad = int(n - is_num.sum())
    note = ""
    if bad:
        first = int(np.flatnonzero(~is_num)[0])
        seen = (
            f"{bad:,} of {n:,} values non-numeric, e.g. {text[first].as_py()!r} at {where[first]}"
        )
        if bad >= NON_NUMERIC_TOLERANCE * n:
            note = f"{seen}: read as text" if bad < n / 2 else ""
            return "string", text.to_numpy(zero_copy_only=False), note
        note = (
            f"{seen}: numeric (under {NON_NUMERIC_TOLERANCE:.1%} non-numeric), those values "
            "left out here; convert counts them as bad rows (on_bad_rows)"
        )
        text = text.filter(pa.array(is_num))
    if pc.all(pc.match_substring_regex(text, _INT_TEXT)).as_py():
        return _integer_text(text, note)
    return "float32", pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False), note


def _integer_text(text: Any, note: str) -> tuple[str, np.ndarray, str]:
    """`text_kind` of integer text: int64, or strings when a value is beyond int64."""
    import pyarrow as pa
    import pyarrow.compute as pc

    digits = pc.replace_substring_regex(text, r"\.0*$", "")
    try:
        return "int64", pc.cast(digits, pa.int64()).to_numpy(zero_copy_only=False), note
    except pa.ArrowInvalid:
        longest = max(len(s.lstrip("+-")) for s in digits.to_pylist())
        big = (
            f"integers beyond int64 (up to {longest} digits): hashed as strings, never "
            "floats (float64 is exact only up to 2**53)"
        )
        return (
            "string",
            text.to_numpy(zero_copy_only=False),
            "; ".join(filter(None, [note, big])),
        )


def sample_csv(
    files: list[str], limit: int, *, lists: dict[str, str], layout_args: dict[str, Any]
) -> tuple[list[SampledColumn], int, dict[str, str]]:
    """Sample CSV/TSV files as `tfinput.convert` reads them (same layout sniffing, same
    reader): columns typed by `text_kind`, and notes per column.

    Args:
      files: The CSV files; all must have the columns of the first.
      limit: Rows to sample (blank lines are not rows).
      lists: ``{column: item delimiter}`` of multi-valued columns.
      layout_args: ``delimiter``, ``header`` and ``column_names`` for the layout sniffer.

    Returns:
      The columns, the rows sampled and ``{column: note}``.

    Raises:
      SchemaError: a file whose columns differ from the first's; DataError: a file
      with no valid row.
    """
    table, where, names = _read_rows(files, limit, lists=lists, layout_args=layout_args)
    rows = len(where)
    cols: list[SampledColumn] = []
    notes: dict[str, str] = {}
    if table is None:
        return cols, rows, notes
    for name in names:
        text = table.column(name).combine_chunks()
        if name in lists:
            col, note = _list_column(name, text, lists[name], where)
        else:
            col, note = _scalar_column(name, text, where)
        cols.append(col)
        if note:
            notes[name] = note
    return cols, rows, notes


def _read_rows(
    files: list[str], limit: int, *, lists: dict[str, str], layout_args: dict[str, Any]
) -> tuple[Any, list[str], list[str]]:
    """The first ``limit`` rows of ``files`` as an Arrow table of text (None if there
    are none), the ``file:line`` of each row, and the column names."""
    import pyarrow as pa

    from tfinput._src.core.formats.csv import CsvReader, sniff_layout

    def layout_of(path: str) -> Any:
        return sniff_layout(path, preset=None, list_delimiters=set(lists.values()), **layout_args)

    first = layout_of(files[0])
    batches: list[Any] = []
    where: list[str] = []
    for i, path in enumerate(files):
        layout = first if i == 0 else layout_of(path)
        if layout.names != first.names:
            raise SchemaError(
                f"{path}: columns {layout.names} differ from those of {files[0]}: {first.names}"
            )
        reader = CsvReader(path, layout, None)
        try:
            got, lines = _first_rows(reader, limit - len(where))
        finally:
            reader.close()
        batches += got
        where += [f"{path}:{line}" for line in lines]
        if not where and reader.invalid:
            line, reason = reader.invalid[0]
            raise DataError(f"{path}:{line}: {reason} (no valid row to infer a schema from)")
        if len(where) >= limit:
            break
    table = pa.Table.from_batches(batches, schema=reader.reader.schema) if batches else None
    return table, where, first.names


def _first_rows(reader: Any, limit: int) -> tuple[list[Any], list[int]]:
    """Up to ``limit`` rows of a `CsvReader`: record batches and the rows' line numbers."""
    import pyarrow as pa

    batches: list[Any] = []
    kept: list[int] = []
    for batch, lines in reader.batches():
        valid = np.zeros(batch.num_rows, dtype=bool)
        for col in batch.columns:
            valid |= col.is_valid().to_numpy(zero_copy_only=False)
        keep = np.flatnonzero(valid)[: limit - len(kept)]  # blank lines are not rows
        batches.append(batch.take(pa.array(keep)))
        kept += [int(lines[k]) for k in keep]
        if len(kept) >= limit:
            break
    return batches, kept


def _list_column(
    name: str, text: Any, delimiter: str, where: list[str]
) -> tuple[SampledColumn, str]:
    """A multi-valued column split on ``delimiter``; empty items are dropped."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = len(where)
    parts = pc.split_pattern(text.fill_null(""), pattern=delimiter)
    row_of = np.repeat(np.arange(rows), pc.list_value_length(parts).to_numpy())
    flat = pc.list_flatten(parts)
    keep = pc.not_equal(flat, "").to_numpy(zero_copy_only=False)
    flat, row_of = flat.filter(pa.array(keep)), row_of[keep]
    dtype, values, note = text_kind(flat, [where[r] for r in row_of])
    if dtype == "float32":  # float lists are not a CSV list kind: keep the text
        dtype, values = "string", flat.to_numpy(zero_copy_only=False)
    lengths = np.bincount(row_of, minlength=rows).astype(np.int64)
    return SampledColumn(name, dtype, True, [values], [lengths]), note


def _scalar_column(name: str, text: Any, where: list[str]) -> tuple[SampledColumn, str]:
    """A single-valued column; an empty field is a missing value."""
    present = text.is_valid().to_numpy(zero_copy_only=False)
    dtype, values, note = text_kind(text.drop_null(), [w for w, p in zip(where, present) if p])
    lengths = np.where(present, 1, -1).astype(np.int64)
    return SampledColumn(name, dtype, False, [values], [lengths]), note
