"""Offline analysis of a TensorBoard profile log directory.

`analyze` finds the ``<host>.xplane.pb`` files of one profile run, converts them with
xprof's own offline converters (``input_pipeline_analyzer`` for the per-step
breakdown and xprof's conclusion, ``overview_page`` for its recommendation) and
rebuilds the tf.data stage timings from the trace events (`profiles.stages`). The
result is a tree of frozen dataclasses with a JSON form (`ProfileAnalysis.to_dict`).

xprof returns gviz tables; they are found by their column ids, never by position.
The column ids read here are listed in `EXPECTED_COLUMNS` and were checked against
the xprof versions in `TESTED_XPROF`; if an xprof release renames or drops one,
`XprofLayoutError` says so with both versions instead of returning wrong numbers.

The log directory is never written to: xprof caches its intermediate results next
to the trace files, so the conversion runs on links to them in a temporary directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from profiles._xplane import XSpaceFile, host_planes, load_xspace, stat_value
from profiles.errors import ProfileError, XprofLayoutError
from profiles.stages import SLOW_CALL_US, Bottleneck, PipelineStages, rebuild_stages

__all__ = [
    "CAPTURE_METADATA",
    "EXPECTED_COLUMNS",
    "TESTED_XPROF",
    "Comparison",
    "InputOp",
    "ProfileAnalysis",
    "Spread",
    "StepTime",
    "TraceRun",
    "analyze",
    "check_layout",
    "compare",
    "find_table",
    "find_trace",
    "version_in_range",
    "xprof_tables",
    "xprof_version",
]

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
        "input ops": ("opName", "count", "timeInMs", "selfTimeInMs", "category"),
    },
    "overview_page": {
        "recommendation": ("tip_type", "link", "description"),
        "run environment": ("host_id", "command_line"),
    },
}

#: Table properties read (``p`` of the tables above).
_EXPECTED_PROPERTIES: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("input_pipeline_analyzer", "step breakdown"): ("input_conclusion", "hardware_type"),
    ("overview_page", "recommendation"): ("statement",),
}

#: File written next to the trace by `profiles.capture` to record how it was taken.
CAPTURE_METADATA = "tfinput_capture.json"

_HOW_TO_MARK = (
    "Mark each training step: `with tf.profiler.experimental.Trace('train', step_num=i, "
    "_r=1): batch = next(it); step(batch)` with next() inside the block; "
    "`tfinput profile` and profiles.capture() do this for you."
)
_HOW_TO_CAPTURE = (
    "Capture one with `tfinput profile --logdir DIR ...` or profiles.capture(), or with "
    "tf.profiler.experimental.start(DIR) ... stop() around marked steps."
)


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


# ------------------------------------------------------------------ result types
@dataclasses.dataclass(frozen=True, kw_only=True)
class Spread:
    """Average, extremes and standard deviation of a per-step quantity."""

    average: float
    minimum: float
    maximum: float
    stddev: float = 0.0

    @classmethod
    def of(cls, values: Sequence[float], *, average: float | None = None) -> Spread:
        """Summarise ``values``; ``average`` overrides the plain mean (for ratios)."""
        mean = sum(values) / len(values)
        var = sum((x - mean) ** 2 for x in values) / len(values)
        return cls(
            average=mean if average is None else average,
            minimum=min(values),
            maximum=max(values),
            stddev=var**0.5,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepTime:
    """xprof's breakdown of one marked training step, in milliseconds.

    Attributes:
      step: xprof's step name (``"train 3"``).
      step_ms: Duration of the step.
      input_ms: Time the step waited for input (xprof's "Input").
      host_compute_ms: TensorFlow ops run on the host (on a CPU-only run: the model).
      device_compute_ms: Time the accelerator computed (0 without one).
      device_to_device_ms, collectives_ms, kernel_launch_ms, output_ms, compile_ms:
        xprof's other categories.
      other_ms: Everything xprof could not attribute ("All others": Python, sleeps,
        a simulated device step).
    """

    step: str
    step_ms: float
    input_ms: float
    host_compute_ms: float
    device_compute_ms: float
    device_to_device_ms: float
    collectives_ms: float
    kernel_launch_ms: float
    output_ms: float
    compile_ms: float
    other_ms: float

    @property
    def input_fraction(self) -> float:
        """Fraction of the step spent waiting for input."""
        return self.input_ms / self.step_ms if self.step_ms > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (with ``input_fraction``)."""
        return {**dataclasses.asdict(self), "input_fraction": self.input_fraction}


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputOp:
    """One row of xprof's input-op table (host time per ``Iterator::`` event name)."""

    name: str
    count: int
    time_ms: float
    self_time_ms: float
    self_fraction: float
    category: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class TraceRun:
    """The trace files of one profile run.

    Attributes:
      logdir: The directory given by the user.
      run: The run's name (its directory relative to ``logdir``).
      run_dir: Directory holding the ``.xplane.pb`` files.
      hosts: Host names (from the file names), sorted.
      paths: One ``.xplane.pb`` per host, in ``hosts`` order.
      other_runs: Other runs found under ``logdir`` (not analysed).
    """

    logdir: Path
    run: str
    run_dir: Path
    hosts: tuple[str, ...]
    paths: tuple[Path, ...]
    other_runs: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProfileAnalysis:
    """Everything `analyze` found in one profile run.

    Attributes:
      logdir: Directory analysed.
      run: Profile run name (see `TraceRun`).
      hosts: Hosts in the run.
      trace_files: The ``.xplane.pb`` files read.
      xprof_version: xprof used for the conversion.
      hardware: xprof's hardware type (``CPU_ONLY``, ``GPU``, ``TPU``).
      steps: xprof's per-step breakdown (xprof may leave out a step cut by the
        profiler's start or stop).
      step_time_ms: Spread of step time, or None without steps.
      input_wait: Fraction of step time spent waiting for input: ``average`` is total
        input time over total step time (xprof's own figure), ``minimum`` and
        ``maximum`` are per step. None without steps.
      host_compute_ms: Average host compute per step, or None without steps.
      device_compute_ms: Average device compute per step; None on a CPU-only run or
        without steps.
      simulated_device_ms: Device time per step of a simulated accelerator step (from
        the capture metadata), or None. xprof counts it as "All others".
      xprof_conclusion: xprof's input-bound verdict (``input_conclusion``).
      xprof_recommendation: xprof's overall statement (overview page).
      xprof_input_ops: xprof's table of input ops (host time per iterator name).
      pipelines: Rebuilt tf.data stages, per host and input pipeline; the one the
        training loop waited on longest first.
      step_markers: Number of step-marker events found per host.
      diagnostics: Messages about what is missing or suspicious, each saying how to
        fix it. Empty for a complete trace.
      capture: What `profiles.capture` recorded about the run (TF version, cores,
        warm-up, steps, step kind), or None for traces captured otherwise.
    """

    logdir: str
    run: str
    hosts: tuple[str, ...]
    trace_files: tuple[str, ...]
    xprof_version: str
    hardware: str
    steps: tuple[StepTime, ...]
    step_time_ms: Spread | None
    input_wait: Spread | None
    host_compute_ms: float | None
    device_compute_ms: float | None
    simulated_device_ms: float | None
    xprof_conclusion: str
    xprof_recommendation: str
    xprof_input_ops: tuple[InputOp, ...]
    pipelines: tuple[PipelineStages, ...]
    step_markers: Mapping[str, int]
    diagnostics: tuple[str, ...]
    capture: Mapping[str, Any] | None = None

    @property
    def is_complete(self) -> bool:
        """True when there are analysed steps and rebuilt tf.data stages."""
        return bool(self.steps) and bool(self.pipelines)

    @property
    def main_pipeline(self) -> PipelineStages | None:
        """The input pipeline the training loop waited on longest (any host)."""
        return max(self.pipelines, key=lambda p: p.input_ms, default=None)

    @property
    def bottleneck(self) -> Bottleneck | None:
        """The bottleneck stage of `main_pipeline`."""
        main = self.main_pipeline
        return main.bottleneck if main else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return _jsonable(
            {
                **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                "bottleneck": self.bottleneck,
                "is_complete": self.is_complete,
                "tested_xprof": TESTED_XPROF,
            }
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Comparison:
    """Two analyses side by side (``before`` -> ``after``).

    Attributes:
      before: The reference run.
      after: The changed run.
      input_wait_change: Change of the average input-wait fraction (after - before,
        in fraction points), or None when either run has no steps.
      step_time_ratio: ``after / before`` of the average step time, or None.
      caveats: Differences in how the two runs were captured (machine, TensorFlow,
        step kind, steps) that make the numbers not directly comparable.
    """

    before: ProfileAnalysis
    after: ProfileAnalysis
    input_wait_change: float | None
    step_time_ratio: float | None
    caveats: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "input_wait_change": self.input_wait_change,
            "step_time_ratio": self.step_time_ratio,
            "caveats": list(self.caveats),
        }


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "to_dict") and not isinstance(obj, type):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


