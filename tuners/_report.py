"""Tuning reports: a terminal table, a self-contained HTML page, and JSON files.

`write_outputs` writes, into one directory, each file whole or not at all (staged
beside it, flushed to disk, renamed into place), the small ones first:

- ``best_config.json``: ``{"config": {...}, "fingerprint": ..., "method": ..., ...}``,
  loadable with ``PipelineConfig.from_json`` and so by ``build(config=...)``;
- ``result.json``: everything in `TuneResult` plus every trial;
- ``report.html``: optimisation history, parameter importances and the confirmed
  throughput of each config with its spread (plotly, inlined: no network needed).
  The importances (Optuna's fANOVA over the complete trials' values) are drawn only
  when those trials differ beyond the noise (`importances_left_out`); otherwise the
  page says why they are left out.
  Without plotly (an optional extra) the page has the tables and text, no charts,
  and says how to get them: ``pip install 'tfinput[plots]'``.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Any

from tuners._result import TuneOutputError, TuneResult, write_whole
from tuners._trials import summarize_trials

NO_PLOTLY = "charts need plotly, not installed: pip install 'tfinput[plots]'"


def has_plotly() -> bool:
    """Whether plotly (the ``plots`` extra) can be imported."""
    try:
        import plotly.graph_objects  # noqa: F401
    except ImportError:
        return False
    return True


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def _kept_in(result: TuneResult) -> str:
    """`` in STORAGE`` (password redacted) for a study kept in a storage, else ``""``."""
    return f" in {result.storage}" if result.storage else ""


def print_summary(result: TuneResult, console: Any) -> None:
    """The before/after table and what changed, on a rich console."""
    from rich.table import Table

    t = Table(
        title=f"Confirmed throughput (step: {result.step.get('name')}), ranked by the paired "
        "ratio to autotune"
    )
    for col in ("config", "median examples/s", "min-max", "CV", PAIRED_COLUMN):
        t.add_column(col, justify="left" if col == "config" else "right")
    for c in result.confirmed:
        ratio = "" if c.ratio is None else f"{c.ratio:.2f}x ({c.ratio_min:.2f}-{c.ratio_max:.2f})"
        name = f"[bold]{c.name}[/]" if c.name == result.best_name else c.name
        t.add_row(
            name,
            _fmt_rate(c.median),
            f"{_fmt_rate(c.minimum)}-{_fmt_rate(c.maximum)}",
            f"{c.cv:.1%}",
            ratio,
        )
    console.print(t)
    console.print(PAIRED_MEANS, markup=False)
    for line in ranking_notes(result):
        console.print(line, markup=False)
    auto = next((c for c in result.confirmed if c.name == "autotune"), None)
    measured = result.measured_best
    if auto is not None and measured is not None:
        changed = {
            k: v for k, v in measured.config.to_dict().items() if auto.config.to_dict().get(k) != v
        }
        knobs = ", ".join(f"{k}={v}" for k, v in changed.items()) or "none"
        if result.kept_autotune:
            console.print(
                f"saved: autotune (the verdict); measured best: {measured_best_text(result)}, "
                f"knobs changed from autotune: {knobs}",
                markup=False,
            )
        else:
            console.print(f"best: {result.best_name}; knobs changed from autotune: {knobs}")
    for line in verdict_lines(result):
        if line.startswith("("):  # how the input wait was obtained
            console.print(f"         {line}")
        else:
            console.print(f"[bold]verdict:[/] {line}")
    if result.breakdown:
        if result.kept_autotune and measured is not None:
            console.print(
                f"gain by knob of {measured.name}, the best measured, not saved "
                f"({measured.name} / {measured.name} with the group reverted to autotune):",
                markup=False,
            )
        else:
            console.print("gain by knob (winner / winner with the group reverted to autotune):")
        for c in result.breakdown:
            console.print(f"  {c.describe()}")
    trials = ", ".join(f"{n} {k}" for k, n in sorted(result.trials.items()))
    console.print(
        f"study {result.study_name}{_kept_in(result)}: {trials}; "
        f"search {result.seconds['search']:.0f} s, confirmation {result.seconds['confirm']:.0f} s",
        markup=False,
    )
    for line in result.advice:
        console.print(f"[yellow]advice:[/] {line}")
    for line in result.warnings:
        console.print(f"[yellow]warning:[/] {line}")
    if result.confirmation_error:
        console.print(
            f"[red]confirmation failed:[/] {result.confirmation_error}; the best config is "
            f"the search's best trial ({result.best_name}), not confirmed against autotune"
        )


#: The confirmation table's last column, and what it means (printed under the table).
PAIRED_COLUMN = "paired ratio to autotune (rounds)"
PAIRED_MEANS = (
    "paired ratio: each round's examples/s over autotune's in the same round, the median "
    "of the rounds (the range in brackets); it ranks the configs and the verdict reads "
    "it. median examples/s: over the rounds, each config on its own"
)


def ranking_notes(result: TuneResult) -> list[str]:
    """Where the two figures of the confirmation order configs otherwise, said: a config
    above autotune by its paired ratio but below it by its median examples/s (or the
    other way), and a config with a higher median than the one ranked first."""
    confirmed = list(result.confirmed)
    auto = next((c for c in confirmed if c.name == "autotune"), None)
    notes = []
    if auto is not None:
        for c in confirmed:
            if c is auto or c.ratio is None or c.ratio == 1.0 or c.median == auto.median:
                continue
            if (c.ratio > 1.0) != (c.median > auto.median):
                side = "below" if c.median < auto.median else "above"
                notes.append(
                    f"{c.name}: {c.ratio:.2f}x autotune paired, while its median "
                    f"examples/s, {c.median:,.0f}, is {side} autotune's {auto.median:,.0f}: "
                    "the rounds disagree (a round's load moves both configs of that round "
                    "alike, so the paired ratio is the figure compared)"
                )
    if confirmed:
        first = confirmed[0]
        higher = [c for c in confirmed[1:] if c.median > first.median]
        if higher:
            top = max(higher, key=lambda c: c.median)
            notes.append(
                f"{first.name} ranks first by the paired ratio "
                f"({'1.00x' if first.ratio is None else f'{first.ratio:.2f}x'}) though "
                f"{top.name} has the higher median examples/s ({top.median:,.0f} against "
                f"{first.median:,.0f}): the configs are ranked, and the verdict taken, on "
                "the paired ratio"
            )
    return notes


def measured_best_text(result: TuneResult) -> str:
    """``trial 7, 1.01x autotune paired (rounds 0.95x-1.10x)``: the config measured
    best, with its paired ratio to autotune (the median of the per-round ratios) and the
    range of the per-round ratios."""
    best = result.measured_best
    if best is None:
        return "none (not confirmed)"
    if best.ratio is None:
        return best.name
    text = f"{best.name}, {best.ratio:.2f}x autotune paired"
    if best.ratio_min is not None and best.ratio_max is not None:
        text += f" (rounds {best.ratio_min:.2f}x-{best.ratio_max:.2f}x)"
    return text


def saved_config_line(result: TuneResult, best_config: str, details: str) -> str | None:
    """When the verdict kept autotune although another config measured best: which file
    holds which (``best_config``: the verdict; ``details``: the measured best). None
    otherwise."""
    if not result.kept_autotune:
        return None
    return (
        f"{best_config}: autotune (the verdict: keep autotune); the best measured config, "
        f'{measured_best_text(result)}, is in {details} under "measured_best"'
    )


def verdict_lines(result: TuneResult) -> list[str]:
    """The plain-language verdicts (beats autotune or "keep autotune"; whether input is
    the bottleneck), with how the input wait was obtained."""
    lines = list(result.verdicts)
    if result.input_wait_source == "step bound" and result.step_bound:
        lines.append(
            f"(the step owns the loop, so the input wait is 1 - fed / step bound; step bound "
            f"{result.step_bound:,.0f} examples/s on one cached batch)"
        )
    return lines


def _verdicts_html(result: TuneResult) -> str:
    from html import escape

    from tuners._space import label

    parts = ["<h2>Verdict</h2><ul>"]
    parts += [f"<li><b>{escape(line)}</b></li>" for line in verdict_lines(result)]
    parts.append("</ul>")
    if result.breakdown:
        rows = "".join(
            f"<tr><td>{escape(c.group)}</td><td>"
            + escape(", ".join(f"{k}: {label(a)} → {label(w)}" for k, (w, a) in c.knobs.items()))
            + f"</td><td>{c.ratio:.2f}x</td><td>{c.ratio_min:.2f}x-{c.ratio_max:.2f}x</td>"
            f"<td>{c.without_examples_per_s:,.0f}</td></tr>"
            + (
                f"<tr><td></td><td colspan=4><b>{escape(c.describe().split('; ', 1)[1])}</b>"
                "</td></tr>"
                if c.hurts
                else ""
            )
            for c in result.breakdown
        )
        parts.append(
            "<h2>Gain by knob</h2><p>The winner measured against itself with each group of "
            "knobs that differs from autotune reverted to autotune's values (interleaved, "
            "same windows). Contribution = winner / winner without the group.</p>"
            "<table><tr><th>group</th><th>autotune → winner</th><th>contribution</th>"
            "<th>per-round range</th><th>without it, examples/s</th></tr>"
            f"{rows}</table>"
        )
    fa = result.format_advice
    if fa is not None:
        parts.append(
            "<h2>Format advice</h2>"
            f"<p>{escape(fa.sentence())}</p><pre>{escape(fa.command)}</pre>"
            f"<p>{escape(fa.method)}</p>"
        )
    return "".join(parts)


def importances_left_out(result: TuneResult) -> str | None:
    """Why the parameter importances are left out of the report; None to draw them.

    Optuna's importances rank the knobs by how much of the spread of the trials'
    values each explains, noise included. They are drawn only when the complete trials
    differ beyond the noise: the slowest window of some trial is faster than the
    fastest window of another (their window ranges do not overlap).
    """
    if result.study is None:
        return "importances left out: the study is not at hand"
    rows = [
        r
        for r in summarize_trials(result.study)
        if r["state"] == "complete" and r["min"] is not None and r["max"] is not None
    ]
    if len(rows) < 2:
        return (
            f"importances left out: {len(rows)} complete trial(s); importances need trials "
            "that differ"
        )
    floor = max(rows, key=lambda r: r["min"])
    ceiling = min(rows, key=lambda r: r["max"])
    if floor["min"] > ceiling["max"]:
        return None
    return (
        f"importances left out: the {len(rows)} complete trials do not differ beyond the "
        f"noise (the highest slowest window, trial {floor['number']}'s "
        f"{floor['min']:,.0f} examples/s, is not above the lowest fastest window, trial "
        f"{ceiling['number']}'s {ceiling['max']:,.0f}: every trial's window range "
        "overlaps every other's), so a ranking of the knobs would rank noise"
    )


def _figures(result: TuneResult, *, importances: bool = True) -> list[tuple[str, Any]]:
    import plotly.graph_objects as go

    figs: list[tuple[str, Any]] = []
    names = [c.name for c in result.confirmed]
    medians = [c.median for c in result.confirmed]
    bar = go.Figure(
        go.Bar(
            x=names,
            y=medians,
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [c.maximum - c.median for c in result.confirmed],
                "arrayminus": [c.median - c.minimum for c in result.confirmed],
            },
            text=[f"{c.ratio:.2f}x" if c.ratio else "" for c in result.confirmed],
        )
    )
    bar.update_layout(
        title="Confirmed throughput (median, min-max over interleaved windows; label: the "
        "paired ratio to autotune)",
        yaxis_title="examples/s",
    )
    figs.append(("confirmed", bar))
    study = result.study
    if study is not None:
        import optuna

        # A plot that cannot be drawn (too few complete trials, a single searched knob)
        # is left out of the report; so is Optuna's warning that importances of too few
        # trials are all equal (the plot says so itself).
        with contextlib.suppress(Exception):
            figs.append(("history", optuna.visualization.plot_optimization_history(study)))
        if importances:
            with contextlib.suppress(Exception), warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                plot = optuna.visualization.plot_param_importances(study)
                figs.append(("importances", plot))
        rows = [r for r in summarize_trials(study) if r["median"] is not None]
        if rows:
            spread = go.Figure(
                go.Scatter(
                    x=[r["number"] for r in rows],
                    y=[r["median"] for r in rows],
                    mode="markers",
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": [r["max"] - r["median"] for r in rows],
                        "arrayminus": [r["median"] - r["min"] for r in rows],
                    },
                    marker={
                        "color": ["#888" if r["state"] == "pruned" else "#1f77b4" for r in rows]
                    },
                    text=[r["baseline"] or r["state"] for r in rows],
                )
            )
            spread.update_layout(
                title="Every trial: median examples/s and window spread (grey: pruned)",
                xaxis_title="trial",
                yaxis_title="examples/s",
            )
            figs.append(("trials", spread))
    return figs


def write_html(result: TuneResult, path: str | Path) -> Path:
    """A self-contained HTML report (plotly.js inlined once), written whole or not at
    all (`tuners._result.write_whole`)."""
    return write_whole(Path(path), html_report(result))


def html_report(result: TuneResult) -> str:
    """The text of the self-contained HTML report."""
    from html import escape

    parts = []
    left_out = importances_left_out(result)
    if has_plotly():
        for i, (_, fig) in enumerate(_figures(result, importances=left_out is None)):
            parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0)))
    else:
        parts.append(f"<p class='note'><b>No charts:</b> {NO_PLOTLY}</p>")
        parts.append(_trials_table(result))
    if left_out is not None:
        parts.append(f"<h2>Parameter importances</h2><p class='note'>{escape(left_out)}</p>")
    best = json.dumps(result.best_config.to_dict(), indent=2)
    fp = json.dumps(result.fingerprint, indent=2)
    html = (
        "<!doctype html><html><head><meta charset='utf-8'><title>tfinput tune report</title>"
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
        "pre{background:#f4f4f4;padding:1em}</style></head><body>"
        f"<h1>tfinput tune: {escape(result.study_name)}</h1>"
        + (f"<p>Study kept in {escape(result.storage)}.</p>" if result.storage else "")
        + f"<p>Best: <b>{escape(result.best_name)}</b>, "
        + (
            f"confirmed median {result.saved_stats.median:,.0f} examples/s"
            if result.saved_stats is not None
            else f"<b>not confirmed</b> ({escape(str(result.confirmation_error))})"
        )
        + (f", {result.ratio_vs_autotune:.2f}x autotune paired" if result.ratio_vs_autotune else "")
        + f". Step: {result.step.get('name')}. Trials: {result.trials}. "
        f"Search {result.seconds['search']:.0f} s, confirmation {result.seconds['confirm']:.0f} s.</p>"
        + (
            f"<p>Saved: autotune (the verdict: keep autotune). The best measured config, "
            f"{escape(measured_best_text(result))}, is in result.json under measured_best.</p>"
            if result.kept_autotune
            else ""
        )
        + f"<p class='note'>{escape(PAIRED_MEANS)}.</p>"
        + "".join(f"<p class='note'>{escape(n)}</p>" for n in ranking_notes(result))
        + "".join(f"<p class='note'>Warning: {escape(w)}</p>" for w in result.warnings)
        + _verdicts_html(result)
        + "".join(_advice_html(result))
        + "".join(parts)
        + f"<h2>Best config</h2><pre>{best}</pre><h2>Machine</h2><pre>{fp}</pre>"
        f"<h2>Method</h2><pre>{json.dumps(result.method, indent=2)}</pre></body></html>"
    )
    return html


def _advice_html(result: TuneResult) -> list[str]:
    """The advice lines (other than the format advice, which has its own section)."""
    from html import escape

    fa = result.format_advice
    skip = fa.sentence() if fa is not None else None
    return [f"<p class='note'>Advice: {escape(a)}</p>" for a in result.advice if a != skip]


def _trials_table(result: TuneResult) -> str:
    """The confirmation as an HTML table (the report's content when there are no charts)."""
    from html import escape

    rows = "".join(
        f"<tr><td>{escape(c.name)}</td><td>{c.median:,.0f}</td>"
        f"<td>{c.minimum:,.0f}-{c.maximum:,.0f}</td>"
        f"<td>{'' if c.ratio is None else f'{c.ratio:.2f}x'}</td></tr>"
        for c in result.confirmed
    )
    return (
        "<h2>Confirmed throughput</h2><table><tr><th>config</th><th>median examples/s</th>"
        f"<th>min-max</th><th>{PAIRED_COLUMN}</th></tr>{rows}</table>"
    )


def write_outputs(result: TuneResult, out_dir: str | Path, *, html: bool = True) -> dict[str, Path]:
    """Write ``best_config.json``, ``result.json`` and (optionally) ``report.html``, each
    whole or not at all, in that order (the report, the largest, last).

    Raises:
      TuneOutputError: a file could not be written (a full disk...): it names the file and
        the reason, and the files written before it (whole).
    """
    out = Path(out_dir)
    paths = {"best_config": out / "best_config.json", "result": out / "result.json"}
    data = result.to_dict()
    if result.study is not None:
        data["trials_detail"] = summarize_trials(result.study)
    texts = {
        "best_config": result.best_config.to_json(None, **result.record()) + "\n",
        "result": json.dumps(data, indent=2, default=str) + "\n",
    }
    written: list[Path] = []
    try:
        for name, text in texts.items():
            written.append(write_whole(paths[name], text))
        if html:
            paths["report"] = write_html(result, out / "report.html")
    except TuneOutputError as e:
        raise e.kept(written) from e.__cause__
    return paths


#: Bytes the outputs take besides plotly.js: the JSON files and the report's tables.
OUTPUTS_BYTES = 1_000_000


def outputs_size() -> int:
    """About how many bytes `write_outputs` needs: the report inlines plotly.js (about
    4.6 MB) when plotly is installed."""
    if not has_plotly():
        return OUTPUTS_BYTES
    import plotly

    bundle = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    try:
        return OUTPUTS_BYTES + bundle.stat().st_size
    except OSError:  # another layout of the package: its usual size
        return OUTPUTS_BYTES + 5_000_000
