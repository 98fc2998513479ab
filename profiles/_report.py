"""Reports of a profile analysis: terminal (rich) and JSON; the self-contained HTML page
is `profiles._html`'s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from profiles._op_stats import DENSE_BYTES
from profiles._results import Comparison, ProfileAnalysis, StepTime
from profiles._stages import PipelineStages

#: Step-breakdown categories shown in reports: (label, StepTime fields, colour).
CATEGORIES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("Input", ("input_ms",), "#d62728"),
    ("Host compute", ("host_compute_ms",), "#1f77b4"),
    ("Device compute", ("device_compute_ms",), "#2ca02c"),
    (
        "Launch/compile/transfer",
        (
            "kernel_launch_ms",
            "compile_ms",
            "output_ms",
            "device_to_device_ms",
            "collectives_ms",
            "host_to_device_ms",
        ),
        "#9467bd",
    ),
    ("All others", ("other_ms",), "#b0b0b0"),
)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f} ms"


def capture_line(analysis: ProfileAnalysis) -> str:
    cap = analysis.capture
    if not cap:
        return "not captured by tfinput (no tfinput_capture.json): capture settings unknown"
    cfg = cap.get("config") or {}
    step = cap.get("step") or {}
    return (
        f"TF {cap.get('tensorflow', '?')}, {cap.get('cpu_count', '?')} CPUs on "
        f"{cap.get('host', '?')}, warm-up {cfg.get('warmup', '?')}, "
        f"{cfg.get('steps', '?')} profiled steps, step: {step.get('name', '?')}, "
        f"{cap.get('created_utc', '')}"
    )


def _device_text(analysis: ProfileAnalysis) -> str:
    jax = analysis.jax_device
    if jax is not None and jax.steps:
        what = "kernels" if jax.platform == "gpu" else "XLA executions on the CPU"
        return (
            f"{jax.compute_ms:.2f} ms per step ({what}), host-to-device "
            f"{jax.transfer_ms:.2f} ms per step, of a {jax.step_ms:.2f} ms step: medians of "
            f"{len(jax.steps)} steps in JAX's own trace"
        )
    if analysis.device_compute_ms is not None:
        text = _ms(analysis.device_compute_ms) + " per step"
    elif analysis.steps:
        text = f"n/a (no accelerator: {analysis.hardware or 'unknown hardware'})"
    else:
        text = "n/a"
    if analysis.simulated_device_ms is not None:
        text += (
            f"; simulated device step {analysis.simulated_device_ms:.1f} ms "
            "(xprof counts it as 'All others')"
        )
    return text


def summary_rows(analysis: ProfileAnalysis) -> list[tuple[str, str]]:
    rows = []
    if analysis.step_time_ms is not None:
        st = analysis.step_time_ms
        rows.append(
            (
                "Step time",
                f"{st.average:.2f} ms avg (min {st.minimum:.2f}, max {st.maximum:.2f}, "
                f"sd {st.stddev:.2f}) over {len(analysis.steps)} steps",
            )
        )
    else:
        rows.append(("Step time", "n/a (no marked steps)"))
    if analysis.input_wait is not None:
        iw = analysis.input_wait
        rows.append(
            (
                "Waiting for input",
                f"{iw.average:.1%} of step time (per step min {iw.minimum:.1%}, "
                f"max {iw.maximum:.1%})",
            )
        )
    else:
        rows.append(("Waiting for input", "n/a (no marked steps)"))
    rows.append(
        (
            "Host compute",
            _ms(analysis.host_compute_ms) + (" per step" if analysis.host_compute_ms else ""),
        )
    )
    rows.append(("Device compute", _device_text(analysis)))
    if analysis.host_stages:  # annotated host stages of the JAX trace (SparseCore feed, ...)
        steps = len(analysis.jax_device.steps) if analysis.jax_device else len(analysis.steps)
        per = f" over {steps} profiled steps" if steps else ""
        trace = "JAX trace" if analysis.jax_device else "TensorFlow's trace"
        rows.append(
            (
                "Host input stages",
                ", ".join(
                    f"{op.name} {op.time_ms:.1f} ms ({op.category})" for op in analysis.host_stages
                )
                + f"{per} ({trace}, xprof's input-pipeline analyzer)",
            )
        )
    rows.append(("Dense work in the step", _dense_text(analysis)))
    check = analysis.xprof_host_bound
    if check is not None:
        note = analysis.host_bound_note
        rows.append(("xprof host-bound rule", check.summary + (f"; {note}" if note else "")))
    applies, why = analysis.xprof_applies
    if not applies:  # xprof's input verdict contradicts the measured wait
        rows.append(("xprof says", why))
        return rows
    rows.append(("xprof says", analysis.xprof_conclusion or "-"))
    if analysis.xprof_recommendation and analysis.xprof_recommendation != analysis.xprof_conclusion:
        rows.append(("xprof overview", analysis.xprof_recommendation))
    return rows


def _dense_text(analysis: ProfileAnalysis) -> str:
    """The whole reads and updates of embedding-sized variables, or why there are none."""
    dense = analysis.dense_work
    if dense:
        total = sum(d.ms_per_step for d in dense)
        share = sum(d.share for d in dense)
        head = (
            f"{len(dense)} whole reads, updates or copies, {total:.2f} ms per step "
            f"({share:.1%} of the step): "
            if len(dense) > 1
            else ""
        )
        more = f"; and {len(dense) - 6} more (--json)" if len(dense) > 6 else ""
        return head + "; ".join(d.summary for d in dense[:6]) + more
    size = f"{DENSE_BYTES / 1e6:.0f} MB"
    if not analysis.steps:
        return "n/a (no steps)"
    if analysis.variables_recorded:
        return f"none (no whole read or update of a variable of {size} or more in the step)"
    if analysis.jax_device is not None:
        return (
            f"none named: JAX's trace gives no variable sizes (only device copies of {size} "
            "or more, on a GPU)"
        )
    return (
        "unknown: the variables' sizes are recorded when profiles.capture or tfinput "
        "profile runs a TensorFlow step, and this run has none"
    )


def _op_table(analysis: ProfileAnalysis, *, top: int) -> Any:
    from rich.table import Table

    sources = sorted({op.source for op in analysis.top_ops})
    table = Table(
        title=f"Top operations by self time per step ({', '.join(sources)})",
        title_justify="left",
    )
    for name, justify in (
        ("Where", "left"),
        ("Type", "left"),
        ("Operation", "left"),
        ("ms/step", "right"),
        ("% of step", "right"),
        ("Calls/step", "right"),
    ):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for op in analysis.top_ops[:top]:
        table.add_row(
            op.where,
            op.type,
            op.name,
            f"{op.ms_per_step:.2f}",
            f"{op.share:.1%}",
            f"{op.calls_per_step:g}",
        )
    return table


def _setting(params: Any, kind: str) -> str:
    keys = ("parallelism", "cycle_length", "buffer_limit", "batch_size", "buffer_size")
    parts = [f"{k}={params[k]}" for k in keys if k in params]
    if str(params.get("autotune", "")).lower() == "true":
        parts.append("autotune")
    return "\n".join(parts)


def _stage_table(pipeline: PipelineStages, *, top: int, advise: bool = True) -> Any:
    from rich.table import Table

    title = (
        f"Stages on host {pipeline.host}, pipeline {pipeline.pipeline}: training waited "
        f"{pipeline.input_ms:.1f} ms in {pipeline.root_calls} next() calls "
        f"({pipeline.slow_root_calls} slow), mean {pipeline.mean_call_ms:.3f} ms"
    )
    if not advise:
        title += " (for reference: the input does not limit training)"
    table = Table(title=title, title_justify="left", show_lines=False)
    for name, justify in (
        ("Stage", "left"),
        ("Self on critical path", "right"),
        ("% of wait", "right"),
        ("Calls", "right"),
        ("Slow", "right"),
        ("Busy", "right"),
        ("Setting", "left"),
        *((("Knobs", "left"),) if advise else ()),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for s in pipeline.stages[:top]:
        table.add_row(
            s.display_name,
            f"{s.self_ms:.2f} ms",
            f"{s.self_fraction:.0%}",
            str(s.calls),
            str(s.slow_calls),
            f"{s.busy_ms:.2f} ms",
            _setting(s.params, s.kind),
            *(("\n".join(s.knobs) or "-",) if advise else ()),
        )
    return table


def _step_table(steps: Sequence[StepTime], source: str = "xprof") -> Any:
    from rich.table import Table

    where = {"xprof": "xprof", "jax markers": "JAX's trace, its step markers"}.get(
        source, "JAX's trace, the jitted step's executions"
    )
    table = Table(title=f"Per-step breakdown (ms, {where})", title_justify="left")
    table.add_column("Step")
    table.add_column("Step time", justify="right")
    for label, _, _ in CATEGORIES:
        table.add_column(label, justify="right")
    table.add_column("Input %", justify="right")
    for s in steps:
        table.add_row(
            s.step,
            f"{s.step_ms:.2f}",
            *(f"{sum(getattr(s, f) for f in fields):.2f}" for _, fields, _ in CATEGORIES),
            f"{s.input_fraction:.0%}",
        )
    return table


def render(analysis: ProfileAnalysis, console: Any = None, *, top: int = 8) -> None:
    """Print a readable report to a rich console (default: stdout).

    Args:
      analysis: What `profiles.analyze` returned.
      console: A ``rich.console.Console``; default a new one on ``sys.stdout``.
      top: Stages shown per pipeline.
    """
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    hosts = ", ".join(analysis.hosts)
    console.rule(f"[bold]tf.data profile: {analysis.logdir}")
    console.print(
        f"run [bold]{analysis.run}[/], host(s) {hosts}, {analysis.hardware or '?'}, "
        f"xprof {analysis.xprof_version}",
        markup=True,
        highlight=False,
    )
    console.print(f"captured: {capture_line(analysis)}", markup=False, highlight=False)
    summary = Table(show_header=False, box=None, pad_edge=False)
    summary.add_column(style="bold")
    summary.add_column()
    for key, value in summary_rows(analysis):
        summary.add_row(key, value)
    console.print(summary)

    limits = analysis.input_limits
    console.print(
        f"\nVerdict: {analysis.verdict}", style="bold red" if limits else "bold", markup=False
    )
    bottleneck = analysis.bottleneck
    if bottleneck is not None and limits is not False:
        style = "bold red" if bottleneck.significant else "bold"
        console.print(f"Bottleneck: {bottleneck.summary}", style=style, markup=False)
    for pipeline in analysis.pipelines:
        console.print()
        console.print(_stage_table(pipeline, top=top, advise=limits is not False))
        path = " > ".join(p.rsplit("::", 1)[-1] for p in pipeline.critical_path)
        console.print(f"critical path: {path}", markup=False, highlight=False)
    if analysis.top_ops:
        console.print()
        console.print(_op_table(analysis, top=top))
    if analysis.steps:
        console.print()
        console.print(_step_table(analysis.steps, analysis.step_source))
    if analysis.diagnostics:
        console.print()
        for message in analysis.diagnostics:
            console.print(f"! {message}", style="yellow", markup=False, highlight=False)


def _top_stages(analysis: ProfileAnalysis, n: int) -> list[str]:
    main = analysis.main_pipeline
    if main is None:
        return []
    return [f"{s.display_name} {s.self_fraction:.0%}" for s in main.stages[:n] if s.self_ms > 0]


def render_comparison(comparison: Comparison, console: Any = None, *, top: int = 5) -> None:
    """Print two analyses side by side (input wait, step time, top stages)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    a, b = comparison.before, comparison.after
    console.rule("[bold]tf.data profile: before / after")
    table = Table(show_lines=False)
    table.add_column("")
    table.add_column(f"A: {a.logdir} ({a.run})", overflow="fold")
    table.add_column(f"B: {b.logdir} ({b.run})", overflow="fold")
    table.add_column("Change")

    def wait(x: ProfileAnalysis) -> str:
        return _pct(x.input_wait.average if x.input_wait else None)

    def wait_range(x: ProfileAnalysis) -> str:
        w = x.input_wait
        return f"{w.minimum:.1%} .. {w.maximum:.1%}" if w else "n/a"

    def step(x: ProfileAnalysis) -> str:
        return _ms(x.step_time_ms.average if x.step_time_ms else None)

    change_wait = (
        f"{comparison.input_wait_change * 100:+.1f} pts"
        if comparison.input_wait_change is not None
        else ""
    )
    ratio = comparison.step_time_ratio
    change_step = ""
    if ratio:
        change_step = (
            f"x{ratio:.2f} ({1 / ratio:.2f}x faster)"
            if ratio < 1
            else f"x{ratio:.2f} ({ratio:.2f}x slower)"
        )
    table.add_row("Waiting for input (avg)", wait(a), wait(b), change_wait)
    table.add_row("Waiting for input (min..max)", wait_range(a), wait_range(b), "")
    table.add_row("Step time (avg)", step(a), step(b), change_step)
    table.add_row("Host compute", _ms(a.host_compute_ms), _ms(b.host_compute_ms), "")
    table.add_row("Steps analysed", str(len(a.steps)), str(len(b.steps)), "")
    table.add_row("Captured", capture_line(a), capture_line(b), "")
    table.add_row("Verdict", a.verdict, b.verdict, "")
    table.add_row(
        "Bottleneck",
        a.bottleneck.summary if a.bottleneck and a.input_limits is not False else "-",
        b.bottleneck.summary if b.bottleneck and b.input_limits is not False else "-",
        "",
    )
    sa, sb = _top_stages(a, top), _top_stages(b, top)
    for i in range(max(len(sa), len(sb))):
        table.add_row(
            f"Stage #{i + 1} (self time)",
            sa[i] if i < len(sa) else "",
            sb[i] if i < len(sb) else "",
            "",
        )
    console.print(table)
    for caveat in comparison.caveats:
        console.print(f"! {caveat}", style="yellow", markup=False, highlight=False)
    for tag, x in (("A", a), ("B", b)):
        for message in x.diagnostics:
            console.print(f"! {tag}: {message}", style="yellow", markup=False, highlight=False)


def format_text(obj: ProfileAnalysis | Comparison, *, width: int = 120) -> str:
    """The terminal report as plain text (no colours)."""
    from rich.console import Console

    with open(os.devnull, "w") as sink:
        console = Console(width=width, record=True, color_system=None, file=sink)
        if isinstance(obj, Comparison):
            render_comparison(obj, console)
        else:
            render(obj, console)
        return console.export_text()


def to_json(obj: ProfileAnalysis | Comparison, *, indent: int | None = 2) -> str:
    """JSON of an analysis or comparison (``to_dict``)."""
    return json.dumps(obj.to_dict(), indent=indent, sort_keys=False)
