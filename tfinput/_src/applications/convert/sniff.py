"""What the inputs are: files, format and compression; a CSV file's layout (delimiter,
header, column names) is `tfinput.formats.csv`'s (`Layout`, `sniff_layout`, re-exported)."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

from tfinput._src.core.errors import ConfigError, SourceError
from tfinput._src.core.formats import parquet, tfrecord
from tfinput._src.core.formats.csv import Layout, sniff_layout

__all__ = [
    "INPUT_FORMATS",
    "Layout",
    "detect_input_format",
    "resolve_inputs",
    "sniff_layout",
]

INPUT_FORMATS = ("auto", "csv", "parquet", "tfrecord")


# ------------------------------------------------------------------ inputs
def resolve_inputs(inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The input files: each path as given, each glob pattern expanded (sorted), each
    directory's files (sorted; hidden files, ``_``-prefixed ones and ``.json`` sidecars
    such as ``schema.json`` left out).

    Raises:
      SourceError: no input, a pattern or directory that matches nothing, a missing
        file, or a FIFO, socket or device (`check_regular_file`).
    """
    from tfinput._src.core.files import check_regular_file, data_files

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
            matches = data_files(p)
            if not matches:
                raise SourceError(f"convert: input directory {p!r} holds no data files")
            out += matches
        elif os.path.exists(p):  # a FIFO, a socket or a device: refused below
            out.append(p)
        else:
            raise SourceError(f"convert: input file {p!r} does not exist")
    for path in out:
        check_regular_file(path, what="convert: input")
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
        if parquet.is_parquet_name(p):
            return "parquet"
        return "tfrecord" if tfrecord.is_tfrecord_name(p) else "csv"

    kinds = {p: kind(p) for p in paths}
    found = sorted(set(kinds.values()))
    if len(found) > 1:
        example = {k: next(p for p, v in kinds.items() if v == k) for k in found}
        raise ConfigError(
            f"convert: inputs mix formats {found} (for example {example}); convert each "
            "format separately, or pass input_format / --input-format"
        )
    return found[0]


# -------------------------------------------------------------- CSV layout