# -------------------------------------------------------------- finding traces
def _runs_under(root: Path) -> dict[Path, list[Path]]:
    runs: dict[Path, list[Path]] = {}
    for path in sorted(root.rglob("*.xplane.pb")):
        if path.is_file():
            runs.setdefault(path.parent, []).append(path)
    return runs


def find_trace(
    logdir: str | os.PathLike[str], *, run: str | None = None, host: str | None = None
) -> TraceRun:
    """Locate the trace files of one profile run.

    ``logdir`` may be a TensorBoard log directory (``logdir/plugins/profile/<run>/``,
    at any depth), a run directory, or one ``.xplane.pb`` file.

    Args:
      logdir: Where to look.
      run: Run to pick when there are several (name, relative path, or its last
        part); default: the newest.
      host: Only this host's file (default: every host of the run).

    Raises:
      ProfileError: Nothing usable found; the message says what was looked for.
    """
    root = Path(logdir)
    if not root.exists():
        raise ProfileError(f"{root} does not exist. {_HOW_TO_CAPTURE}")
    if root.is_file():
        if not root.name.endswith(".xplane.pb"):
            raise ProfileError(
                f"{root} is not a profiler trace: expected a <host>.xplane.pb file or a "
                f"log directory. {_HOW_TO_CAPTURE}"
            )
        runs = {root.parent: [root]}
        base = root.parent
    else:
        runs = _runs_under(root)
        base = root
    if not runs:
        others = sorted({p.suffix for p in root.rglob("*") if p.is_file()}) if root.is_dir() else []
        extra = ""
        if any(p.name.endswith(".xplane.riegeli") for p in root.rglob("*")):
            extra = " (found .xplane.riegeli files: only .xplane.pb is supported)"
        raise ProfileError(
            f"no profiler trace (*.xplane.pb) under {root}{extra}; files there have "
            f"suffixes {others or 'none'}. {_HOW_TO_CAPTURE}"
        )

    def name_of(run_dir: Path) -> str:
        try:
            rel = run_dir.relative_to(base).as_posix()
        except ValueError:
            rel = run_dir.name
        return run_dir.name if rel in ("", ".") else rel

    names = {name_of(d): d for d in runs}
    if run is not None:
        matches = [n for n in names if run in (n, Path(n).name) or n.endswith("/" + run)]
        if not matches:
            raise ProfileError(f"no profile run {run!r} under {root}; runs: {sorted(names)}")
        chosen = matches[0]
    else:
        # Newest run: the one whose trace files were written last.
        chosen = max(names, key=lambda n: (max(p.stat().st_mtime for p in runs[names[n]]), n))
    run_dir = names[chosen]
    files = sorted(runs[run_dir])
    from profiles._xplane import host_name_of

    hosts = [host_name_of(p) for p in files]
    if host is not None:
        if host not in hosts:
            raise ProfileError(f"no host {host!r} in run {chosen}; hosts: {hosts}")
        files = [files[hosts.index(host)]]
        hosts = [host]
    return TraceRun(
        logdir=root,
        run=chosen,
        run_dir=run_dir,
        hosts=tuple(hosts),
        paths=tuple(files),
        other_runs=tuple(sorted(n for n in names if n != chosen)),
    )


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


