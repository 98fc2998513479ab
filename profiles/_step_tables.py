"""xprof's step tables of a profile run read (the ``input_pipeline_analyzer`` and
``overview_page`` converters): the steps (the GPU/CPU step breakdown, or TPU's), their
summary, the input operations, xprof's recommendation and what its tables say is
missing (diagnostics)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from profiles._jax_trace import JaxDeviceTime
from profiles._results import InputOp, Spread, StepTime
from profiles._xprof import (
    cell_number,
    check_layout,
    find_table,
    find_table_of,
    find_table_with,
    table_rows,
    xprof_tables,
)


def xprof_steps(trace: Any) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """xprof's tables of ``trace`` (their layout checked), the step table's properties
    and its steps (GPU/CPU step breakdown, or TPU's)."""
    tools = xprof_tables(
        trace.paths, ("input_pipeline_analyzer", "overview_page", "framework_op_stats")
    )
    check_layout(tools)
    ipa = tools["input_pipeline_analyzer"]
    layout, step_table = find_table_of(ipa, "input_pipeline_analyzer", "step breakdown")
    steps = _steps(step_table) if layout == "step breakdown" else _tpu_steps(step_table)
    return tools, step_table.get("p") or {}, steps


def _steps(step_table: Mapping[str, object]) -> tuple[StepTime, ...]:
    """xprof's per-step breakdown, without empty steps."""
    steps = (
        StepTime(
            step=str(r["stepnum"]),
            step_ms=cell_number(r["stepTimeMs"]),
            input_ms=cell_number(r["infeedTimeMs"]),
            host_compute_ms=cell_number(r["hostComputeTimeMs"]),
            device_compute_ms=cell_number(r["deviceComputeTimeMs"]),
            device_to_device_ms=cell_number(r["deviceToDeviceTimeMs"]),
            collectives_ms=cell_number(r["deviceCollectivesTimeMs"]),
            kernel_launch_ms=cell_number(r["kernelLaunchTimeMs"]),
            output_ms=cell_number(r["outfeedTimeMs"]),
            compile_ms=cell_number(r["compileTimeMs"]),
            other_ms=cell_number(r["otherTimeMs"]),
        )
        for r in table_rows(step_table)
    )
    return tuple(s for s in steps if s.step_ms > 0)


def _tpu_steps(step_table: Mapping[str, object]) -> tuple[StepTime, ...]:
    """xprof's per-step breakdown on a TPU (the TensorCore's: compute, infeed, outfeed,
    idle, and the host's transfers), without empty steps."""
    steps = []
    for r in table_rows(step_table):
        compute, infeed = cell_number(r["tcComputeTimeMs"]), cell_number(r["tcInfeedTimeMs"])
        outfeed, idle = cell_number(r["tcOutfeedTimeMs"]), cell_number(r["tcIdleTimeMs"])
        step_ms = compute + infeed + outfeed + idle
        if step_ms <= 0:
            continue
        steps.append(
            StepTime(
                step=str(r["stepnum"]),
                step_ms=step_ms,
                input_ms=infeed,
                host_compute_ms=0.0,
                device_compute_ms=compute,
                device_to_device_ms=0.0,
                collectives_ms=0.0,
                kernel_launch_ms=0.0,
                output_ms=outfeed,
                compile_ms=0.0,
                other_ms=idle,
                host_to_device_ms=cell_number(r["hostTransferTimeMs"]),
            )
        )
    return tuple(steps)


def xprof_diagnostics(
    ipa: Any,
    *,
    steps: Sequence[StepTime],
    markers: Mapping[str, int],
    jax: JaxDeviceTime | None = None,
) -> list[str]:
    """Marked steps xprof could not use, where the steps came from instead (``jax``:
    the JAX trace they were read from), and xprof's own messages."""
    diagnostics = []
    if jax is not None:
        what = "step markers" if jax.steps_from == "markers" else "jitted step's executions"  # type: ignore[union-attr]
        diagnostics.append(
            "xprof found no complete step in TensorFlow's trace (the steps run no "
            f"TensorFlow op): the steps are read from JAX's trace (its {what})"
            + (
                ""
                if jax.input_from  # type: ignore[union-attr]
                else "; it shows no wait for input (no next() spans, no input stages on "
                "the step's thread), so whether the input limits training cannot be told"
            )
            + "."
        )
    elif not steps and all(n > 0 for n in markers.values()):
        diagnostics.append(
            f"the trace has step markers ({sum(markers.values())}) but xprof found no "
            "complete step (it leaves out steps cut by the profiler's start or stop): "
            "profile at least 3 steps (10 is a good number) after a warm-up."
        )
    for row in table_rows(find_table_with(ipa, ("severity", "message")) or {}):
        message = str(row.get("message", ""))
        if message and "No step marker" not in message:
            diagnostics.append(f"xprof {str(row.get('severity', '')).lower()}: {message}")
    return diagnostics


def xprof_input_ops(ipa: Any) -> tuple[InputOp, ...]:
    return tuple(
        InputOp(
            name=str(r["opName"]),
            count=int(cell_number(r["count"])),
            time_ms=cell_number(r["timeInMs"]),
            self_time_ms=cell_number(r["selfTimeInMs"]),
            self_fraction=cell_number(r.get("selfTimeInPercent")),
            category=str(r["category"]),
        )
        for r in table_rows(find_table(ipa, "input_pipeline_analyzer", "input ops"))
    )


def xprof_recommendation(overview_tables: Any) -> str:
    overview = find_table(overview_tables, "overview_page", "recommendation")
    return str((overview.get("p") or {}).get("statement", ""))


def step_summary(
    steps: Sequence[StepTime], hardware: str
) -> tuple[Spread | None, Spread | None, float | None, float | None]:
    """``(step time, input wait, host compute, device compute)`` over the steps."""
    if not steps:
        return None, None, None, None
    total_step = sum(s.step_ms for s in steps)
    step_time = Spread.of([s.step_ms for s in steps])
    input_wait = Spread.of(
        [s.input_fraction for s in steps],
        average=sum(s.input_ms for s in steps) / total_step if total_step else 0.0,
    )
    host_compute = sum(s.host_compute_ms for s in steps) / len(steps)
    has_device = hardware not in ("", "CPU_ONLY", "UNKNOWN_HARDWARE")
    device_compute = sum(s.device_compute_ms for s in steps) / len(steps) if has_device else None
    return step_time, input_wait, host_compute, device_compute
