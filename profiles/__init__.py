"""Profiler traces of tf.data pipelines: capture, offline analysis, reports.

    import profiles

    result = profiles.capture(dataset, step, logdir="runs/profile", steps=10, warmup=5)
    analysis = profiles.analyze(result.logdir)
    print(analysis.input_wait.average, analysis.bottleneck.summary)
    profiles.render(analysis)

``import profiles`` is light: TensorFlow, xprof and rich are imported only by the
functions that need them. The names below are the public API (docs/api.md); the
modules behind them are private (``profiles._analysis``, ``profiles._cli``, ...).
"""

from profiles._analysis import analyze as analyze
from profiles._analysis import compare as compare
from profiles._capture import CaptureConfig as CaptureConfig
from profiles._capture import CaptureResult as CaptureResult
from profiles._capture import capture as capture
from profiles._html import to_html as to_html
from profiles._html import write_html as write_html
from profiles._report import format_text as format_text
from profiles._report import render as render
from profiles._report import render_comparison as render_comparison
from profiles._report import to_json as to_json
from profiles._results import Comparison as Comparison
from profiles._results import InputOp as InputOp
from profiles._results import ProfileAnalysis as ProfileAnalysis
from profiles._results import Spread as Spread
from profiles._results import StepTime as StepTime
from profiles._stages import Bottleneck as Bottleneck
from profiles._stages import PipelineStages as PipelineStages
from profiles._stages import StageTiming as StageTiming
from profiles._stages import rebuild_stages as rebuild_stages
from profiles._xplane import ProfileError as ProfileError
from profiles._xplane import TraceRun as TraceRun
from profiles._xplane import XprofLayoutError as XprofLayoutError
from profiles._xplane import find_trace as find_trace
from profiles._xprof import TESTED_XPROF as TESTED_XPROF
from profiles._xprof import xprof_version as xprof_version

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


def __dir__() -> list[str]:
    return sorted(__all__)
