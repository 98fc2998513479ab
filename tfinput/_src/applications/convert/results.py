"""What `convert` reports: bad rows (raised or counted) and the `ConvertResult`."""

from __future__ import annotations

import dataclasses
from typing import Any

from tfinput._src.core.errors import DataError
from tfinput._src.core.schema import Schema

__all__ = ["MAX_REPORTED", "BadRow", "BadRowLog", "ConvertResult"]

#: Bad rows listed in a `ConvertResult` (all are counted).
MAX_REPORTED = 20


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


class BadRowLog:
    """Where bad rows go: raised at once (``on_bad_rows="error"``) or counted, the first
    `MAX_REPORTED` kept with their reasons (``"skip"``).

    Args:
      on_bad_rows: ``error`` or ``skip``.
      unit: ``line`` (CSV/TSV inputs) or ``row`` (Parquet, TFRecord inputs).
    """

    def __init__(self, *, on_bad_rows: str, unit: str):
        self.on_bad_rows = on_bad_rows
        self.unit = unit
        self.skipped = 0
        self.reported: list[BadRow] = []

    def add(self, path: str, line: int, reason: str) -> None:
        """Record one bad row.

        Raises:
          DataError: with ``on_bad_rows="error"``, naming the file, the line (or row)
            and the reason.
        """
        if self.on_bad_rows == "error":
            where = f"{path}:{line}" if self.unit == "line" else f"{path}: row {line}"
            raise DataError(
                f"{where}: {reason} (pass on_bad_rows='skip' / --on-bad-rows skip "
                "to leave bad rows out and count them)"
            )
        self.skipped += 1
        if len(self.reported) < MAX_REPORTED:
            self.reported.append(BadRow(path=path, line=line, reason=reason, unit=self.unit))