def xprof_tables(paths: Sequence[str | os.PathLike[str]], tools: Sequence[str]) -> dict[str, Any]:
    """Run xprof's offline converters on trace files.

    Args:
      paths: ``.xplane.pb`` files (one per host).
      tools: xprof tool names, e.g. ``("input_pipeline_analyzer", "overview_page")``.

    Returns:
      ``{tool: parsed JSON}`` (a list of gviz tables for the tools above).

    Raises:
      ProfileError: xprof is missing or could not convert the files (its log message
        is included).
    """
    try:
        with _stderr_captured():  # loading xprof's library logs to stderr once
            from xprof.convert import raw_to_tool_data
    except ImportError as e:
        raise ProfileError(
            f"xprof is needed to analyse traces: pip install 'xprof{TESTED_XPROF}' ({e})"
        ) from e
    out: dict[str, Any] = {}
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
                    links, tool, {"use_saved_result": True}
                )
            if data is None:
                names = ", ".join(str(p) for p in paths)
                raise ProfileError(
                    f"xprof {xprof_version()} could not convert {names} with "
                    f"{tool}: {_xprof_errors(log)}. The trace is probably truncated or "
                    f"not a TensorFlow profile. {_HOW_TO_CAPTURE}"
                )
            try:
                out[tool] = json.loads(data)
            except (TypeError, ValueError) as e:
                raise XprofLayoutError(_layout_message(f"{tool} did not return JSON ({e})")) from e
    return out


