"""Shared by the benchmark scripts: their ``--smoke`` switch, and where their results go
(one script's section of RESULTS.md, its raw JSON files).

``--smoke`` runs a script end to end in seconds, to check that it still runs (the test
suite runs every script this way): the script's declared tiny sizes become the defaults
(arguments given on the command line still win), criteo-like data has a few features
of each kind (`benchmarks.core.criteo_schema`), ``--data-dir`` and everything the
script writes (RESULTS.md, results-*.json) go to one temporary directory, never into
benchmarks/. Its figures are not results."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"

_smoke_dir: Path | None = None  # set by the first --smoke run in this process


def parse_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None, *, smoke: dict[str, Any]
) -> argparse.Namespace:
    """``parser.parse_args(argv)`` with a ``--smoke`` flag added: with it, ``smoke``'s
    values (argument destinations -> tiny sizes) become the defaults, ``--data-dir``
    defaults to the smoke directory's data folder (generated data is shared by the
    scripts run in one process), and
    `output` points there."""
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny data, one round: checks the script runs (seconds); data and anything "
        "written go to a temporary directory",
    )
    args = parser.parse_args(argv)
    if not args.smoke:
        return args
    defaults = dict(smoke)
    data = smoke_dir() / "data"
    if any(action.dest == "data_dir" for action in parser._actions):
        defaults.setdefault("data_dir", str(data))  # shared by the scripts run in turn
    parser.set_defaults(**defaults)
    return parser.parse_args(argv)


def smoke_dir() -> Path:
    """The temporary directory of this process's ``--smoke`` runs (made on first use, in
    ``$TFINPUT_SMOKE_DIR`` if set, else in the system's temporary directory)."""
    global _smoke_dir
    if _smoke_dir is None:
        parent = os.environ.get("TFINPUT_SMOKE_DIR")
        _smoke_dir = Path(tempfile.mkdtemp(prefix="tfinput-smoke-", dir=parent))
    return _smoke_dir


def smoke_active() -> bool:
    """Whether a ``--smoke`` run started in this process."""
    return _smoke_dir is not None


def output(name: str) -> Path:
    """Where a results file (``RESULTS.md``, ``results-*.json``) is read and written:
    benchmarks/, or the smoke directory once a ``--smoke`` run started here."""
    return (_smoke_dir or HERE) / name


def write_section(name: str, section: str, path: Path | None = None) -> None:
    """Replace the ``<!-- NAME:begin ... -->`` ... ``<!-- NAME:end -->`` block of ``path``
    (default: `output` ``RESULTS.md``) with ``section`` (which carries its own markers);
    append it if absent. Other sections are kept as they are."""
    path = path or output(RESULTS.name)
    begin, end = f"<!-- {name}:begin", f"<!-- {name}:end -->"
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    path.write_text(text)
