"""Profiler traces of tf.data pipelines: capture, offline analysis, reports.

    import profiles

    result = profiles.capture(dataset, step, logdir="runs/profile", steps=10, warmup=5)
    analysis = profiles.analyze(result.logdir)
    print(analysis.input_wait.average, analysis.bottleneck.summary)
    profiles.render(analysis)

``import profiles`` is light: TensorFlow, xprof and rich are imported only by the
functions that need them.
"""

from __future__ import annotations

from profiles.analysis import (
    TESTED_XPROF,
    Comparison,
    InputOp,
    ProfileAnalysis,
    Spread,
    StepTime,
    TraceRun,
    analyze,
    compare,
    find_trace,
    xprof_version,
)
from profiles.capture import CaptureConfig, CaptureResult, capture
from profiles.errors import ProfileError, XprofLayoutError
from profiles.report import format_text, render, render_comparison, to_html, to_json, write_html
from profiles.stages import Bottleneck, PipelineStages, StageTiming, rebuild_stages

#: Former name of `StageTiming` (renamed so as not to clash with `tfinput.bench.Stage`);
#: kept because it is public API.
Stage = StageTiming

__all__ = [
    "TESTED_XPROF",
    "Bottleneck",
    "CaptureConfig",
    "CaptureResult",
    "Comparison",
    "InputOp",
    "PipelineStages",
    "ProfileAnalysis",
    "ProfileError",
    "Spread",
    "Stage",
    "StageTiming",
    "StepTime",
    "TraceRun",
    "XprofLayoutError",
    "analyze",
    "capture",
    "compare",
    "find_trace",
    "format_text",
    "rebuild_stages",
    "render",
    "render_comparison",
    "to_html",
    "to_json",
    "write_html",
    "xprof_version",
]
