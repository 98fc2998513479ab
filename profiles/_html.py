"""A profile analysis as a self-contained HTML page.

The HTML charts are hand-written inline SVG: a per-step stacked bar chart of xprof's
step breakdown, and bars of each stage's self time on the critical path. SVG keeps
the page small (a few kB, against ~4.5 MB for a page embedding plotly.js), readable
without JavaScript or network access, stable to diff and archive next to a run, and
adds no dependency.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from profiles._report import CATEGORIES, capture_line, summary_rows
from profiles._results import Comparison, ProfileAnalysis, StepTime
from profiles._stages import PipelineStages


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    magnitude = 10 ** len(str(int(value))) / 10
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return step * magnitude
    return value


def svg_step_breakdown(steps: Sequence[StepTime], *, width: int = 720) -> str:
    """Stacked bars of xprof's per-step breakdown (ms), as an inline SVG element."""
    if not steps:
        return "<p>No marked steps: no per-step breakdown.</p>"
    left, top, bottom, height = 60, 30, 60, 260
    plot_w = width - left - 20
    vmax = _nice_max(max(s.step_ms for s in steps))
    bar_w = plot_w / len(steps)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + bottom}"'
        ' role="img" aria-label="Per-step time breakdown" font-family="sans-serif" '
        'font-size="11">',
        f'<text x="{left}" y="16" font-size="13" font-weight="bold">'
        "Step time breakdown (ms)</text>",
    ]
    for k in range(5):
        v = vmax * k / 4
        y = top + height - height * k / 4
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{v:g}</text>'
        )
    for i, s in enumerate(steps):
        x = left + i * bar_w + bar_w * 0.15
        y = top + height
        for label, fields, colour in CATEGORIES:
            value = sum(getattr(s, f) for f in fields)
            if value <= 0:
                continue
            h = height * value / vmax
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w * 0.7:.1f}" height="{h:.1f}" '
                f'fill="{colour}"><title>{_esc(s.step)}: {_esc(label)} {value:.2f} ms'
                "</title></rect>"
            )
        parts.append(
            f'<text x="{x + bar_w * 0.35:.1f}" y="{top + height + 14}" text-anchor="middle">'
            f"{_esc(s.step.split()[-1])}</text>"
        )
    lx = left
    for label, _, colour in CATEGORIES:
        parts.append(
            f'<rect x="{lx}" y="{top + height + 30}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{lx + 14}" y="{top + height + 39}">{_esc(label)}</text>'
        )
        lx += 24 + 7 * len(label)
    parts.append("</svg>")
    return "".join(parts)


def svg_stage_times(pipeline: PipelineStages | None, *, width: int = 720, top_n: int = 10) -> str:
    """Horizontal bars of stage self time on the critical path, as inline SVG."""
    if pipeline is None or not pipeline.stages:
        return "<p>No tf.data stages in the trace.</p>"
    stages = list(pipeline.stages[:top_n])
    label_w, row_h, top = 260, 22, 30
    plot_w = width - label_w - 90
    vmax = max(max(s.self_ms for s in stages), 1e-9)
    height = top + row_h * len(stages) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img"'
        ' aria-label="Stage self times" font-family="sans-serif" font-size="11">',
        '<text x="4" y="16" font-size="13" font-weight="bold">'
        f"Stage self time on the critical path (host {_esc(pipeline.host)})</text>",
    ]
    for i, s in enumerate(stages):
        y = top + i * row_h
        w = plot_w * s.self_ms / vmax
        colour = (
            "#d62728" if pipeline.bottleneck and s.path == pipeline.bottleneck.stage else "#1f77b4"
        )
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">'
            f"{_esc(s.display_name)}</text>"
            f'<rect x="{label_w}" y="{y + 3}" width="{max(w, 0.5):.1f}" height="{row_h - 6}" '
            f'fill="{colour}"><title>{_esc(s.path)}: {s.self_ms:.2f} ms, {s.calls} calls, '
            f"{s.slow_calls} slow</title></rect>"
            f'<text x="{label_w + w + 6:.1f}" y="{y + 14}">{s.self_ms:.2f} ms '
            f"({s.self_fraction:.0%})</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


_CSS = (
    "body{font-family:sans-serif;margin:24px;color:#222}"
    "table{border-collapse:collapse;margin:8px 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}"
    ".warn{color:#a15c00}.bn{color:#b00;font-weight:bold}"
    ".cols{display:flex;gap:24px;flex-wrap:wrap}"
)


def _analysis_section(analysis: ProfileAnalysis, title: str) -> str:
    rows = "".join(
        f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in summary_rows(analysis)
    )
    bn = analysis.bottleneck if analysis.input_limits is not False else None
    diag = "".join(f'<li class="warn">{_esc(m)}</li>' for m in analysis.diagnostics)
    return (
        f"<section><h2>{_esc(title)}</h2>"
        f"<p>{_esc(analysis.logdir)} &mdash; run {_esc(analysis.run)}, hosts "
        f"{_esc(', '.join(analysis.hosts))}, xprof {_esc(analysis.xprof_version)}</p>"
        f"<p>captured: {_esc(capture_line(analysis))}</p>"
        f"<table>{rows}</table>"
        + f"<p><b>Verdict: {_esc(analysis.verdict)}</b></p>"
        + (f'<p class="bn">Bottleneck: {_esc(bn.summary)}</p>' if bn else "")
        + svg_step_breakdown(analysis.steps)
        + svg_stage_times(analysis.main_pipeline)
        + _ops_html(analysis)
        + (f"<ul>{diag}</ul>" if diag else "")
        + "</section>"
    )


def _ops_html(analysis: ProfileAnalysis) -> str:
    if not analysis.top_ops:
        return ""
    head = "".join(
        f"<th>{h}</th>"
        for h in ("Where", "Type", "Operation", "ms/step", "% of step", "Calls/step")
    )
    rows = "".join(
        f"<tr><td>{_esc(op.where)}</td><td>{_esc(op.type)}</td><td>{_esc(op.name)}</td>"
        f"<td>{op.ms_per_step:.2f}</td><td>{op.share:.1%}</td>"
        f"<td>{op.calls_per_step:g}</td></tr>"
        for op in analysis.top_ops
    )
    return f"<h3>Top operations by self time per step</h3><table><tr>{head}</tr>{rows}</table>"


def to_html(obj: ProfileAnalysis | Comparison) -> str:
    """A self-contained HTML page (inline SVG charts, no scripts, no external files)."""
    if isinstance(obj, Comparison):
        caveats = "".join(f'<p class="warn">{_esc(c)}</p>' for c in obj.caveats)
        body = (
            caveats
            + '<div class="cols">'
            + _analysis_section(obj.before, "A (before)")
            + _analysis_section(obj.after, "B (after)")
            + "</div>"
        )
        title = "tf.data profile: before / after"
    else:
        body = _analysis_section(obj, "tf.data profile")
        title = f"tf.data profile: {obj.logdir}"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_esc(title)}</h1>{body}</body></html>\n"
    )


def write_html(obj: ProfileAnalysis | Comparison, path: str | os.PathLike[str]) -> Path:
    """Write `to_html` to ``path`` (parent directories created) and return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_html(obj), encoding="utf-8")
    return out
