"""CSV/TSV to sharded Parquet or TFRecord, streaming: ``tfinput convert``.

    from tfinput.convert import convert
    result = convert(["day_0.tsv"], "data/criteo", to="parquet", preset="criteo")
    pipeline = tfinput.parquet(result.paths, result.schema)

How it reads:

- **Streaming, bounded memory.** Each input is read with pyarrow's streaming CSV
  reader (`pyarrow.csv.open_csv`) in blocks of `BLOCK_SIZE` bytes, single-threaded so
  that rows arrive in file order, and every column is given an explicit type (text),
  so nothing is inferred from the first block and nothing is held beyond one block
  plus one output row group. Inputs may be larger than RAM. ``.gz`` and ``.bz2``
  inputs are decompressed on the fly.
- **Layout.** The delimiter is sniffed from the first lines unless given (tab, comma,
  semicolon or pipe, whichever splits the first lines into the same number of fields,
  respecting quotes). ``header="auto"`` takes the first line as a header when all its
  fields are non-numeric and a later line holds a number (or, in an all-text file,
  when its fields look like names that do not recur in their columns); pass
  ``header=True/False`` when a file is ambiguous. Without a header, names
  come from ``column_names``, the preset (Criteo's raw TSV has none: ``label, I1..I13,
  C1..C26``) or default to ``f0, f1, ...``.
- **Values.** Fields are text first and converted by tfinput, column by column, to the
  schema's types; an empty field is a missing value (``null`` in Parquet, an absent
  key in a tf.Example) which the pipeline fills with the feature's default. Integer
  columns also accept integral floats (``260.0``), as CSV writers that went through
  floats produce. A multi-valued column (``Comedy|Drama``) is split on its delimiter
  (``list_columns``); empty items are dropped and an empty field is an empty list.
  Quoted fields may contain the delimiter but not a line break (each record must be
  one line, which is what keeps line numbers exact).

Bad rows: a row with the wrong number of fields (a header mismatch, a truncated last
line), a value that does not parse as its column's type, a NaN or infinite dense value,
a missing value where the schema has no default, or an integer id outside its table.
With ``on_bad_rows="error"`` (the default) the first one raises `DataError` naming
the file, the line number, the column and the value. With ``"skip"`` bad rows are
left out and counted; the result lists the first `MAX_REPORTED` with their reasons.
Blank lines are ignored (counted as ``blank_lines``).

Presets (table sizes are only schema metadata: string ids are stored as text and
hashed by the pipeline, so a table can be resized without converting again):

- ``criteo``: ``label`` (int64); ``I1..I13`` dense counts stored as int64, clipped to
  ``[0, inf)`` then ``log1p`` (Criteo has -1s), missing = 0; ``C1..C26`` 8-hex-digit
  strings hashed into ``hash_buckets`` rows each (default 100,000: 26 tables of dim 16
  take 166 MB; the full data set has up to ~10M distinct values per column, and MLPerf
  DLRM caps tables at 40M), missing = ``""`` (its own bucket).
- ``movielens`` (the MovieLens-1M ``ratings + users + movies`` join): ``rating`` label
  (float32); ``user_id`` and ``movie_id`` int64 ids (tables of 300,000 rows, enough for
  every MovieLens release up to 32M); ``genres`` a string multi-hot list split on ``|``
  (``max_len`` 6, 16,384 buckets, so the 18 genres collide with probability < 1%);
  ``gender`` (1,024 buckets), ``zip`` and ``title`` strings (``hash_buckets``); ``age``
  (< 100) and ``occupation`` (0-20) int ids. ``timestamp`` is not a feature and is
  dropped (split train and test by time before converting).

Without a preset or schema, the schema is inferred from the first ``infer_rows`` rows
by `tfinput.infer_schema`, the engine behind ``tfinput schema infer``, so both give the
same schema for the same file (its module docstring has the rules: integers stay int64
and become `Categorical` ids when named like ids or beyond 2**53, text becomes hashed
string `Categorical`, large non-negative counts get ``clip`` + ``log1p``, a column with
fewer than 0.1% non-numeric values stays numeric, ...). A later value that does not fit
the inferred type is a bad row: pass a schema (edit the written ``schema.json``) to
decide otherwise.

Unbalanced quotes: a line that opens a quoted field and does not close it is a bad row
on its own (reason ``unbalanced quote``); it cannot swallow the lines after it.
Unreadable inputs (a truncated ``.gz``, a binary or non-UTF-8 file) raise `DataError`
naming the file; nothing is written.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import glob
import io
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tfinput.errors import ConfigError, DataError, SchemaError, SourceError
from tfinput.inference import LABEL_NAMES
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema, Table

__all__ = [
    "BLOCK_SIZE",
    "LABEL_NAMES",
    "MAX_REPORTED",
    "PRESETS",
    "BadRow",
    "ConvertResult",
    "convert",
    "preset_schema",
]

PRESETS = ("criteo", "movielens")
#: Bytes of CSV parsed at a time (a record must fit in one block).
BLOCK_SIZE = 4 << 20
#: Bad rows listed in a `ConvertResult` (all are counted).
MAX_REPORTED = 20
FORMATS = ("parquet", "tfrecord", "columnar")
INPUT_FORMATS = ("auto", "csv", "parquet", "tfrecord")
#: Rows read at a time from Parquet and TFRecord inputs.
TYPED_BLOCK_ROWS = 65_536

_CRITEO_COLUMNS = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
_MOVIELENS_COLUMNS = [
    "user_id",
    "movie_id",
    "rating",
    "timestamp",
    "title",
    "genres",
    "gender",
    "age",
    "occupation",
    "zip",
]
_DELIMITERS = ("\t", ",", ";", "|")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_ .:/-]*$")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


# ------------------------------------------------------------------ results
@dataclasses.dataclass(frozen=True, kw_only=True)
class BadRow:
    """A row that was not converted.

    Attributes:
      path: Input file.
      line: 1-based line number (CSV) or row number (Parquet, TFRecord) in that file.
      reason: What is wrong (column, value, expectation).
      unit: ``line`` (CSV/TSV inputs) or ``row`` (Parquet, TFRecord inputs).
    """

    path: str
    line: int
    reason: str
    unit: str = "line"

    def __str__(self) -> str:
        if self.unit == "line":
            return f"{self.path}:{self.line}: {self.reason}"
        return f"{self.path}: {self.unit} {self.line}: {self.reason}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvertResult:
    """What `convert` wrote.

    Attributes:
      paths: Output files, in order.
      schema: The schema of the output (given, preset or inferred).
      schema_path: Where the schema JSON was written (next to the data).
      format: ``parquet``, ``tfrecord`` or ``columnar``.
      rows: Rows written.
      skipped: Bad rows left out (``on_bad_rows="skip"``).
      bad_rows: The first `MAX_REPORTED` bad rows, with line numbers and reasons.
      blank_lines: Blank lines ignored.
      dropped_columns: Input columns the schema does not use (not written).
      delimiter: The field delimiter used (CSV inputs; empty otherwise).
      header: Whether the first line of the first input was a header.
      input_format: ``csv``, ``parquet`` or ``tfrecord``.
      manifest_path: The columnar ``manifest.json`` (``columnar`` output only).
    """

    paths: tuple[str, ...]
    schema: Schema
    schema_path: str
    format: str
    rows: int
    skipped: int = 0
    bad_rows: tuple[BadRow, ...] = ()
    blank_lines: int = 0
    dropped_columns: tuple[str, ...] = ()
    delimiter: str = ","
    header: bool = False
    input_format: str = "csv"
    manifest_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "format": self.format,
            "rows": self.rows,
            "files": len(self.paths),
            "paths": list(self.paths),
            "schema_path": self.schema_path,
            "skipped": self.skipped,
            "bad_rows": [dataclasses.asdict(b) for b in self.bad_rows],
            "blank_lines": self.blank_lines,
            "dropped_columns": list(self.dropped_columns),
            "delimiter": self.delimiter,
            "header": self.header,
            "input_format": self.input_format,
            "manifest_path": self.manifest_path,
        }


# ------------------------------------------------------------------ presets
def preset_schema(name: str, *, hash_buckets: int = 100_000, dim: int = 16) -> Schema:
    """The schema of a conversion preset (see the module docstring).

    Args:
      name: ``criteo`` or ``movielens``.
      hash_buckets: Rows of the tables of hashed high-cardinality string columns.
      dim: Embedding dimension of every table.

    Raises:
      ConfigError: unknown preset.
    """
    if name == "criteo":
        features: list[Any] = [
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


_PRESET_COLUMNS = {"criteo": _CRITEO_COLUMNS, "movielens": _MOVIELENS_COLUMNS}
_PRESET_LISTS = {"criteo": {}, "movielens": {"genres": "|"}}


# ---------------------------------------------------------------- sniffing
def _open_binary(path: str) -> Any:
    import pyarrow as pa

    try:
        return pa.input_stream(path, compression="detect")
    except (OSError, pa.ArrowException) as e:
        raise SourceError(f"cannot open input {path!r}: {e}") from e


def _first_lines(path: str, n: int = 50) -> list[str]:
    import pyarrow as pa

    try:
        with _open_binary(path) as f:
            head = f.read(256 << 10)
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"{path}: cannot read ({e}); is the file truncated or corrupt?") from e
    _check_text(path, head)
    lines = head.decode("utf-8", errors="replace").splitlines()
    if len(head) == 256 << 10 and lines:
        lines = lines[:-1]  # the last one may be cut
    return [ln for ln in lines[:n] if ln.strip()]


def _check_text(path: str, head: bytes) -> None:
    """Raise `DataError` if the first bytes of an input are not UTF-8 text."""
    nul = head.find(b"\0")
    if nul >= 0:
        raise DataError(
            f"{path}: not a text CSV/TSV file: NUL byte at offset {nul} (binary data); "
            "expected UTF-8 text (Parquet and TFRecord inputs need a .parquet / .tfrecord "
            "name or input_format)"
        )
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3:  # not just a character cut at the end of the sample
            raise DataError(
                f"{path}: not a UTF-8 text CSV/TSV file: byte {head[e.start]:#04x} at offset "
                f"{e.start} is not valid UTF-8; expected UTF-8 text (re-encode the file, "
                "for example with iconv)"
            ) from e


def _unclosed_quote(line: str, delimiter: str, quote: str = '"') -> bool:
    """Whether a field of ``line`` opens a quote that the line does not close.

    Follows the CSV parser: a quote is special only at the start of a field, ``""``
    inside a quoted field is a literal quote, and after the closing quote the field
    goes on unquoted (where quotes are literal) up to the next delimiter.
    """
    i, n = 0, len(line)
    while i < n:
        if line[i] == quote:
            j = i + 1
            while True:
                j = line.find(quote, j)
                if j < 0:
                    return True
                if j + 1 < n and line[j + 1] == quote:
                    j += 2
                    continue
                break
            i = j + 1
        k = line.find(delimiter, i)
        if k < 0:
            return False
        i = k + 1
    return False


#: A quoted span: a quote, then anything but a quote or a line break, or a doubled
#: quote, up to the closing quote.
_QUOTED_SPAN = re.compile(rb'"[^"\n]*(?:""[^"\n]*)*"')


class _QuoteGuard(io.RawIOBase):
    """The text of a CSV file, checked line by line before the CSV parser sees it.

    The parser lets a quoted field run over line breaks, so one unbalanced quote would
    swallow every line up to the next quote or the end of the block as one record.
    Records must be one line, so a line that opens a quote it does not close is
    replaced by a line the parser rejects (``fields + 1`` empty fields) and recorded
    in `bad` (line number -> reason): it alone is a bad row, line numbers stay exact.
    Blocks without a quote character pass through untouched.
    """

    def __init__(self, source: Any, *, delimiter: str, fields: int):
        self.source = source
        self.delimiter = delimiter
        self.replacement = (delimiter * fields).encode()
        self.bad: dict[int, str] = {}
        self.delimiter_byte = ord(delimiter) if len(delimiter.encode()) == 1 else None
        self.line = 1  # number of the first line of the next chunk checked
        self.pending = b""  # a line not yet complete
        self.out = b""
        self.pos = 0
        self.eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while self.pos >= len(self.out) and not self.eof:
            self._fill()
        n = min(len(b), len(self.out) - self.pos)
        b[:n] = memoryview(self.out)[self.pos : self.pos + n]
        self.pos += n
        return n

    def _fill(self) -> None:
        chunk = self.source.read(1 << 20)
        if not chunk:
            self.eof = True
            data, self.pending = self.pending, b""
        else:
            data = self.pending + bytes(chunk)
            cut = data.rfind(b"\n") + 1
            data, self.pending = data[:cut], data[cut:]
        self.out, self.pos = self._check(data), 0

    def _suspects(self, data: bytes) -> list[int]:
        """Indices of the lines of ``data`` that may open a quote they do not close.

        One regex pass replaces every ``"..."`` span (``""`` inside) by a NUL byte; a
        line is certainly balanced when no quote is left and each span starts at a
        field start and ends at a field end. The others (few in well-formed files) are
        checked exactly by `_unclosed_quote`.
        """
        if self.delimiter_byte is None:  # a multi-byte delimiter: check every quote line
            return [i for i, ln in enumerate(data.split(b"\n")) if b'"' in ln]
        rest = np.frombuffer(_QUOTED_SPAN.sub(b"\0", data), dtype=np.uint8)
        breaks = np.flatnonzero(rest == 10)
        marks = np.flatnonzero(rest == 0)
        before = np.where(marks > 0, rest[np.maximum(marks - 1, 0)], 10)
        after = np.where(marks + 1 < rest.size, rest[np.minimum(marks + 1, rest.size - 1)], 10)
        fields = (self.delimiter_byte, 10)
        misplaced = ~np.isin(before, fields) | ~np.isin(after, (*fields, 13))
        odd = np.concatenate([np.flatnonzero(rest == 34), marks[misplaced]])
        return np.unique(np.searchsorted(breaks, odd)).tolist()

    def _check(self, data: bytes) -> bytes:
        first, self.line = self.line, self.line + data.count(b"\n")
        if b'"' not in data:
            return data
        suspects = self._suspects(data)
        if not suspects:
            return data
        lines = data.split(b"\n")
        for i in suspects:
            text = lines[i].decode("utf-8", errors="replace").rstrip("\r")
            if _unclosed_quote(text, self.delimiter):
                self.bad[first + i] = (
                    "unbalanced quote: a quoted field is not closed on this line (records "
                    f"must be one line; the line alone is left out): {text[:80]!r}"
                )
                lines[i] = self.replacement
        return b"\n".join(lines)


def _split(line: str, delimiter: str) -> list[str]:
    return next(csv.reader([line], delimiter=delimiter), [])


def _sniff_delimiter(lines: list[str], exclude: Iterable[str]) -> str:
    best, best_fields = None, 1
    for d in _DELIMITERS:
        if d in exclude:
            continue
        counts = {len(_split(ln, d)) for ln in lines[:20]}
        if len(counts) == 1 and (fields := counts.pop()) > best_fields:
            best, best_fields = d, fields
    if best is None:
        for d in _DELIMITERS:  # ragged lines (a truncated line): most fields on line 1
            if d not in exclude and lines and len(_split(lines[0], d)) > best_fields:
                best, best_fields = d, len(_split(lines[0], d))
    return best or ","


def _is_number(text: str) -> bool:
    t = text.strip()
    return bool(_NUMBER.match(t)) or t.lower() in ("nan", "inf", "-inf", "+inf")


def _sniff_header(lines: list[str], delimiter: str) -> bool:
    if not lines:
        return False
    first = _split(lines[0], delimiter)
    if not first or any(not f.strip() or _is_number(f) for f in first):
        return False
    if len(lines) == 1:
        return True
    rows = [_split(ln, delimiter) for ln in lines[1:]]
    if any(_is_number(f) for row in rows for f in row):
        return True
    # All text: a header names its columns, so its values do not recur below them.
    below = [{row[i] for row in rows if i < len(row)} for i in range(len(first))]
    return all(_IDENTIFIER.match(f) and f not in seen for f, seen in zip(first, below, strict=True))


# --------------------------------------------------------------- the plan
@dataclasses.dataclass
class _Column:
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
        import pyarrow as pa

        base = {"float32": pa.float32(), "int64": pa.int64(), "string": pa.string()}[self.kind]
        return pa.list_(base) if self.is_list else base


def _plan(schema: Schema, lists: Mapping[str, str]) -> dict[str, _Column]:
    tables = {t.name: t for t in schema.tables}
    plan: dict[str, _Column] = {}

    def add(col: _Column) -> None:
        old = plan.get(col.name)
        if old is not None and (old.kind, old.is_list) != (col.kind, col.is_list):
            raise SchemaError(
                f"convert: column {col.name!r} is used by features {old.feature!r} and "
                f"{col.feature!r} with different types"
            )
        if old is not None:
            old.required |= col.required
            return
        plan[col.name] = col

    for f in schema.features:
        if isinstance(f, Dense):
            add(
                _Column(
                    name=f.source,
                    kind=f.dtype,
                    is_list=f.length is not None,
                    delimiter=lists.get(f.source, "|"),
                    fixed_len=f.length,
                    finite=True,
                    feature=f.name,
                )
            )
        elif isinstance(f, Categorical):
            vocab = None
            if f.dtype == "int64" and f.out_of_range == "error":
                vocab = tables[f.table].vocabulary_size
            add(
                _Column(
                    name=f.source,
                    kind=f.dtype,
                    required=f.default is None,
                    is_id=f.dtype == "int64" and f.out_of_range == "error",
                    vocab=vocab,
                    feature=f.name,
                )
            )
        else:
            vocab = None
            if f.dtype == "int64" and f.out_of_range == "error":
                vocab = tables[f.table].vocabulary_size
            add(
                _Column(
                    name=f.source,
                    kind=f.dtype,
                    is_list=True,
                    is_id=f.dtype == "int64" and f.out_of_range == "error",
                    delimiter=lists.get(f.source, "|"),
                    vocab=vocab,
                    feature=f.name,
                )
            )
            if f.weights:
                add(
                    _Column(
                        name=f.weights,
                        kind="float32",
                        is_list=True,
                        delimiter=lists.get(f.weights, "|"),
                        finite=True,
                        feature=f.name,
                    )
                )
    for lab in schema.labels:
        add(
            _Column(
                name=lab.source,
                kind=lab.dtype,
                required=lab.default is None,
                finite=True,
                feature=lab.name,
            )
        )
    return plan


# ------------------------------------------------------------- conversion
def _cast_int(arr: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.cast(arr, pa.int64())
    except pa.ArrowInvalid:
        return pc.cast(pc.cast(arr, pa.float64()), pa.int64())  # "260.0"; 260.5 raises


def _caster(kind: str) -> Callable[[Any], Any]:
    import pyarrow as pa
    import pyarrow.compute as pc

    if kind == "int64":
        return _cast_int
    if kind == "float32":
        return lambda a: pc.cast(a, pa.float32())
    return lambda a: a


def _bad_positions(arr: Any, fn: Callable[[Any], Any], base: int = 0) -> list[int]:
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


def _convert_values(values: Any, col: _Column, kind_name: str) -> tuple[Any, dict[int, str]]:
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


def _convert_column(text: Any, col: _Column) -> tuple[Any, dict[int, str]]:
    """One column of a batch (text) to its output type; bad rows with reasons."""
    import pyarrow as pa
    import pyarrow.compute as pc

    where = f"column {col.name!r}:"
    bad: dict[int, str] = {}
    if not col.is_list:
        out, bad = _convert_values(text, col, f"{where} value")
        if col.required and text.null_count:
            nulls = np.flatnonzero(text.is_null().to_numpy(zero_copy_only=False))
            for p in nulls.tolist():
                bad.setdefault(
                    p, f"{where} missing value, and feature {col.feature!r} has no default"
                )
        return out, bad
    parts = pc.split_pattern(text.fill_null(""), pattern=col.delimiter)
    lengths = pc.list_value_length(parts).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(parts)
    keep = pc.not_equal(flat, "").to_numpy(zero_copy_only=False)
    row_of = np.repeat(np.arange(len(text)), lengths)
    flat = flat.filter(pa.array(keep))
    row_of = row_of[keep]
    lengths = np.bincount(row_of, minlength=len(text)).astype(np.int32)
    typed, value_bad = _convert_values(flat, col, f"{where} item")
    for p, reason in value_bad.items():
        bad.setdefault(int(row_of[p]), reason)
    if col.fixed_len is not None:
        for p in np.flatnonzero(lengths != col.fixed_len).tolist():
            bad.setdefault(p, f"{where} expected {col.fixed_len} values, found {int(lengths[p])}")
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    return pa.ListArray.from_arrays(offsets, typed), bad


# ---------------------------------------------------------------- writers
class _Shards:
    """Output files of at most ``rows_per_file`` rows, renamed ``-of-N`` at the end."""

    def __init__(self, out_dir: Path, fmt: str, rows_per_file: int, plan: dict[str, _Column]):
        self.out_dir, self.fmt, self.rows_per_file, self.plan = out_dir, fmt, rows_per_file, plan
        self.paths: list[str] = []
        self.writer: Any = None
        self.in_file = 0
        self.pending: list[Any] = []
        self.pending_rows = 0
        # Rows buffered before writing: one Parquet row group, or one encoding batch.
        self.row_group = min(rows_per_file, 64 * 1024 if fmt == "parquet" else 16 * 1024)

    def write(self, table: Any) -> None:
        while table.num_rows:
            if self.writer is None or self.in_file >= self.rows_per_file:
                self._roll()
            take = min(table.num_rows, self.rows_per_file - self.in_file)
            self.pending.append(table.slice(0, take))
            self.pending_rows += take
            self.in_file += take
            table = table.slice(take)
            if self.pending_rows >= self.row_group or self.in_file >= self.rows_per_file:
                self._flush()

    def _roll(self) -> None:
        self._flush()
        if self.writer is not None:
            self.writer.close()
        ext = ".parquet" if self.fmt == "parquet" else ".tfrecord"
        path = str(self.out_dir / f"part-{len(self.paths):05d}{ext}")
        self.paths.append(path)
        if self.fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            arrow_schema = pa.schema([(c.name, c.arrow_type) for c in self.plan.values()])
            self.writer = pq.ParquetWriter(path, arrow_schema)
        else:
            import tensorflow as tf

            self.writer = tf.io.TFRecordWriter(path)
        self.in_file = 0

    def _flush(self) -> None:
        if not self.pending:
            return
        import pyarrow as pa

        table = pa.concat_tables(self.pending)
        self.pending, self.pending_rows = [], 0
        if self.fmt == "parquet":
            self.writer.write_table(table, row_group_size=table.num_rows)
        else:
            for record in _examples(table, self.plan):
                self.writer.write(record)

    def abort(self) -> None:
        """Close and delete every file written so far (after an error)."""
        self.pending = []
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        for path in self.paths:
            if os.path.exists(path):
                os.unlink(path)
        self.paths = []

    def close(self) -> list[str]:
        self._flush()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        n = len(self.paths)
        final = []
        for path in self.paths:
            stem, ext = path.rsplit(".", 1)
            new = f"{stem}-of-{n:05d}.{ext}"
            os.replace(path, new)
            final.append(new)
        return final


class _ColumnarShards:
    """`_Shards` for the columnar format: a `tfinput.columnar_records.ColumnarWriter`."""

    def __init__(self, out_dir: Path, schema: Schema, rows_per_file: int, chunk_rows: int):
        from tfinput.columnar_records import ColumnarWriter

        self.writer = ColumnarWriter(
            out_dir, schema, chunk_rows=chunk_rows, rows_per_file=rows_per_file
        )

    def write(self, table: Any) -> None:
        self.writer.write(table)

    def close(self) -> list[str]:
        return self.writer.close().paths

    def abort(self) -> None:
        self.writer.abort()


def _string_buffers(arr: Any) -> tuple[np.ndarray, np.ndarray]:
    """Flat UTF-8 bytes and per-value byte lengths of a string array (nulls: empty)."""
    import pyarrow as pa

    arr = pa.concat_arrays([arr]) if arr.offset else arr
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1)
    data = arr.buffers()[2]
    flat = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return flat[offsets[0] : offsets[-1]], np.diff(offsets).astype(np.int64)


def _examples(table: Any, plan: dict[str, _Column]) -> list[bytes]:
    """A table of converted columns as tf.Example records (missing values: absent)."""
    import pyarrow.compute as pc

    from tfinput._example_wire import WireColumn, encode_examples

    columns = []
    for name, col in plan.items():
        arr = table.column(name).combine_chunks()
        kind = {"float32": "float", "int64": "int64", "string": "bytes"}[col.kind]
        row_lengths = None
        present = None
        if col.is_list:
            row_lengths = pc.list_value_length(arr).fill_null(0).to_numpy().astype(np.int64)
            values = pc.list_flatten(arr)
        else:
            values = arr
            if arr.null_count:
                present = arr.is_valid().to_numpy(zero_copy_only=False)
        if kind == "bytes":
            flat, lengths = _string_buffers(values)
            columns.append(
                WireColumn(
                    key=name,
                    kind="bytes",
                    values=flat,
                    value_lengths=lengths,
                    row_lengths=row_lengths,
                    present=present,
                )
            )
        else:
            dtype = np.float32 if kind == "float" else np.int64
            nums = values.fill_null(0).to_numpy(zero_copy_only=False).astype(dtype)
            columns.append(
                WireColumn(
                    key=name, kind=kind, values=nums, row_lengths=row_lengths, present=present
                )
            )
    return encode_examples(columns, table.num_rows)


# ---------------------------------------------------------------- reading
class _Counting(io.RawIOBase):
    """A binary file that counts the bytes read (for progress)."""

    def __init__(self, path: str, on_read: Callable[[int], None] | None):
        self._f = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._on_read = on_read

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self._f.readinto(b)
        if n and self._on_read is not None:
            self._on_read(n)
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


def _stream(path: str, on_read: Callable[[int], None] | None) -> Any:
    import pyarrow as pa

    raw = _Counting(path, on_read)
    lower = path.lower()
    if lower.endswith((".gz", ".gzip")):
        return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "gzip")
    if lower.endswith(".bz2"):
        return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "bz2")
    return pa.PythonFile(raw, mode="r")


@dataclasses.dataclass
class _Layout:
    delimiter: str
    names: list[str]
    header: bool
    names_from: str


class _Reader:
    """Streams one CSV file as text batches, each row tagged with its line number."""

    def __init__(
        self,
        path: str,
        layout: _Layout,
        on_read: Callable[[int], None] | None,
        block_size: int = BLOCK_SIZE,
    ):
        import pyarrow as pa
        import pyarrow.csv as pacsv

        self.path = path
        self.layout = layout
        self.invalid: list[tuple[int, str]] = []  # (line, reason), in line order
        self.next_line = 2 if layout.header else 1
        n = len(layout.names)

        def on_invalid(row: Any) -> str:
            text = (row.text or "")[:80]
            number = int(row.number) if row.number is not None else -1
            reason = self.guard.bad.get(number) or (
                f"expected {n} fields ({layout.names_from}), found {row.actual_columns}: {text!r}"
            )
            self.invalid.append((number, reason))
            return "skip"

        self.raw = _stream(path, on_read)
        self.guard = _QuoteGuard(self.raw, delimiter=layout.delimiter, fields=n)
        self.stream = pa.PythonFile(self.guard, mode="r")
        try:  # the reader reads the first block now
            self.reader = self._open_csv(pa, pacsv, block_size, on_invalid)
        except (OSError, pa.ArrowException) as e:
            self.close()
            raise self._read_error(e) from e
        except BaseException:
            self.close()
            raise

    def _read_error(self, e: Exception) -> DataError:
        """A read failure (a truncated .gz, corrupt bytes) as a `DataError` naming the file."""
        if isinstance(e, OSError) or "compress" in str(e).lower():
            return DataError(f"{self.path}: cannot read ({e}); is the file truncated or corrupt?")
        return DataError(f"{self.path}: cannot parse as CSV: {e}")

    def _open_csv(self, pa: Any, pacsv: Any, block_size: int, on_invalid: Any) -> Any:
        layout = self.layout
        return pacsv.open_csv(
            self.stream,
            read_options=pacsv.ReadOptions(
                use_threads=False,
                block_size=block_size,
                column_names=layout.names,
                skip_rows=1 if layout.header else 0,
            ),
            parse_options=pacsv.ParseOptions(
                delimiter=layout.delimiter,
                newlines_in_values=False,
                ignore_empty_lines=False,
                invalid_row_handler=on_invalid,
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in layout.names},
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
                null_values=[""],
            ),
        )

    def batches(self) -> Iterable[tuple[Any, np.ndarray]]:
        """``(batch, line numbers)``; structural bad rows go to ``self.invalid``."""
        import pyarrow as pa

        while True:
            try:
                batch = self.reader.read_next_batch()
            except StopIteration:
                break
            except (OSError, pa.ArrowException) as e:
                raise self._read_error(e) from e
            n = batch.num_rows
            skip = {line for line, _ in self.invalid if line >= self.next_line}
            lines = np.empty(n, dtype=np.int64)
            line, i = self.next_line, 0
            if not skip:
                lines[:] = np.arange(line, line + n)
                line += n
            else:
                while i < n:
                    if line not in skip:
                        lines[i] = line
                        i += 1
                    line += 1
            self.next_line = line
            yield batch, lines

    def close(self) -> None:
        self.stream.close()
        self.raw.close()


# ------------------------------------------------------------------ convert
def _resolve(inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    items = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    if not items:
        raise SourceError("convert: no input files given")
    out: list[str] = []
    for item in items:
        p = os.fspath(item)
        if any(ch in p for ch in "*?["):
            matches = sorted(glob.glob(p))
            if not matches:
                raise SourceError(f"convert: input pattern {p!r} matches no files")
            out += matches
        elif os.path.isfile(p):
            out.append(p)
        else:
            raise SourceError(f"convert: input file {p!r} does not exist")
    return out


def _layout(
    path: str,
    *,
    delimiter: str | None,
    header: bool | str,
    column_names: Sequence[str] | None,
    preset: str | None,
    list_delimiters: Iterable[str],
) -> _Layout:
    lines = _first_lines(path)
    if not lines:
        raise SourceError(f"convert: input {path!r} is empty")
    if delimiter is None:
        delimiter = _sniff_delimiter(lines, exclude=list_delimiters)
    if header == "auto":
        has_header = _sniff_header(lines, delimiter)
        if preset and not has_header:
            has_header = _split(lines[0], delimiter) == _PRESET_COLUMNS[preset]
    elif isinstance(header, bool):
        has_header = header
    else:
        raise ConfigError(f"convert: header must be 'auto', True or False, got {header!r}")
    if column_names is not None:
        names, names_from = list(column_names), "as in column_names"
    elif has_header:
        names, names_from = _split(lines[0], delimiter), "as in the header on line 1"
    elif preset:
        names = list(_PRESET_COLUMNS[preset])
        names_from = f"the {preset} preset's columns"
    else:
        count = len(_split(lines[0], delimiter))
        names, names_from = [f"f{i}" for i in range(count)], "as on line 1"
    names = [n.strip() for n in names]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes or not all(names):
        raise SchemaError(f"{path}: column names must be unique and non-empty; got {names}")
    return _Layout(delimiter=delimiter, names=names, header=has_header, names_from=names_from)


def _inferred(
    paths: list[str], kind: str, *, infer_rows: int, label: str | None, **kwargs: Any
) -> Schema:
    """The schema `tfinput.infer_schema` (``tfinput schema infer``) infers: one engine,
    one answer."""
    from tfinput.inference import infer_schema

    return infer_schema(
        paths,
        sample_rows=infer_rows,
        labels=[label] if label else None,
        format=kind,
        **kwargs,
    ).schema


def _prepare_out_dir(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise SourceError(f"convert: output {str(out_dir)!r} exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    ours = [
        p
        for p in out_dir.iterdir()
        if p.name.startswith("part-") or p.name in ("schema.json", "manifest.json")
    ]
    others = [p for p in out_dir.iterdir() if p not in ours]
    if (ours or others) and not overwrite:
        raise SourceError(
            f"convert: output directory {str(out_dir)!r} is not empty; choose a new "
            "directory or pass overwrite=True (--overwrite) to replace its part-* files "
            "(and schema.json, manifest.json)"
        )
    for p in ours:
        p.unlink()


def convert(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    to: str = "parquet",
    schema: Schema | None = None,
    preset: str | None = None,
    input_format: str = "auto",
    delimiter: str | None = None,
    header: bool | str = "auto",
    column_names: Sequence[str] | None = None,
    list_columns: Mapping[str, str] | None = None,
    label: str | None = None,
    hash_buckets: int | None = None,
    rows_per_file: int = 1_000_000,
    chunk_rows: int = 1024,
    on_bad_rows: str = "error",
    infer_rows: int = 10_000,
    overwrite: bool = False,
    block_size: int = BLOCK_SIZE,
    progress: Callable[[int, int], None] | None = None,
) -> ConvertResult:
    """Convert CSV/TSV, Parquet or tf.Example TFRecord files into sharded Parquet,
    TFRecord or columnar files plus ``schema.json``.

    Args:
      inputs: Files or glob patterns, read in order (``.gz``/``.bz2`` CSV decompressed,
        ``.tfrecord.gz``/``.zz`` TFRecord too).
      out_dir: Output directory; it must be empty unless ``overwrite``.
      to: ``parquet`` (what `tfinput.parquet` reads), ``tfrecord`` (``tf.train.Example``
        records, for `tfinput.tfrecord`) or ``columnar`` (pre-batched columnar records
        plus ``manifest.json``, for `tfinput.columnar`: the fastest to read, and native).
      schema: The schema to write; its source columns must exist in the input.
        Overrides ``preset`` kinds and inference.
      preset: ``criteo`` or ``movielens`` (see the module docstring).
      input_format: ``auto`` (by extension: ``.parquet``/``.pq`` is Parquet,
        ``.tfrecord[s]``/``.tfr`` (optionally ``.gz``/``.zz``) is TFRecord, anything
        else CSV/TSV), ``csv``, ``parquet`` or ``tfrecord``.
      delimiter: Field delimiter; None sniffs it from the first lines (CSV only).
      header: ``"auto"`` (sniffed), True or False (CSV only).
      column_names: Names of the columns, for files without a header (CSV only).
      list_columns: ``{column: item delimiter}`` for multi-valued CSV columns, for
        example ``{"genres": "|"}``. Multi-hot columns of a schema default to ``|``.
      label: The label column when inferring (default: every column named one of
        `LABEL_NAMES`, in any case).
      hash_buckets: Table rows for hashed string columns (and folded int id tables)
        of presets (default 100,000) and of inferred schemas (default: 4 x distinct
        values seen, rounded up to a power of two, as ``tfinput schema infer``). More
        rows mean fewer collisions and a bigger embedding table.
      rows_per_file: Rows per output file (columnar: rounded up to whole chunks).
        Several files let readers interleave and shard across input pipelines; each
        should still hold many batches.
      chunk_rows: Columnar only: rows per record. Batch sizes that are a multiple of
        it are assembled without per-row work; smaller chunks shuffle at a finer grain.
      on_bad_rows: ``error`` (raise at the first bad row) or ``skip`` (leave bad rows
        out and count them).
      infer_rows: Rows sampled from the first input to infer kinds (no schema/preset).
      overwrite: Replace the ``part-*`` files, ``schema.json`` and ``manifest.json`` of
        ``out_dir``.
      block_size: Bytes of CSV parsed at a time. Memory grows with it; a record must
        fit in one block; smaller blocks mean more Python work per byte.
      progress: Called as ``progress(bytes_read, total_bytes)`` (compressed bytes for
        compressed inputs) as blocks are read.

    Returns:
      A `ConvertResult` with counts, the output paths and the schema.

    Raises:
      SourceError: an input is missing or empty, or ``out_dir`` is not empty.
      SchemaError: the schema's columns are not in the input.
      DataError: a bad row with ``on_bad_rows="error"``, or no valid row at all.
      ConfigError: an invalid argument.
    """
    if to not in FORMATS:
        raise ConfigError(f"convert: to must be one of {list(FORMATS)}, got {to!r}")
    if on_bad_rows not in ("error", "skip"):
        raise ConfigError(f"convert: on_bad_rows must be 'error' or 'skip', got {on_bad_rows!r}")
    if preset is not None and preset not in PRESETS:
        raise ConfigError(f"convert: unknown preset {preset!r}; expected one of {list(PRESETS)}")
    for name, value in (
        ("rows_per_file", rows_per_file),
        ("chunk_rows", chunk_rows),
        ("infer_rows", infer_rows),
        ("block_size", block_size),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"convert: {name} must be an int >= 1, got {value!r}")
    if delimiter is not None and len(delimiter) != 1:
        raise ConfigError(f"convert: delimiter must be one character, got {delimiter!r}")
    paths = _resolve(inputs)
    kind = _input_format(paths, input_format)
    lists = dict(_PRESET_LISTS.get(preset or "", {}))
    lists.update(list_columns or {})
    if schema is None and preset is not None:
        schema = preset_schema(preset, hash_buckets=hash_buckets or 100_000)
    if kind == "csv":
        layout_args = dict(
            delimiter=delimiter,
            header=header,
            column_names=column_names,
            preset=preset,
            list_delimiters=set(lists.values()),
        )
        first = _layout(paths[0], **layout_args)
        if schema is None:
            if label is not None and label not in first.names:
                raise SchemaError(f"convert: label column {label!r} not in columns {first.names}")
            schema = _inferred(
                paths,
                "csv",
                infer_rows=infer_rows,
                label=label,
                hash_buckets=hash_buckets,
                list_columns=lists or None,
                delimiter=delimiter,
                header=header,
                column_names=column_names,
            )
        names, names_from = first.names, first.names_from
    else:
        csv_only = [
            n
            for n, v, default in (
                ("delimiter", delimiter, None),
                ("header", header, "auto"),
                ("column_names", column_names, None),
            )
            if v != default
        ]
        if csv_only:
            raise ConfigError(
                f"convert: {', '.join(csv_only)} apply to CSV/TSV inputs only; the inputs "
                f"are {kind} ({paths[0]})"
            )
        if schema is None:
            schema = _inferred(
                paths, kind, infer_rows=infer_rows, label=label, hash_buckets=hash_buckets
            )
        names, names_from = _typed_names(paths[0], kind, schema)
    plan = _plan(schema, lists)
    missing = [c for c in plan if c not in names]
    if missing:
        import difflib

        hints = {m: difflib.get_close_matches(m, names, n=1) for m in missing}
        hint = "; ".join(f"{m!r} -> did you mean {h[0]!r}?" for m, h in hints.items() if h)
        raise SchemaError(
            f"{paths[0]}: the schema needs column(s) {missing} which the input does not "
            f"have; columns ({names_from}): {names}" + (f"; {hint}" if hint else "")
        )
    dropped = tuple(n for n in names if n not in plan)

    out = Path(out_dir)
    _prepare_out_dir(out, overwrite)
    schema_path = str(out / "schema.json")
    if to == "columnar":
        shards: Any = _ColumnarShards(out, schema, rows_per_file, chunk_rows)
    else:
        shards = _Shards(out, to, rows_per_file, plan)
    total_bytes = sum(os.path.getsize(p) for p in paths)
    done = [0]

    def on_read(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], total_bytes)

    rows = skipped = blank = 0
    reported: list[BadRow] = []
    unit = "line" if kind == "csv" else "row"

    def bad_row(path: str, line: int, reason: str) -> None:
        nonlocal skipped
        if on_bad_rows == "error":
            where = f"{path}:{line}" if unit == "line" else f"{path}: row {line}"
            raise DataError(
                f"{where}: {reason} (pass on_bad_rows='skip' / --on-bad-rows skip "
                "to leave bad rows out and count them)"
            )
        skipped += 1
        if len(reported) < MAX_REPORTED:
            reported.append(BadRow(path=path, line=line, reason=reason, unit=unit))

    if kind == "csv":
        batches = _csv_batches(paths, first, layout_args, plan, block_size, on_read)
    else:
        batches = _typed_batches(paths, kind, schema, plan, on_read)
    try:
        with contextlib.closing(batches):
            for path, table, events, n_blank in batches:
                blank += n_blank
                for line, reason in sorted(events):
                    bad_row(path, line, reason)
                if table is not None and table.num_rows:
                    shards.write(table)
                    rows += table.num_rows
        files = shards.close()
    except BaseException:
        shards.abort()
        raise
    if rows == 0:
        first_bad = f"; first bad row: {reported[0]}" if reported else ""
        raise DataError(f"convert: no valid rows in {paths}" + first_bad)
    schema.to_json(schema_path)
    return ConvertResult(
        paths=tuple(files),
        schema=schema,
        schema_path=schema_path,
        format=to,
        rows=rows,
        skipped=skipped,
        bad_rows=tuple(reported),
        blank_lines=blank,
        dropped_columns=dropped,
        delimiter=first.delimiter if kind == "csv" else "",
        header=first.header if kind == "csv" else False,
        input_format=kind,
        manifest_path=str(out / "manifest.json") if to == "columnar" else None,
    )


def _csv_batches(
    paths: list[str],
    first: _Layout,
    layout_args: dict[str, Any],
    plan: dict[str, _Column],
    block_size: int,
    on_read: Callable[[int], None],
) -> Iterator[tuple[str, Any, list[tuple[int, str]], int]]:
    """``(path, converted table, bad rows as (line, reason), blank lines)`` per block."""
    for i, path in enumerate(paths):
        layout = first if i == 0 else _layout(path, **layout_args)
        if layout.names != first.names:
            raise SchemaError(
                f"{path}: columns {layout.names} differ from those of {paths[0]}: {first.names}"
            )
        reader = _Reader(path, layout, on_read, block_size)
        try:
            for batch, lines in reader.batches():
                last = int(lines[-1]) if len(lines) else reader.next_line - 1
                events = []
                while reader.invalid and reader.invalid[0][0] <= last:
                    events.append(reader.invalid.pop(0))
                table, bad, n_blank = _convert_batch(batch, lines, plan)
                events += [(int(lines[row]), reason) for row, reason in bad.items()]
                yield path, table, events, n_blank
            yield path, None, list(reader.invalid), 0
        finally:
            reader.close()


# ------------------------------------------------- Parquet and TFRecord inputs
_PARQUET_EXT = (".parquet", ".pq", ".parq")
_TFRECORD_EXT = re.compile(r"\.(tfrecords?|tfr)(\.(gz|gzip|zz|zlib))?$", re.I)


def _input_format(paths: list[str], requested: str) -> str:
    if requested not in INPUT_FORMATS:
        raise ConfigError(
            f"convert: input_format must be one of {list(INPUT_FORMATS)}, got {requested!r}"
        )
    if requested != "auto":
        return requested

    def kind(p: str) -> str:
        if p.lower().endswith(_PARQUET_EXT):
            return "parquet"
        return "tfrecord" if _TFRECORD_EXT.search(p) else "csv"

    kinds = {p: kind(p) for p in paths}
    found = sorted(set(kinds.values()))
    if len(found) > 1:
        example = {k: next(p for p, v in kinds.items() if v == k) for k in found}
        raise ConfigError(
            f"convert: inputs mix formats {found} (for example {example}); convert each "
            "format separately, or pass input_format / --input-format"
        )
    return found[0]


def _tfrecord_compression(path: str) -> str:
    lower = path.lower()
    if lower.endswith((".gz", ".gzip")):
        return "GZIP"
    return "ZLIB" if lower.endswith((".zz", ".zlib")) else ""


def _typed_names(path: str, kind: str, schema: Schema) -> tuple[list[str], str]:
    """Column names of a Parquet file, or keys of a TFRecord file's first record (whose
    types are checked against the schema); and where they come from."""
    if kind == "parquet":
        import pyarrow.parquet as pq

        try:
            names = list(pq.read_schema(path).names)
        except Exception as e:  # pyarrow raises ArrowInvalid/OSError variants
            raise DataError(f"{path}: not a readable Parquet file ({e})") from e
        return names, "in the Parquet schema"
    import tensorflow as tf

    from tfinput.sources import _check_first_example

    compression = _tfrecord_compression(path)
    _check_first_example(path, compression, schema)
    first = next(iter(tf.data.TFRecordDataset(path, compression).take(1)), None)
    if first is None:
        raise SourceError(f"convert: input {path!r} holds no records")
    keys = list(tf.train.Example.FromString(first.numpy()).features.feature)
    # A key absent from the first record may only be missing there: accept schema keys.
    extra = [c for c in schema.columns() if c not in keys]
    return keys + extra, "keys of the first tf.Example"


def _typed_batches(
    paths: list[str],
    kind: str,
    schema: Schema,
    plan: dict[str, _Column],
    on_read: Callable[[int], None],
) -> Iterator[tuple[str, Any, list[tuple[int, str]], int]]:
    """``(path, converted table, bad rows as (row, reason), 0)`` per block of rows."""
    read = _parquet_blocks if kind == "parquet" else _tfrecord_blocks
    for path in paths:
        row = 1
        for raw in read(path, plan, on_read):
            table, bad = _convert_typed(raw, plan, path)
            yield path, table, [(row + r, reason) for r, reason in bad.items()], 0
            row += raw.num_rows


def _parquet_blocks(
    path: str, plan: dict[str, _Column], on_read: Callable[[int], None]
) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid/OSError variants
        raise DataError(f"{path}: not a readable Parquet file ({e})") from e
    arrow_schema = pf.schema_arrow
    for name, col in plan.items():
        if name not in arrow_schema.names:
            raise SchemaError(
                f"{path}: the schema needs column {name!r}, which this file does not have; "
                f"columns: {arrow_schema.names[:40]}"
            )
        t = arrow_schema.field(name).type
        is_list = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
        if is_list != col.is_list:
            want = "a list column" if col.is_list else "a scalar column"
            raise SchemaError(
                f"{path}: column {name!r} (feature {col.feature!r}) has type {t}; the schema "
                f"expects {want}"
            )
    size, rows = os.path.getsize(path), max(1, pf.metadata.num_rows)
    for batch in pf.iter_batches(batch_size=TYPED_BLOCK_ROWS, columns=list(plan)):
        on_read(int(size * batch.num_rows / rows))
        yield batch


def _tfrecord_blocks(
    path: str, plan: dict[str, _Column], on_read: Callable[[int], None]
) -> Iterator[Any]:
    """Blocks of tf.Example records as Arrow tables: every key parsed as a ragged
    feature, so a missing key is a null (scalar) or an empty list, never a default."""
    import pyarrow as pa
    import tensorflow as tf

    dtypes = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}
    spec = {
        name: tf.io.RaggedFeature(dtypes[col.kind], row_splits_dtype=tf.int64)
        for name, col in plan.items()
    }

    def parse(serialized: tf.Tensor) -> Any:
        size = tf.reduce_sum(tf.strings.length(serialized)) + 16 * tf.size(serialized, tf.int32)
        return tf.io.parse_example(serialized, spec), size

    ds = tf.data.TFRecordDataset(path, _tfrecord_compression(path))
    ds = ds.batch(TYPED_BLOCK_ROWS).map(parse).prefetch(1)
    row = 1
    it = iter(ds)
    while True:
        try:
            parsed, size = next(it)
        except StopIteration:
            return
        except tf.errors.OpError as e:
            from tfinput.pipeline import clean_error

            raise DataError(
                f"{path}: rows {row}-{row + TYPED_BLOCK_ROWS - 1}: {clean_error(e)}"
            ) from e
        on_read(int(size))
        arrays = {}
        n = 0
        for name, col in plan.items():
            ragged = parsed[name]
            n = int(ragged.nrows())
            splits = ragged.row_splits.numpy()
            values = ragged.values.numpy()
            arrow_values = pa.array(values, type=pa.binary() if col.kind == "string" else None)
            lengths = np.diff(splits)
            if col.is_list:
                # A vector with no values is a missing value: null, filled by its default.
                mask = pa.array(lengths == 0) if col.fixed_len is not None else None
                arrays[name] = pa.ListArray.from_arrays(
                    pa.array(splits.astype(np.int32)), arrow_values, mask=mask
                )
            else:
                # Scalars: no value is null (missing); several values stay a list so
                # that `_convert_typed` reports the row.
                arrays[name] = (
                    pa.ListArray.from_arrays(pa.array(splits.astype(np.int32)), arrow_values)
                    if (lengths > 1).any()
                    else _scalars(arrow_values, splits, lengths)
                )
        row += n
        yield pa.table(arrays)


def _scalars(values: Any, splits: np.ndarray, lengths: np.ndarray) -> Any:
    import pyarrow as pa

    present = lengths == 1
    if present.all():
        return values
    take = np.where(present, splits[:-1], 0)
    if len(values) == 0:
        return pa.nulls(len(lengths), type=values.type)
    return pa.array(
        values.take(pa.array(take)).to_numpy(zero_copy_only=False),
        type=values.type,
        mask=~present,
    )


def _convert_typed(raw: Any, plan: dict[str, _Column], path: str) -> tuple[Any, dict[int, str]]:
    """Cast and check typed columns (Parquet or parsed TFRecord) like CSV text columns:
    the good rows' table, and bad rows (0-based within ``raw``) with reasons."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = raw.num_rows
    bad: dict[int, str] = {}
    arrays = {}
    for name, col in plan.items():
        where = f"column {name!r}:"
        arr = raw.column(name)
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        listed = (
            pa.types.is_list(arr.type)
            or pa.types.is_large_list(arr.type)
            or pa.types.is_fixed_size_list(arr.type)
        )
        if not col.is_list and listed:  # TFRecord: several values for a scalar key
            lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
            for p in np.flatnonzero(lengths > 1).tolist():
                bad.setdefault(p, f"{where} expected one value, found {int(lengths[p])}")
            arr = pc.list_element(
                pc.if_else(pa.array(lengths == 1), arr, pa.scalar(None, arr.type)), 0
            )
        if not col.is_list:
            values = _as_text_if_string(arr, col, path)
            out, col_bad = _convert_values(values, col, f"{where} value")
            for p, reason in col_bad.items():
                bad.setdefault(p, reason)
            if col.required and arr.null_count:
                nulls = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))
                for p in nulls.tolist():
                    bad.setdefault(
                        p, f"{where} missing value, and feature {col.feature!r} has no default"
                    )
            arrays[name] = out
            continue
        null_rows = arr.is_null().to_numpy(zero_copy_only=False)
        lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
        flat = _as_text_if_string(pc.list_flatten(arr), col, path)
        row_of = np.repeat(np.arange(n), lengths)
        typed, value_bad = _convert_values(flat, col, f"{where} item")
        for p, reason in value_bad.items():
            bad.setdefault(int(row_of[p]), reason)
        if typed.null_count:
            for p in np.flatnonzero(typed.is_null().to_numpy(zero_copy_only=False)).tolist():
                bad.setdefault(int(row_of[p]), f"{where} null item in a list")
        if col.fixed_len is not None:
            wrong = (lengths != col.fixed_len) & ~null_rows
            for p in np.flatnonzero(wrong).tolist():
                bad.setdefault(
                    p, f"{where} expected {col.fixed_len} values, found {int(lengths[p])}"
                )
        offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        mask = pa.array(null_rows) if null_rows.any() else None
        arrays[name] = pa.ListArray.from_arrays(offsets, typed, mask=mask)
    table = pa.table(arrays)
    if bad:
        keep = np.ones(n, dtype=bool)
        keep[list(bad)] = False
        table = table.filter(pa.array(keep))
    return table, bad


def _as_text_if_string(arr: Any, col: _Column, path: str) -> Any:
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


def _convert_batch(
    batch: Any, lines: np.ndarray, plan: dict[str, _Column]
) -> tuple[Any, dict[int, str], int]:
    """Convert one text batch: the good rows' table, bad rows' reasons, blank count."""
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
