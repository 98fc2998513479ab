"""Offline analysis of a TensorBoard profile log directory.

`analyze` finds the ``<host>.xplane.pb`` files of one profile run, converts them with
xprof's own offline converters (``input_pipeline_analyzer`` for the per-step
breakdown and xprof's conclusion, ``overview_page`` for its recommendation,
``framework_op_stats`` for the operations' self times) and rebuilds the tf.data stage
timings from the trace events (`profiles._stages`). When TensorFlow's trace has no
complete step, the steps are read from JAX's trace (`profiles._jax_trace`). It adds
what the step spends besides input (`profiles._op_stats`) and xprof's host-bound rule
(`profiles._host_bound`). The result is a tree of frozen dataclasses with a JSON form
(`ProfileAnalysis.to_dict`).

xprof returns gviz tables; they are found by their column ids, never by position.
The column ids read here are listed in `EXPECTED_COLUMNS` and were checked against
the xprof versions in `TESTED_XPROF`; if an xprof release renames or drops one,
`XprofLayoutError` says so with both versions instead of returning wrong numbers.

The log directory is never written to: xprof caches its intermediate results next
to the trace files, so the conversion runs on links to them in a temporary directory.

This module holds `analyze` and `compare`; the pieces they use live in private
modules by job: finding the run (`profiles._xplane`), the result types
(`profiles._results`) and xprof's converters and table layout (`profiles._xprof`),
each imported from the module that defines it (`import profiles` for the public names).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from profiles._host_bound import check as check_host_bound
from profiles._jax_trace import JaxDeviceTime, device_time_of, jax_trace_file
from profiles._op_stats import TOP_OPS, dense_work, framework_op_rows, framework_ops, xla_ops
from profiles._results import Comparison, InputOp, ProfileAnalysis, StepTime
from profiles._stages import SLOW_CALL_US, PipelineStages, rebuild_stages
from profiles._step_tables import (
    step_summary,
    xprof_diagnostics,
    xprof_input_ops,
    xprof_recommendation,
    xprof_steps,
)
from profiles._trace_events import annotated_stages
from profiles._xplane import (
    ProfileError,
    TraceRun,
    XSpaceFile,
    find_trace,
    host_planes,
    load_xspace,
    stat_value,
)
from profiles._xprof import (
    TESTED_XPROF,
    version_in_range,
    xprof_tables,
    xprof_version,
)

#: File written next to the trace by `profiles.capture` to record how it was taken.
CAPTURE_METADATA = "tfinput_capture.json"

_HOW_TO_MARK = (
    "Mark each training step: `with tf.profiler.experimental.Trace('train', step_num=i, "
    "_r=1): batch = next(it); step(batch)` with next() inside the block; "
    "`tfinput profile` and profiles.capture() do this for you."
)


# ------------------------------------------------------------------- analysis
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
    xfiles = _load_traces(trace)
    version = xprof_version() or "not installed"
    diagnostics = _run_diagnostics(trace, xfiles, version=version, run_given=run is not None)
    markers = {xf.host: _step_markers(xf) for xf in xfiles}
    diagnostics += _marker_diagnostics(markers)

    tools, props, steps = xprof_steps(trace)
    ipa = tools["input_pipeline_analyzer"]
    hardware = str(props.get("hardware_type", ""))
    capture = _read_capture(trace.run_dir)
    jax, jax_space = _jax_trace(trace, xfiles, capture, tf_steps=bool(steps))
    steps, step_source = _steps_and_source(steps, jax, capture)
    diagnostics += xprof_diagnostics(
        ipa, steps=steps, markers=markers, jax=jax if step_source != "xprof" else None
    )
    step_time, input_wait, host_compute, device_compute = step_summary(steps, hardware)
    if step_source != "xprof":  # the host's time and, unless JAX's trace shows it, the wait
        host_compute = None
        input_wait = input_wait if jax.input_from else None  # type: ignore[union-attr]
    pipelines, missing = _rebuild_pipelines(xfiles, slow_call_us=slow_call_us)
    diagnostics += missing
    step_ms = step_time.average if step_time else None
    input_ops = xprof_input_ops(ipa)
    host_stages = _host_stages(trace, xfiles, capture)
    ops = (*input_ops, *host_stages)
    top_ops, dense = _ops(tools, ops, capture, steps, step_ms, jax, jax_space)
    return ProfileAnalysis(
        jax_device=jax,
        host_stages=host_stages,
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
        simulated_device_ms=_simulated_device_ms(capture),
        xprof_conclusion=str(props.get("input_conclusion", "")),
        xprof_recommendation=xprof_recommendation(tools["overview_page"]),
        xprof_input_ops=input_ops,
        pipelines=pipelines,
        step_markers=markers,
        diagnostics=tuple(diagnostics),
        capture=capture,
        step_source=step_source,
        top_ops=top_ops,
        dense_work=dense,
        variables_recorded=capture is not None and "variable_ops" in capture,
        xprof_host_bound=check_host_bound(xfiles, tools["overview_page"], paths=trace.paths),
    )


def _steps_and_source(steps: Any, jax: Any, capture: Any) -> tuple[Any, str]:
    """xprof's steps, or the JAX trace's when xprof found none: the steps and where
    they come from (``xprof``, ``jax <how>``)."""
    if not steps and jax is not None and jax.steps:
        return _jax_steps(jax, _step_name(capture)), f"jax {jax.steps_from}"
    return steps, "xprof"


def _ops(
    tools: Any,
    input_ops: tuple[Any, ...],
    capture: Any,
    steps: Any,
    step_ms: float | None,
    jax: Any,
    jax_space: Any,
) -> tuple[Any, Any]:
    """``(top operations, dense work)`` of the step: xprof's framework ops (the input
    ops left out) and, with a JAX trace, its XLA ops and copies."""
    op_rows = framework_op_rows(tools["framework_op_stats"], input_ops=input_ops)
    top_ops = framework_ops(op_rows, steps=len(steps), step_ms=step_ms)
    dense = dense_work(
        op_rows,
        (capture or {}).get("variable_ops") or (),  # type: ignore[arg-type]
        steps=len(steps),
        step_ms=step_ms,
    )
    if jax is not None and jax_space is not None:
        xla, copies = xla_ops(jax_space, jax.windows, step_ms=step_ms)
        top_ops = tuple(sorted(top_ops + xla, key=lambda o: -o.ms_per_step)[:TOP_OPS])
        dense += copies
    return top_ops, dense


def _load_traces(trace: TraceRun) -> list[XSpaceFile]:
    """Read the run's trace files; on failure, name the other runs there."""
    try:
        return [load_xspace(p) for p in trace.paths]
    except ProfileError as e:
        if not trace.other_runs:
            raise
        raise ProfileError(
            f"{e} Other profile runs under {trace.logdir}: {', '.join(trace.other_runs)}; "
            "pick one with --run NAME (run=...)."
        ) from e


