"""The results of `profiles.analyze` and `profiles.compare`: frozen dataclasses with a
JSON form (``to_dict``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from profiles._host_bound import HostBoundCheck
from profiles._jax_trace import JaxDeviceTime
from profiles._op_stats import DenseWork, OpTime
from profiles._stages import Bottleneck, PipelineStages
from profiles._xprof import TESTED_XPROF

#: Below this share of step time spent waiting for input (or within the step-to-step
#: noise), the input pipeline is not what limits training (the tuner's threshold too).
INPUT_WAIT_THRESHOLD = 0.03

#: When neither the input nor the device fills the step (device compute under this share
#: of a JAX step), the step's own host work limits training.
DEVICE_BUSY_THRESHOLD = 0.5


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
      host_to_device_ms: Host-to-device transfer: 0 in xprof's breakdown; a step read
        from JAX's trace has it (its input, compute and transfer may overlap).
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
    host_to_device_ms: float = 0.0

    @property
    def input_fraction(self) -> float:
        """Fraction of the step spent waiting for input."""
        return self.input_ms / self.step_ms if self.step_ms > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
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
      capture: What `profiles._capture` recorded about the run (TF version, cores,
        warm-up, steps, step kind), or None for traces captured otherwise.
      jax_device: Device compute and host-to-device transfer per step from JAX's own
        trace, for a step that runs on JAX (whose computation TensorFlow's profiler
        does not see); None otherwise.
      host_stages: The host input stages annotated in that JAX trace (the SparseCore
        feed's read, preprocessing and wait, `device_prefetch`'s transfer), as xprof's
        input-pipeline analyzer counts them: total milliseconds over the profiled
        steps; empty without a JAX trace or annotations.
      step_source: Where ``steps`` come from: ``"xprof"`` (its step breakdown of
        TensorFlow's trace), ``"jax markers"`` or ``"jax executions"`` (JAX's trace,
        when TensorFlow's has no complete step: its step annotations, or each call of
        the jitted step).
      top_ops: The operations with the largest self time per step, on the host and
        the device (`profiles._op_stats`).
      dense_work: Whole reads and updates of variables of at least 16 MB inside the
        step (`profiles._op_stats.DENSE_BYTES`), largest time first.
      variables_recorded: Whether the capture recorded the variables' sizes that
        ``dense_work`` needs (a TensorFlow step captured by `profiles.capture`).
      xprof_host_bound: xprof's host-bound rule on this run (`profiles._host_bound`),
        its verdict or the inputs the trace lacks.
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
    capture: Mapping[str, object] | None = None
    jax_device: JaxDeviceTime | None = None
    host_stages: tuple[InputOp, ...] = ()
    step_source: str = "xprof"
    top_ops: tuple[OpTime, ...] = ()
    dense_work: tuple[DenseWork, ...] = ()
    variables_recorded: bool = False
    xprof_host_bound: HostBoundCheck | None = None

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

    @property
    def input_limits(self) -> bool | None:
        """Whether the input pipeline limits training: the average input wait is at
        least `INPUT_WAIT_THRESHOLD` of the step time and beyond the step-to-step noise
        (`step_noise`). None without marked steps."""
        if self.input_wait is None or self.step_time_ms is None or self._input_only:
            return None
        return self.input_wait.average >= max(INPUT_WAIT_THRESHOLD, self.step_noise)

    @property
    def device_busy(self) -> float | None:
        """Device compute over step time, medians from JAX's own trace (on the CPU: the
        XLA executions); None without one."""
        jax = self.jax_device
        if jax is None or not jax.steps or jax.step_ms <= 0:
            return None
        return jax.compute_ms / jax.step_ms

    @property
    def _input_only(self) -> bool:
        """Captured with no training step (``--step input_only``): the input is all
        there is, so whether it limits training is unknown."""
        return ((self.capture or {}).get("step") or {}).get("kind") == "input_only"

    @property
    def step_noise(self) -> float:
        """How much the step varies from step to step apart from its input wait: the
        standard deviation of each step's time without its wait, over the mean step
        time (a wait that comes and goes is what is judged, not noise)."""
        st = self.step_time_ms
        if st is None or st.average <= 0:
            return 0.0
        if not self.steps:
            return st.stddev / st.average
        rest = [s.step_ms - s.input_ms for s in self.steps]
        mean = sum(rest) / len(rest)
        return (sum((x - mean) ** 2 for x in rest) / len(rest)) ** 0.5 / st.average

    @property
    def verdict(self) -> str:
        """One sentence: whether the input pipeline limits training, from the measured
        input wait and the step-to-step noise (`input_limits`)."""
        limits = self.input_limits
        if self._input_only:
            return (
                "measured input only (no training step): whether the input limits training "
                "is unknown; the stages below are the pipeline's own (profile with your "
                "step to find out)"
            )
        if limits is None or self.input_wait is None:
            if self.steps:
                return (
                    "the trace does not show the steps' wait for input: whether the input "
                    "limits training cannot be told"
                )
            return "no marked steps: whether the input limits training cannot be told"
        wait, noise = self.input_wait.average, self.step_noise
        if limits:
            return (
                f"the input pipeline limits training: the step waited for input {wait:.1%} "
                f"of its time, beyond the step-to-step noise ({noise:.1%}) and "
                f"{INPUT_WAIT_THRESHOLD:.0%}"
            )
        why = (
            f"under {INPUT_WAIT_THRESHOLD:.0%}"
            if wait < INPUT_WAIT_THRESHOLD
            else f"within the step-to-step noise of the rest of the step ({noise:.1%})"
        )
        verdict = (
            f"the input pipeline is not what limits training: the step waited for input "
            f"{wait:.1%} of its time, {why}; no tf.data change will speed it up"
        )
        busy = self.device_busy
        if busy is not None and busy < DEVICE_BUSY_THRESHOLD:
            what = "the device" if self.jax_device.platform == "gpu" else "XLA"  # type: ignore[union-attr]
            verdict += (
                f". {what[0].upper()}{what[1:]} computed {busy:.0%} of the step (JAX's trace): "
                "the step's own host work limits it (framework work per call: run several "
                "steps per call, e.g. Keras' steps_per_execution, or larger batches)"
            )
        return verdict

    @property
    def xprof_applies(self) -> tuple[bool, str]:
        """Whether xprof's input-bound conclusion can be shown: ``(True, "")`` when it
        agrees with `input_limits` (or there is nothing to compare), else ``(False,
        why)``."""
        said = self.xprof_conclusion.lower()
        if not said or self.input_limits is None:
            return True, ""
        xprof_bound = "input-bound" in said and "not input-bound" not in said
        if xprof_bound == self.input_limits:
            return True, ""
        step = (self.capture or {}).get("step") or {}
        if step.get("backend") == "jax":
            return False, (
                "not applicable: the step runs on JAX, whose computation TensorFlow's "
                "profiler does not see, so xprof counts the whole step as 'All others'"
                + ("; its device compute is from JAX's own trace" if self.jax_device else "")
            )
        return False, (
            "not applicable: xprof's step breakdown disagrees with the measured input "
            f"wait ({self.input_wait.average if self.input_wait else 0:.1%} of step time); "
            "it counts time it cannot attribute as 'All others'"
        )

    @property
    def host_bound(self) -> bool | None:
        """tfinput's own answer to xprof's question, whether the host limits training:
        the step waits for input (`input_limits`), or the device computes under
        `DEVICE_BUSY_THRESHOLD` of the step (JAX's trace, else xprof's device compute).
        None when the input wait is unknown."""
        if self.input_limits is None:
            return None
        if self.input_limits:
            return True
        share = self._device_share
        return share is not None and share < DEVICE_BUSY_THRESHOLD

    @property
    def _device_share(self) -> float | None:
        if self.device_busy is not None:
            return self.device_busy
        st = self.step_time_ms
        if self.device_compute_ms is None or st is None or st.average <= 0:
            return None
        return self.device_compute_ms / st.average

    @property
    def host_bound_note(self) -> str:
        """How xprof's host-bound verdict (`xprof_host_bound`) compares with
        tfinput's (`host_bound`), and why they differ when they do; ``""`` when xprof's
        rule does not apply to the trace."""
        check = self.xprof_host_bound
        if check is None or not check.applies:
            return ""
        xprof, ours = check.host_bound, self.host_bound
        if xprof is None:
            return "xprof gives no yes or no: " + (
                "it found no step times in the overview page"
                if check.status == "INSUFFICIENT_DATA"
                else "the TPU's duty cycle is over 50% but its op times are missing"
            )
        if ours is None:
            return "tfinput gives no verdict to compare: the trace shows no wait for input"
        if xprof == ours:
            return "agrees with tfinput's verdict"
        wait = self.input_wait.average if self.input_wait else 0.0
        idle = check.metrics.get("idle_percent", 0.0)
        share = self._device_share
        busy = f", the device computing {share:.0%} of the step" if share is not None else ""
        if xprof:
            return (
                f"differs from tfinput's: xprof counts every moment the TPU idles ({idle:.1f}% "
                "of the steps' time) against the host, whatever keeps the host busy; tfinput "
                f"measured the step waiting for input {wait:.1%} of its time{busy}: the TPU "
                "waits on the step's other host work (Python, dispatch, host ops), not on the "
                "input pipeline"
            )
        return (
            "differs from tfinput's: xprof calls a run host-bound only when its four "
            f"conditions hold together, and here {'; '.join(check.failed)}; tfinput measured "
            f"the step waiting for input {wait:.1%} of its time{busy}, time the device "
            "loses whatever it does the rest of the step"
        )

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict."""
        return _jsonable(
            {
                **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                "bottleneck": self.bottleneck if self.input_limits is not False else None,
                "input_limits": self.input_limits,
                "verdict": self.verdict,
                "device_busy": self.device_busy,
                "xprof_applies": self.xprof_applies[0],
                "host_bound": self.host_bound,
                "host_bound_note": self.host_bound_note,
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

    def to_dict(self) -> dict[str, object]:
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