def _layout_message(problem: str) -> str:
    return (
        f"xprof {xprof_version()} output changed: {problem}. profiles reads xprof "
        f"{TESTED_XPROF} (see profiles.analysis.TESTED_XPROF and EXPECTED_COLUMNS): "
        "install a tested xprof or update profiles/analysis.py."
    )


def _col_ids(table: Mapping[str, Any]) -> list[str]:
    return [str(c.get("id")) for c in table.get("cols", []) if isinstance(c, Mapping)]


def find_table(tables: Any, tool: str, what: str) -> Mapping[str, Any]:
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


def check_layout(tool_tables: Mapping[str, Any]) -> None:
    """Check that every table in `EXPECTED_COLUMNS` is present.

    Raises:
      XprofLayoutError: A table, column id or property is missing.
    """
    for tool, tables in EXPECTED_COLUMNS.items():
        if tool not in tool_tables:
            raise XprofLayoutError(_layout_message(f"no output for tool {tool}"))
        for what in tables:
            find_table(tool_tables[tool], tool, what)


def _rows(table: Mapping[str, Any]) -> list[dict[str, Any]]:
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


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


# ------------------------------------------------------------------- analysis
def _step_markers(xfile: XSpaceFile) -> int:
    count = 0
    for plane in host_planes(xfile.space):
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        r_ids = {k for k, n in names.items() if n == "_r"}
        step_ids = {k for k, n in names.items() if n == "step_num"}
        if not r_ids or not step_ids:
            continue
        for line in plane.lines:
            for e in line.events:
                has_step = is_root = False
                for stat in e.stats:
                    if stat.metadata_id in step_ids:
                        has_step = True
                    elif stat.metadata_id in r_ids and stat_value(stat, names) == 1:
                        is_root = True
                if has_step and is_root:
                    count += 1
    return count


