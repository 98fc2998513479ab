"""profiles._report: the terminal report, JSON, the self-contained HTML page and its SVG
charts, for a captured analysis and a before/after comparison."""

from __future__ import annotations

import dataclasses
import io
import json
import xml.etree.ElementTree as ET

import pytest

from profiles import compare, format_text, render, render_comparison, to_html, to_json, write_html
from profiles._html import svg_stage_times, svg_step_breakdown
from profiles._results import StepTime

SVG = "{http://www.w3.org/2000/svg}"


def _step(name, **ms):
    fields = [f.name for f in dataclasses.fields(StepTime) if f.name.endswith("_ms")]
    values = {f: 0.0 for f in fields} | ms
    values["step_ms"] = sum(v for k, v in values.items() if k != "step_ms")
    return StepTime(step=name, **values)


def _titles(svg):
    return [r.find(f"{SVG}title").text for r in ET.fromstring(svg).iter(f"{SVG}rect") if len(r)]


def test_text_report_of_an_analysis(slow_map):
    text = format_text(slow_map)
    assert f"tf.data profile: {slow_map.logdir}" in text
    assert f"xprof {slow_map.xprof_version}" in text
    assert f"over {len(slow_map.steps)} steps" in text
    assert "n/a (no accelerator: CPU_ONLY); simulated device step 2.0 ms" in text
    assert f"Bottleneck: {slow_map.bottleneck.summary}" in text
    assert "critical path: Root > Prefetch > ParallelMapV2" in text
    assert "warm-up 2, 8 profiled steps, step: simulated" in text
    assert "\x1b[" not in text  # no colour codes


def test_an_input_wait_within_the_noise_names_no_stage_or_knob(slow_map):
    from profiles._results import Spread

    assert slow_map.input_limits is True  # a 60 ms map under a 2 ms step
    assert slow_map.verdict.startswith("the input pipeline limits training: the step waited")
    assert slow_map.to_dict()["bottleneck"] is not None
    # The same trace as if the step had waited 1% of its time, then 5% with the rest of
    # the step varying by 20% from step to step: the input is not what limits training.
    for wait, swing, why in ((0.01, 0.0, "under 3%"), (0.05, 20.0, "within the step-to-step")):
        steps = tuple(
            dataclasses.replace(
                s, step_ms=100.0 + (swing if i % 2 else -swing), input_ms=100.0 * wait
            )
            for i, s in enumerate(slow_map.steps)
        )
        quiet = dataclasses.replace(
            slow_map,
            steps=steps,
            step_time_ms=Spread.of([s.step_ms for s in steps]),
            input_wait=Spread(average=wait, minimum=wait, maximum=wait),
        )
        assert quiet.input_limits is False
        text = format_text(quiet, width=400)
        assert "Verdict: the input pipeline is not what limits training" in text
        assert why in quiet.verdict and quiet.verdict in text
        assert "Bottleneck:" not in text and "Knobs" not in text
        assert "for reference" in text
        data = quiet.to_dict()
        assert data["input_limits"] is False and data["bottleneck"] is None
        assert "Bottleneck:" not in to_html(quiet)


def test_xprof_is_quoted_only_where_it_agrees_with_the_measured_wait(slow_map):
    from profiles._results import Spread

    quiet = dataclasses.replace(
        slow_map,
        input_wait=Spread(average=0.007, minimum=0.0, maximum=0.02),
        xprof_conclusion="Your program is POTENTIALLY input-bound because 98.8% of the "
        "total step time sampled is spent on 'All Others' time.",
    )
    assert quiet.xprof_applies[0] is False
    assert "POTENTIALLY" not in format_text(quiet)
    assert quiet.xprof_applies[1] in format_text(quiet, width=400)
    assert "xprof's step breakdown disagrees with the measured input wait" in quiet.xprof_applies[1]
    on_jax = dataclasses.replace(
        quiet, capture={**slow_map.capture, "step": {"kind": "keras", "backend": "jax"}}
    )
    assert (
        "the step runs on JAX, whose computation TensorFlow's profiler does not see"
        in (on_jax.xprof_applies[1])
    )
    assert on_jax.xprof_applies[1] in format_text(on_jax, width=400)
    agrees = dataclasses.replace(quiet, xprof_conclusion="Your program is NOT input-bound.")
    assert agrees.xprof_applies == (True, "")
    assert "Your program is NOT input-bound." in format_text(agrees)


def test_text_report_of_a_trace_not_captured_by_tfinput(slow_map):
    text = format_text(dataclasses.replace(slow_map, capture=None))
    assert "not captured by tfinput (no tfinput_capture.json): capture settings unknown" in text