def _run_diagnostics(
    trace: TraceRun, xfiles: Sequence[XSpaceFile], *, version: str, run_given: bool
) -> list[str]:
    """Messages about the xprof version, several runs or hosts, and profiler errors."""
    diagnostics: list[str] = []
    if version != "not installed" and not version_in_range(version, TESTED_XPROF):
        diagnostics.append(
            f"xprof {version} is outside the tested range {TESTED_XPROF}; the analysis "
            "checks xprof's column ids but its numbers may mean something else."
        )
    if trace.other_runs and not run_given:
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
        diagnostics += _profiler_messages(xf)
    return diagnostics


def _profiler_messages(xf: XSpaceFile) -> list[str]:
    """What the profiler itself reported about one host, and a missing host plane."""
    out = [f"host {xf.host}: the profiler reported an error: {err}" for err in xf.space.errors]
    out += [f"host {xf.host}: the profiler reported: {warn}" for warn in xf.space.warnings]
    if not any(True for _ in host_planes(xf.space)):
        out.append(
            f"host {xf.host}: the trace has no /host: plane (only "
            f"{[p.name for p in xf.space.planes]}), so there are no step markers or "
            "tf.data events to read. Capture with the host tracer on (the default)."
        )
    return out


def _step_markers(xfile: XSpaceFile) -> int:
    """Number of step-marker events (``step_num`` and ``_r=1``) in a host's trace."""
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


def _marker_diagnostics(markers: Mapping[str, int]) -> list[str]:
    return [
        f"host {h}: no step markers in the trace, so xprof cannot split step time "
        f"into input, compute and other. {_HOW_TO_MARK}"
        for h, n in markers.items()
        if n == 0
    ]