def _read_capture(run_dir: Path) -> Mapping[str, Any] | None:
    path = run_dir / CAPTURE_METADATA
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def analyze(
    logdir: str | os.PathLike[str],
    *,
    run: str | None = None,
    host: str | None = None,
    slow_call_us: float = SLOW_CALL_US,
) -> ProfileAnalysis:
    """Analyse one profile run: step breakdown, input wait, stages and bottleneck.

    Args:
      logdir: Log directory, run directory or ``.xplane.pb`` file (see `find_trace`).
      run: Which run when ``logdir`` holds several (default: the newest).
      host: Only this host (default: all; xprof combines hosts step by step).
      slow_call_us: A tf.data call longer than this counts as slow (microseconds).

    Returns:
      A `ProfileAnalysis`. Missing pieces (no step markers, no tf.data events, several
      hosts or runs, an untested xprof) are reported in ``diagnostics``.

    Raises:
      ProfileError: No trace, or a trace that cannot be read (empty, truncated,
        foreign), or xprof missing.
      XprofLayoutError: xprof's tables lack the expected column ids.
    """
    trace = find_trace(logdir, run=run, host=host)
    try:
        xfiles = [load_xspace(p) for p in trace.paths]
    except ProfileError as e:
        if not trace.other_runs:
            raise
        raise ProfileError(
            f"{e} Other profile runs under {trace.logdir}: {', '.join(trace.other_runs)}; "
            "pick one with --run NAME (run=...)."
        ) from e
    diagnostics: list[str] = []

    version = xprof_version() or "not installed"
    if version != "not installed" and not version_in_range(version, TESTED_XPROF):
        diagnostics.append(
            f"xprof {version} is outside the tested range {TESTED_XPROF}; the analysis "
            "checks xprof's column ids but its numbers may mean something else."
        )
    if trace.other_runs and run is None:
        diagnostics.append(
            f"{len(trace.other_runs) + 1} profile runs under {trace.logdir}; analysed the "
            f"newest, {trace.run} (others: {', '.join(trace.other_runs)}). Pick one with "
            "--run NAME (run=...)."
        )
    if len(trace.hosts) > 1:
        diagnostics.append(
            f"{len(trace.hosts)} hosts in run {trace.run} ({', '.join(trace.hosts)}): the "
            "step breakdown is xprof's view combined over all hosts (steps present on "
            "every host); stages are rebuilt per host. Analyse one host with --host NAME "
            "(host=...)."
        )
    for xf in xfiles:
        for err in xf.space.errors:
            diagnostics.append(f"host {xf.host}: the profiler reported an error: {err}")
        for warn in xf.space.warnings:
            diagnostics.append(f"host {xf.host}: the profiler reported: {warn}")
        if not any(True for _ in host_planes(xf.space)):
            diagnostics.append(
                f"host {xf.host}: the trace has no /host: plane (only "
                f"{[p.name for p in xf.space.planes]}), so there are no step markers or "
                "tf.data events to read. Capture with the host tracer on (the default)."
            )

    markers = {xf.host: _step_markers(xf) for xf in xfiles}
    for h, n in markers.items():
        if n == 0:
            diagnostics.append(
                f"host {h}: no step markers in the trace, so xprof cannot split step time "
                f"into input, compute and other. {_HOW_TO_MARK}"
            )

    tools = xprof_tables(trace.paths, ("input_pipeline_analyzer", "overview_page"))
    check_layout(tools)
    ipa = tools["input_pipeline_analyzer"]
    step_table = find_table(ipa, "input_pipeline_analyzer", "step breakdown")
    props = step_table.get("p") or {}
    steps = tuple(
        StepTime(
            step=str(r["stepnum"]),
            step_ms=_num(r["stepTimeMs"]),
            input_ms=_num(r["infeedTimeMs"]),
            host_compute_ms=_num(r["hostComputeTimeMs"]),
            device_compute_ms=_num(r["deviceComputeTimeMs"]),
            device_to_device_ms=_num(r["deviceToDeviceTimeMs"]),
            collectives_ms=_num(r["deviceCollectivesTimeMs"]),
            kernel_launch_ms=_num(r["kernelLaunchTimeMs"]),
            output_ms=_num(r["outfeedTimeMs"]),
            compile_ms=_num(r["compileTimeMs"]),
            other_ms=_num(r["otherTimeMs"]),
        )
        for r in _rows(step_table)
    )
    steps = tuple(s for s in steps if s.step_ms > 0)
    hardware = str(props.get("hardware_type", ""))
    if not steps and all(n > 0 for n in markers.values()):
        diagnostics.append(
            f"the trace has step markers ({sum(markers.values())}) but xprof found no "
            "complete step (it leaves out steps cut by the profiler's start or stop): "
            "profile at least 3 steps (10 is a good number) after a warm-up."
        )
    for row in _rows(_find_table_or_none(ipa, ("severity", "message")) or {}):
        message = str(row.get("message", ""))
        if message and "No step marker" not in message:
            diagnostics.append(f"xprof {str(row.get('severity', '')).lower()}: {message}")

    input_ops = tuple(
        InputOp(
            name=str(r["opName"]),
            count=int(_num(r["count"])),
            time_ms=_num(r["timeInMs"]),
            self_time_ms=_num(r["selfTimeInMs"]),
            self_fraction=_num(r.get("selfTimeInPercent")),
            category=str(r["category"]),
        )
        for r in _rows(find_table(ipa, "input_pipeline_analyzer", "input ops"))
    )
    overview = find_table(tools["overview_page"], "overview_page", "recommendation")
    recommendation = str((overview.get("p") or {}).get("statement", ""))

    if steps:
        total_step = sum(s.step_ms for s in steps)
        step_time = Spread.of([s.step_ms for s in steps])
        input_wait = Spread.of(
            [s.input_fraction for s in steps],
            average=sum(s.input_ms for s in steps) / total_step if total_step else 0.0,
        )
        host_compute = sum(s.host_compute_ms for s in steps) / len(steps)
        has_device = hardware not in ("", "CPU_ONLY", "UNKNOWN_HARDWARE")
        device_compute = (
            sum(s.device_compute_ms for s in steps) / len(steps) if has_device else None
        )
    else:
        step_time = input_wait = None
        host_compute = device_compute = None

    pipelines: list[PipelineStages] = []
    for xf in xfiles:
        found = rebuild_stages(xf.space, host=xf.host, slow_call_us=slow_call_us)
        if not found:
            diagnostics.append(
                f"host {xf.host}: no tf.data iterator events (Iterator::...) in the trace, so "
                "the pipeline stages cannot be rebuilt. Iterate a tf.data.Dataset inside "
                "the profiled steps (next() inside the step marker), with the profiler's "
                "default host tracer level (2)."
            )
        pipelines.extend(found)

    capture = _read_capture(trace.run_dir)
    simulated = None
    if capture:
        step_info = capture.get("step") or {}
        if step_info.get("kind") == "simulated" and step_info.get("device_time_s"):
            simulated = float(step_info["device_time_s"]) * 1e3

    return ProfileAnalysis(
        logdir=str(trace.logdir),
        run=trace.run,
        hosts=trace.hosts,
        trace_files=tuple(str(p) for p in trace.paths),
        xprof_version=version,
        hardware=hardware,
        steps=steps,
        step_time_ms=step_time,
        input_wait=input_wait,
        host_compute_ms=host_compute,
        device_compute_ms=device_compute,
        simulated_device_ms=simulated,
        xprof_conclusion=str(props.get("input_conclusion", "")),
        xprof_recommendation=recommendation,
        xprof_input_ops=input_ops,
        pipelines=tuple(pipelines),
        step_markers=markers,
        diagnostics=tuple(diagnostics),
        capture=capture,
    )