def _stage_rows(slow_map, **kwargs):
    """The rows of the stage table `render` prints for ``slow_map``."""
    from rich.console import Console

    out = io.StringIO()
    render(slow_map, Console(file=out, width=200, color_system=None), **kwargs)
    table = out.getvalue().split("Stages on host")[1].split("critical path:")[0]
    cells = [line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│")]
    return [c for c in cells if c]  # a stage with two knobs takes two lines


def test_render_lists_the_top_stages(slow_map):
    stages = slow_map.main_pipeline.stages
    assert len(stages) >= 3
    assert _stage_rows(slow_map, top=1) == ["ParallelMapV2 (parse)"]
    assert _stage_rows(slow_map) == [s.display_name for s in stages[:8]]


def test_comparison_text_says_how_much_faster(slow_map, fast):
    comparison = compare(slow_map, fast)
    text = format_text(comparison)
    assert "tf.data profile: before / after" in text
    assert f"{comparison.input_wait_change * 100:+.1f} pts" in text
    assert f"({1 / comparison.step_time_ratio:.2f}x faster)" in text
    reverse = format_text(compare(fast, slow_map), width=200)
    assert "x slower)" in reverse


def test_render_comparison_prints_caveats_and_diagnostics(slow_map, fast):
    from rich.console import Console

    comparison = dataclasses.replace(compare(slow_map, fast), caveats=("machines differ",))
    after = dataclasses.replace(fast, diagnostics=("no step markers",))
    comparison = dataclasses.replace(comparison, after=after)
    out = io.StringIO()
    render_comparison(comparison, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "! machines differ" in text
    assert "! B: no step markers" in text


def test_json_of_an_analysis_and_a_comparison(slow_map, fast):
    data = json.loads(to_json(slow_map))
    assert data == json.loads(json.dumps(slow_map.to_dict()))
    assert data["bottleneck"]["display_name"] == "ParallelMapV2 (parse)"
    one_line = to_json(compare(slow_map, fast), indent=None)
    assert "\n" not in one_line
    assert set(json.loads(one_line)) == {
        "before",
        "after",
        "input_wait_change",
        "step_time_ratio",
        "caveats",
    }


def test_html_escapes_what_it_shows(slow_map):
    page = to_html(dataclasses.replace(slow_map, logdir="runs/<a&b>"))
    assert page.startswith('<!DOCTYPE html><html lang="en">')
    assert "<title>tf.data profile: runs/&lt;a&amp;b&gt;</title>" in page
    assert "<a&b>" not in page
    assert '<p class="bn">Bottleneck: ParallelMapV2 (parse)' in page


def test_write_html_creates_the_folder(slow_map, fast, tmp_path):
    comparison = compare(slow_map, fast)
    path = write_html(comparison, tmp_path / "a" / "b" / "compare.html")
    assert path == tmp_path / "a" / "b" / "compare.html"
    page = path.read_text(encoding="utf-8")
    assert page == to_html(comparison)
    assert "A (before)" in page and "B (after)" in page


def test_step_breakdown_bars_stack_the_categories():
    steps = [
        _step("train 1", input_ms=3.0, host_compute_ms=1.0),
        _step("train 2", input_ms=1.5, kernel_launch_ms=0.25, compile_ms=0.25, other_ms=2.0),
    ]
    svg = svg_step_breakdown(steps)
    assert _titles(svg) == [
        "train 1: Input 3.00 ms",
        "train 1: Host compute 1.00 ms",
        "train 2: Input 1.50 ms",
        "train 2: Launch/compile/transfer 0.50 ms",
        "train 2: All others 2.00 ms",
    ]
    labels = [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert {"1", "2", "Input", "Device compute"} <= set(labels)
    assert "5" in labels  # the axis tops at a round number above the 4 ms steps


def test_stage_bars_mark_the_bottleneck(slow_map):
    main = slow_map.main_pipeline
    svg = ET.fromstring(svg_stage_times(main, top_n=2))
    bars = [r for r in svg.iter(f"{SVG}rect")]
    assert len(bars) == 2
    assert bars[0].get("fill") == "#d62728"  # the bottleneck, first: the largest self time
    assert bars[0].find(f"{SVG}title").text.startswith(f"{main.bottleneck.stage}: ")
    assert bars[1].get("fill") == "#1f77b4"


@pytest.mark.parametrize(
    ("svg", "message"),
    [
        (lambda: svg_step_breakdown([]), "No marked steps"),
        (lambda: svg_stage_times(None), "No tf.data stages"),
    ],
    ids=["no-steps", "no-pipeline"],
)
def test_empty_charts_say_why(svg, message):
    assert svg().startswith(f"<p>{message}")
