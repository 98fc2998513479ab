"""Shared by the benchmark scripts: replace one script's section of RESULTS.md."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(name: str, section: str, path: Path = RESULTS) -> None:
    """Replace the ``<!-- NAME:begin ... -->`` ... ``<!-- NAME:end -->`` block of ``path``
    with ``section`` (which carries its own markers); append it if absent. Other
    sections are kept as they are."""
    begin, end = f"<!-- {name}:begin", f"<!-- {name}:end -->"
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    path.write_text(text)