def _find_table_or_none(tables: Any, columns: Sequence[str]) -> Mapping[str, Any] | None:
    """The first table holding all ``columns`` (ids), or None."""
    if not isinstance(tables, list):
        return None
    for table in tables:
        if isinstance(table, Mapping) and set(columns) <= set(_col_ids(table)):
            return table
    return None


def compare(
    before: ProfileAnalysis | str | os.PathLike[str],
    after: ProfileAnalysis | str | os.PathLike[str],
) -> Comparison:
    """Compare two profile runs (analysing log directories given as paths).

    Args:
      before: The reference analysis (or its log directory).
      after: The changed analysis (or its log directory).
    """
    a = before if isinstance(before, ProfileAnalysis) else analyze(before)
    b = after if isinstance(after, ProfileAnalysis) else analyze(after)
    wait = b.input_wait.average - a.input_wait.average if a.input_wait and b.input_wait else None
    ratio = (
        b.step_time_ms.average / a.step_time_ms.average
        if a.step_time_ms and b.step_time_ms and a.step_time_ms.average > 0
        else None
    )
    return Comparison(
        before=a,
        after=b,
        input_wait_change=wait,
        step_time_ratio=ratio,
        caveats=_capture_differences(a.capture, b.capture),
    )


def _capture_differences(
    a: Mapping[str, Any] | None, b: Mapping[str, Any] | None
) -> tuple[str, ...]:
    if not a or not b:
        missing = [tag for tag, cap in (("A", a), ("B", b)) if not cap]
        return (
            f"run {' and '.join(missing)} has no tfinput_capture.json: how it was captured is "
            "unknown, compare with care",
        )
    fields = {
        "host": lambda c: c.get("host"),
        "CPUs": lambda c: c.get("cpu_count"),
        "TensorFlow": lambda c: c.get("tensorflow"),
        "step": lambda c: (c.get("step") or {}).get("name"),
        "profiled steps": lambda c: (c.get("config") or {}).get("steps"),
        "warm-up": lambda c: (c.get("config") or {}).get("warmup"),
    }
    diffs = [f"{name} {get(a)} vs {get(b)}" for name, get in fields.items() if get(a) != get(b)]
    if not diffs:
        return ()
    return (f"A and B were captured differently ({'; '.join(diffs)}): compare with care",)