# --------------------------------------------------------- stages and capture
def _rebuild_pipelines(
    xfiles: Sequence[XSpaceFile], *, slow_call_us: float
) -> tuple[tuple[PipelineStages, ...], list[str]]:
    """Every host's rebuilt pipelines, and a message for each host without any."""
    pipelines: list[PipelineStages] = []
    diagnostics = []
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
    return tuple(pipelines), diagnostics


def _read_capture(run_dir: Path) -> Mapping[str, object] | None:
    path = run_dir / CAPTURE_METADATA
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _step_name(capture: Mapping[str, object] | None) -> str:
    return str(((capture or {}).get("config") or {}).get("step_name") or "train")


def _jax_trace(
    trace: TraceRun,
    xfiles: Sequence[XSpaceFile],
    capture: Mapping[str, object] | None,
    *,
    tf_steps: bool,
) -> tuple[JaxDeviceTime | None, Any]:
    """JAX's trace of the run, read (``(per-step device time, its XSpace)``): the one
    a capture kept (``<run>/jax/``), else, when xprof found no TensorFlow step, the
    run's own trace if JAX wrote it (it holds XLA executions)."""
    if capture and capture.get("jax_trace"):
        path = jax_trace_file(trace.run_dir)
        if path is None:
            return None, None
        space = load_xspace(path).space
        return device_time_of(space, step_name=_step_name(capture), source=str(path)), space
    if tf_steps:
        return None, None
    for xf in xfiles:
        if _has_xla(xf.space):
            step_name = _step_name(capture) if capture else None
            found = device_time_of(xf.space, step_name=step_name, source=str(xf.path))
            return found, xf.space
    return None, None


def _has_xla(space: Any) -> bool:
    """Whether a trace holds XLA executions (events carrying ``hlo_op``)."""
    return any(m.name == "hlo_op" for p in space.planes for m in p.stat_metadata.values())


def _jax_steps(jax: JaxDeviceTime, step_name: str) -> tuple[StepTime, ...]:
    """The steps of JAX's trace as step breakdowns: the wait for input, device
    compute, host-to-device transfer and the rest (they may overlap)."""
    return tuple(
        StepTime(
            step=f"{step_name} {s.step}",
            step_ms=s.step_ms,
            input_ms=s.input_ms,
            host_compute_ms=0.0,
            device_compute_ms=s.compute_ms,
            device_to_device_ms=0.0,
            collectives_ms=0.0,
            kernel_launch_ms=0.0,
            output_ms=0.0,
            compile_ms=0.0,
            other_ms=s.other_ms,
            host_to_device_ms=s.transfer_ms,
        )
        for s in jax.steps
        if s.step_ms > 0
    )


def _host_stages(
    trace: TraceRun, xfiles: Sequence[XSpaceFile], capture: Mapping[str, object] | None
) -> tuple[InputOp, ...]:
    """The annotated host input stages: the SparseCore feed's and `device_prefetch`'s
    (`tfinput.device_prefetch.INPUT_STAGES`), and any a user annotates the same way
    (``_ipl_stage_name``, ``_ipl_stage_id``, ``_ipl_stage_cat``, as Grain does). From
    the JAX trace a capture kept, as xprof's input-pipeline analyzer counts them; else
    from TensorFlow's trace, every annotated span summed (xprof's table there keeps its
    top 20 input ops, which tf.data's iterators may fill)."""
    path = jax_trace_file(trace.run_dir) if capture and capture.get("jax_trace") else None
    if path is not None:
        tools = xprof_tables([path], ("input_pipeline_analyzer",))
        return xprof_input_ops(tools["input_pipeline_analyzer"])
    stages = [s for xf in xfiles for s in annotated_stages(xf.space)]
    total = sum(s.self_ps for s in stages)
    return tuple(
        InputOp(
            name=s.name,
            count=s.count,
            time_ms=s.total_ps / 1e9,
            self_time_ms=s.self_ps / 1e9,
            self_fraction=s.self_ps / total if total else 0.0,
            category=s.category,
        )
        for s in sorted(stages, key=lambda s: -s.self_ps)
    )


def _simulated_device_ms(capture: Mapping[str, object] | None) -> float | None:
    """Device time per step of a simulated accelerator step, from the capture metadata."""
    if not capture:
        return None
    step_info = capture.get("step") or {}
    if step_info.get("kind") == "simulated" and step_info.get("device_time_s"):
        return float(step_info["device_time_s"]) * 1e3
    return None


# ------------------------------------------------------------------ comparing
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
    a: Mapping[str, object] | None, b: Mapping[str, object] | None
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
