"""Profiler traces of tf.data pipelines: capture, offline analysis, reports.

    import profiles

    result = profiles._capture(dataset, step, logdir="runs/profile", steps=10, warmup=5)
    analysis = profiles.analyze(result.logdir)
    print(analysis.input_wait.average, analysis.bottleneck.summary)
    profiles.render(analysis)

``import profiles`` is light: TensorFlow, xprof and rich are imported only by the
functions that need them. The names below are the public API (docs/api.md); the
modules behind them are private (``profiles._analysis``, ...), except `profiles.cli`.
"""

from __future__ import annotations

import sys

from profiles._analysis import (
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
from profiles._capture import CaptureConfig, CaptureResult, capture
from profiles._errors import ProfileError, XprofLayoutError
from profiles._report import format_text, render, render_comparison, to_html, to_json, write_html
from profiles._stages import Bottleneck, PipelineStages, StageTiming, rebuild_stages
from tfinput.deprecation import MovedModules

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

#: Modules that became private (docs/api.md): their old names import, with a warning,
#: for one release.
_MOVED = ("advice", "analysis", "errors", "report", "stages", "testing")
MovedModules({f"profiles.{m}": f"profiles._{m}" for m in _MOVED}, public="profiles").install()
# ``profiles.capture`` is the function; its old module path is registered as it is
# (no warning), so that importing it never replaces the function on the package.
sys.modules.setdefault("profiles.capture", sys.modules["profiles._capture"])
