"""CSV and TSV files: their layout (delimiter, header, column names) sniffed from the
first lines, and their text read block by block with every row's line number.

The one place tfinput reads CSV: conversion (`tfinput.convert`) turns the text batches
into typed columns, schema inference (`tfinput.inference`) samples them. A quote left
open on a line makes that line one bad row instead of swallowing the lines after it
(`QuoteGuard`, before pyarrow's parser sees the text).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tfinput._src.core.errors import ConfigError, DataError, SchemaError, SourceError

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

#: The columns of well-known CSV data sets whose files have no header (the conversion
#: presets'), by name.
KNOWN_COLUMNS: dict[str, list[str]] = {"criteo": _CRITEO_COLUMNS, "movielens": _MOVIELENS_COLUMNS}


# ------------------------------------------------------------------ layout
_DELIMITERS = ("\t", ",", ";", "|")

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_ .:/-]*$")

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


@dataclasses.dataclass
class Layout:
    """How one CSV/TSV file is laid out.

    Attributes:
      delimiter: The field delimiter.
      names: The column names.
      header: Whether line 1 is a header.
      names_from: Where the names come from, for error messages.
    """

    delimiter: str
    names: list[str]
    header: bool
    names_from: str


def sniff_layout(
    path: str,
    *,
    delimiter: str | None,
    header: bool | str,
    column_names: Sequence[str] | None,
    preset: str | None,
    list_delimiters: Iterable[str],
) -> Layout:
    """Sniff the layout of a CSV/TSV file from its first lines (see `tfinput.convert`).

    Args:
      path: The file (``.gz``/``.bz2`` decompressed).
      delimiter: The field delimiter; None sniffs it.
      header: ``"auto"`` (sniffed), True or False.
      column_names: Names for a file without a header.
      preset: A preset whose column names apply to a file without a header.
      list_delimiters: Item delimiters of list columns, never field delimiters.

    Returns:
      The file's `Layout`.

    Raises:
      SourceError: the file is empty.
      DataError: the file is not UTF-8 text or cannot be read.
      SchemaError: the column names are not unique and non-empty.
      ConfigError: an invalid ``header``.
    """
    lines = _first_lines(path)
    if not lines:
        raise SourceError(f"convert: input {path!r} is empty")
    if delimiter is None:
        delimiter = _sniff_delimiter(lines, exclude=list_delimiters)
    if header == "auto":
        has_header = _sniff_header(lines, delimiter)
        if preset and not has_header:
            has_header = _split(lines[0], delimiter) == KNOWN_COLUMNS[preset]
    elif isinstance(header, bool):
        has_header = header
    else:
        raise ConfigError(f"convert: header must be 'auto', True or False, got {header!r}")
    if column_names is not None:
        names, names_from = list(column_names), "as in column_names"
    elif has_header:
        names, names_from = _split(lines[0], delimiter), "as in the header on line 1"
    elif preset:
        names = list(KNOWN_COLUMNS[preset])
        names_from = f"the {preset} preset's columns"
    else:
        count = len(_split(lines[0], delimiter))
        names, names_from = [f"f{i}" for i in range(count)], "as on line 1"
    names = [n.strip() for n in names]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes or not all(names):
        raise SchemaError(f"{path}: column names must be unique and non-empty; got {names}")
    return Layout(delimiter=delimiter, names=names, header=has_header, names_from=names_from)


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


# ------------------------------------------------------------------ quotes
def unclosed_quote(line: str, delimiter: str, quote: str = '"') -> bool:
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


class QuoteGuard(io.RawIOBase):
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
        checked exactly by `unclosed_quote`.
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
            if unclosed_quote(text, self.delimiter):
                self.bad[first + i] = (
                    "unbalanced quote: a quoted field is not closed on this line (records "
                    f"must be one line; the line alone is left out): {text[:80]!r}"
                )
                lines[i] = self.replacement
        return b"\n".join(lines)


# ------------------------------------------------------------------ reading
#: Bytes of CSV parsed at a time (a record must fit in one block).
BLOCK_SIZE = 4 << 20


class CsvReader:
    """Streams one CSV file as text batches, each row tagged with its line number.

    Args:
      path: The file (``.gz``/``.bz2`` decompressed on the fly).
      layout: Its `Layout`.
      on_read: Called with the number of (compressed) bytes read, or None.
      block_size: Bytes of CSV parsed at a time (a record must fit in one block).
      byte_range: Read only bytes ``[start, end)`` of an uncompressed file, both at line
        breaks (the Ray engine's pieces): line 1 is the range's first line (the caller
        adds the lines before it), the header is skipped in the first range only, and
        ``raw.newlines`` counts the line breaks read.

    Attributes:
      invalid: Structural bad rows not yet reported, ``(line, reason)`` in line order.
      next_line: The line number of the next row read.
      reader: The pyarrow streaming CSV reader.

    Raises:
      DataError: the file cannot be read or parsed.
    """

    def __init__(
        self,
        path: str,
        layout: Layout,
        on_read: Callable[[int], None] | None,
        *,
        block_size: int = BLOCK_SIZE,
        byte_range: tuple[int, int] | None = None,
    ):
        import pyarrow as pa
        import pyarrow.csv as pacsv

        if byte_range is not None and byte_range[0] > 0:
            layout = dataclasses.replace(layout, header=False)
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

        self.raw = _stream(path, on_read) if byte_range is None else _Range(path, *byte_range)
        self.guard = QuoteGuard(self.raw, delimiter=layout.delimiter, fields=n)
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
        """Close the file."""
        self.stream.close()
        self.raw.close()


class _Range:
    """Bytes ``[start, end)`` of a file, as a readable binary stream; counts the line
    breaks read (``newlines``)."""

    def __init__(self, path: str, start: int, end: int):
        self.f = open(path, "rb")  # noqa: SIM115 - closed by close()
        self.f.seek(start)
        self.left = end - start
        self.newlines = 0
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.f.read(n)
        self.left -= len(data)
        self.newlines += data.count(b"\n")
        return data

    def close(self) -> None:
        self.closed = True
        self.f.close()


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
    """A file as a pyarrow stream, ``.gz``/``.bz2`` decompressed, counting bytes read."""
    import pyarrow as pa

    raw = _Counting(path, on_read)
    lower = path.lower()
    if lower.endswith((".gz", ".gzip")):
        return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "gzip")
    if lower.endswith(".bz2"):
        return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "bz2")
    return pa.PythonFile(raw, mode="r")
