"""xprof's offline converters and the layout of the tables they return.

xprof returns gviz tables; they are found by their column ids, never by position.
The column ids read are listed in `EXPECTED_COLUMNS` and were checked against the
xprof versions in `TESTED_XPROF`; if an xprof release renames or drops one,
`XprofLayoutError` says so with both versions instead of returning wrong numbers.

The log directory is never written to: xprof caches its intermediate results next
to the trace files, so the conversion runs on links to them in a temporary directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from profiles._xplane import HOW_TO_CAPTURE, ProfileError, XprofLayoutError

#: The xprof releases whose table layout this module is tested against. Keep in step
#: with the ``xprof`` requirement in pyproject.toml.
TESTED_XPROF = ">=2.24,<2.25"

#: Column ids read from each xprof tool's tables (a table is found by these ids).
EXPECTED_COLUMNS: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "input_pipeline_analyzer": {
        "step breakdown": (
            "stepnum",
            "stepTimeMs",
            "infeedTimeMs",
            "hostComputeTimeMs",
            "deviceComputeTimeMs",
            "deviceToDeviceTimeMs",
            "deviceCollectivesTimeMs",
            "kernelLaunchTimeMs",
            "outfeedTimeMs",
            "compileTimeMs",
            "otherTimeMs",
        ),
        # On a TPU the step breakdown is the TensorCore's (one of the two is there).
        "tpu step breakdown": (
            "stepnum",
            "tcComputeTimeMs",
            "tcInfeedTimeMs",
            "tcOutfeedTimeMs",
            "tcIdleTimeMs",
            "hostTransferTimeMs",
        ),
        "input ops": ("opName", "count", "timeInMs", "selfTimeInMs", "category"),
    },
    "overview_page": {
        "recommendation": ("tip_type", "link", "description"),
        "run environment": ("host_id", "command_line"),
    },
    "framework_op_stats": {
        "ops": ("host_or_device", "type", "operation", "occurrences", "total_self_time"),
    },
}

#: Table properties read (``p`` of the tables above).
_EXPECTED_PROPERTIES: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("input_pipeline_analyzer", "step breakdown"): ("input_conclusion", "hardware_type"),
    ("input_pipeline_analyzer", "tpu step breakdown"): ("input_conclusion", "hardware_type"),
    ("overview_page", "recommendation"): ("statement",),
}

#: Tables of which a tool's output holds one or the other (the first is looked for).
ONE_OF: Mapping[str, tuple[tuple[str, str], ...]] = {
    "input_pipeline_analyzer": (("step breakdown", "tpu step breakdown"),),
}


# ---------------------------------------------------------------------- versions
def xprof_version() -> str | None:
    """The installed xprof version, or None when xprof is not installed."""
    from importlib import metadata

    for dist in ("xprof", "tensorboard-plugin-profile"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:3])


def version_in_range(version: str, spec: str = TESTED_XPROF) -> bool:
    """Whether ``version`` satisfies a simple specifier such as ``>=2.24,<2.25``."""
    v = _version_tuple(version)
    ops = {
        ">=": lambda a, b: a >= b,
        "<=": lambda a, b: a <= b,
        "==": lambda a, b: a == b,
        "!=": lambda a, b: a != b,
        ">": lambda a, b: a > b,
        "<": lambda a, b: a < b,
    }
    for clause in spec.split(","):
        m = re.match(r"\s*(>=|<=|==|!=|>|<)\s*([\w.]+)\s*$", clause)
        if not m:
            raise ValueError(f"unsupported version specifier {clause!r} in {spec!r}")
        op, bound = m.groups()
        b = _version_tuple(bound)
        width = max(len(v), len(b))
        if not ops[op](v + (0,) * (width - len(v)), b + (0,) * (width - len(b))):
            return False
    return True


# ------------------------------------------------------------- xprof conversion
@contextlib.contextmanager
def _stderr_captured() -> Iterator[list[str]]:
    """Redirect file descriptor 2 (where xprof's C++ logs go) into a list of lines."""
    lines: list[str] = []
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield lines
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines.extend(tmp.read().decode("utf-8", "replace").splitlines())


def _xprof_errors(lines: Sequence[str]) -> str:
    msgs = []
    for line in lines:
        m = re.match(r"^[EF]\d{4} [\d:. ]+\s*\d*\s+\S+\] (.*)$", line)
        if m:
            msgs.append(m.group(1).strip())
    return "; ".join(dict.fromkeys(msgs)) or "no message"


def _arrow_first() -> None:
    """Import pyarrow's compute and dataset modules before any xprof library loads.

    xprof 2.24's events DB (its Parquet export of a trace) loads a copy of Arrow into
    the process with global symbols; a pyarrow module imported after it finds Arrow's
    compute functions registered twice (``KeyError: 'utf8_zero_fill'``, or a crash in
    ``pyarrow.dataset``). Imported first, pyarrow keeps working however the process
    uses xprof next. Without pyarrow there is nothing to protect."""
    with contextlib.suppress(ImportError):
        import pyarrow.compute
        import pyarrow.dataset  # noqa: F401


def xprof_tables(
    paths: Sequence[str | os.PathLike[str]],
    tools: Sequence[str],
    params: Mapping[str, Mapping[str, object]] | None = None,
) -> dict[str, object]:
    """Run xprof's offline converters on trace files.

    Args:
      paths: ``.xplane.pb`` files (one per host).
      tools: xprof tool names, e.g. ``("input_pipeline_analyzer", "overview_page")``.
      params: Extra parameters per tool (``{"op_profile": {"group_by": "category"}}``).

    Returns:
      ``{tool: parsed JSON}`` (a list of gviz tables for the tools above).

    Raises:
      ProfileError: xprof is missing or could not convert the files (its log message
        is included).
    """
    _arrow_first()
    try:
        with _stderr_captured():  # loading xprof's library logs to stderr once
            from xprof.convert import raw_to_tool_data
    except ImportError as e:
        raise ProfileError(
            f"xprof is needed to analyse traces: pip install 'xprof{TESTED_XPROF}' ({e})"
        ) from e
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="tfinput-xprof-") as tmp:
        links = []
        for path in paths:
            link = Path(tmp) / Path(path).name
            try:
                link.symlink_to(Path(path).resolve())
            except OSError:
                shutil.copyfile(path, link)
            links.append(str(link))
        for tool in tools:
            with _stderr_captured() as log:
                data, _ = raw_to_tool_data.xspace_to_tool_data(
                    links, tool, {"use_saved_result": True, **(params or {}).get(tool, {})}
                )
            if data is None:
                names = ", ".join(str(p) for p in paths)
                raise ProfileError(
                    f"xprof {xprof_version()} could not convert {names} with "
                    f"{tool}: {_xprof_errors(log)}. The trace is probably truncated or "
                    f"not a TensorFlow profile. {HOW_TO_CAPTURE}"
                )
            try:
                out[tool] = json.loads(data)
            except (TypeError, ValueError) as e:
                raise XprofLayoutError(_layout_message(f"{tool} did not return JSON ({e})")) from e
    return out


