"""What the inputs are: files, format, compression, and a CSV file's layout (delimiter,
header, column names), sniffed from its first lines."""

from __future__ import annotations

import csv
import dataclasses
import glob
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

from tfinput.convert.presets import PRESET_COLUMNS
from tfinput.errors import ConfigError, DataError, SchemaError, SourceError

__all__ = [
    "INPUT_FORMATS",
    "Layout",
    "detect_input_format",
    "resolve_inputs",
    "sniff_layout",
    "tfrecord_compression",
]

INPUT_FORMATS = ("auto", "csv", "parquet", "tfrecord")

_DELIMITERS = ("\t", ",", ";", "|")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_ .:/-]*$")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_PARQUET_EXT = (".parquet", ".pq", ".parq")
_TFRECORD_EXT = re.compile(r"\.(tfrecords?|tfr)(\.(gz|gzip|zz|zlib))?$", re.I)


# ------------------------------------------------------------------ inputs
def resolve_inputs(inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The input files: each path as given, each glob pattern expanded (sorted), each
    directory's files (sorted; hidden files, ``_``-prefixed ones and ``.json`` sidecars
    such as ``schema.json`` left out).

    Raises:
      SourceError: no input, a pattern or directory that matches nothing, or a missing
        file.
    """
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
        elif os.path.isdir(p):
            from tfinput.sources.files import data_files

            matches = data_files(p)
            if not matches:
                raise SourceError(f"convert: input directory {p!r} holds no data files")
            out += matches
        else:
            raise SourceError(f"convert: input file {p!r} does not exist")
    return out


def detect_input_format(paths: list[str], requested: str) -> str:
    """The input format: ``requested``, or for ``auto`` the one the file names say.

    Args:
      paths: The input files.
      requested: One of `INPUT_FORMATS`.

    Returns:
      ``csv``, ``parquet`` or ``tfrecord``.

    Raises:
      ConfigError: an unknown format, or inputs whose names say different formats.
    """
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


def tfrecord_compression(path: str) -> str:
    """The `tf.data.TFRecordDataset` compression a TFRecord file name says."""
    lower = path.lower()
    if lower.endswith((".gz", ".gzip")):
        return "GZIP"
    return "ZLIB" if lower.endswith((".zz", ".zlib")) else ""


# -------------------------------------------------------------- CSV layout
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
            has_header = _split(lines[0], delimiter) == PRESET_COLUMNS[preset]
    elif isinstance(header, bool):
        has_header = header
    else:
        raise ConfigError(f"convert: header must be 'auto', True or False, got {header!r}")
    if column_names is not None:
        names, names_from = list(column_names), "as in column_names"
    elif has_header:
        names, names_from = _split(lines[0], delimiter), "as in the header on line 1"
    elif preset:
        names = list(PRESET_COLUMNS[preset])
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
