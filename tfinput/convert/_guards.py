"""The quote guard: a CSV file's text, checked line by line before pyarrow's CSV parser
sees it, so that an unbalanced quote makes one bad row instead of swallowing the lines
after it."""

from __future__ import annotations

import io
import re
from typing import Any

import numpy as np

__all__ = ["QuoteGuard", "unclosed_quote"]


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