def _layout_message(problem: str) -> str:
    return (
        f"xprof {xprof_version()} output changed: {problem}. profiles reads xprof "
        f"{TESTED_XPROF} (see profiles._analysis.TESTED_XPROF and EXPECTED_COLUMNS): "
        "install a tested xprof or update profiles/_xprof.py."
    )


def _col_ids(table: Mapping[str, object]) -> list[str]:
    return [str(c.get("id")) for c in table.get("cols", []) if isinstance(c, Mapping)]


def find_table(tables: Any, tool: str, what: str) -> Mapping[str, object]:
    """The table of ``tool`` output holding ``EXPECTED_COLUMNS[tool][what]``.

    Raises:
      XprofLayoutError: No table has all those column ids (or a property is missing).
    """
    required = EXPECTED_COLUMNS[tool][what]
    if not isinstance(tables, list):
        raise XprofLayoutError(_layout_message(f"{tool} returned {type(tables).__name__}"))
    candidates = [t for t in tables if isinstance(t, Mapping)]
    for table in candidates:
        if set(required) <= set(_col_ids(table)):
            props = table.get("p") or {}
            missing_p = [k for k in _EXPECTED_PROPERTIES.get((tool, what), ()) if k not in props]
            if missing_p:
                raise XprofLayoutError(
                    _layout_message(
                        f"the {what} table of {tool} has no propert{'y' if len(missing_p) == 1 else 'ies'} "
                        f"{missing_p}"
                    )
                )
            return table
    closest = max(candidates, key=lambda t: len(set(required) & set(_col_ids(t))), default={})
    missing = [c for c in required if c not in _col_ids(closest)]
    raise XprofLayoutError(
        _layout_message(
            f"{tool} has no {what} table with column ids {list(required)}; the closest "
            f"table lacks {missing} (it has {_col_ids(closest)})"
        )
    )


def check_layout(tool_tables: Mapping[str, object]) -> None:
    """Check that every table in `EXPECTED_COLUMNS` is present.

    Raises:
      XprofLayoutError: A table, column id or property is missing.
    """
    for tool, tables in EXPECTED_COLUMNS.items():
        if tool not in tool_tables:
            raise XprofLayoutError(_layout_message(f"no output for tool {tool}"))
        alternatives = {b: a for a, b in ONE_OF.get(tool, ())}
        for what in tables:
            if what in alternatives:
                continue  # checked with the table it stands in for
            find_table_of(tool_tables[tool], tool, what)


def find_table_of(tables: Any, tool: str, what: str) -> tuple[str, Mapping[str, object]]:
    """``(which, table)``: the table ``what`` of a tool's output, or the one that
    stands in for it (`ONE_OF`).

    Raises:
      XprofLayoutError: Neither is there.
    """
    try:
        return what, find_table(tables, tool, what)
    except XprofLayoutError:
        other = dict(ONE_OF.get(tool, ())).get(what)
        if other is None or find_table_with(tables, EXPECTED_COLUMNS[tool][other]) is None:
            raise
        return other, find_table(tables, tool, other)


def table_rows(table: Mapping[str, object]) -> list[dict[str, object]]:
    """The rows of a gviz table as ``{column id: value}`` dicts."""
    ids = _col_ids(table)
    out = []
    for row in table.get("rows", []):
        cells = row.get("c", []) if isinstance(row, Mapping) else []
        out.append(
            {
                cid: (cell.get("v") if isinstance(cell, Mapping) else None)
                for cid, cell in zip(ids, cells, strict=False)
            }
        )
    return out


def cell_number(value: Any) -> float:
    """A table cell as a float (0.0 when empty or not a number)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def find_table_with(tables: Any, columns: Sequence[str]) -> Mapping[str, object] | None:
    """The first table holding all ``columns`` (ids), or None."""
    if not isinstance(tables, list):
        return None
    for table in tables:
        if isinstance(table, Mapping) and set(columns) <= set(_col_ids(table)):
            return table
    return None
