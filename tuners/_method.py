"""How every number of a tuning run was taken, as `tuners.TuneResult` records it: the
machine's fingerprint, the method (windows, confirmation, sampler), the pruner and the
step."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tuners._advice import INPUT_BOUND_THRESHOLD

if TYPE_CHECKING:  # pragma: no cover
    import optuna

    from tfinput._src.measurement.windows import WindowPlan
    from tfinput.steps import Step


def fingerprint(cpu_count: int) -> dict[str, object]:
    """CPU model and count, accelerators, TensorFlow version, the Keras backend and (when
    JAX is imported) the JAX version: what the numbers belong to."""
    import sys

    import tensorflow as tf

    from tfinput._src.measurement.probes import machine

    info = dict(machine(cpu_count=cpu_count))
    accelerators = [
        d.device_type + ":" + d.name.rsplit(":", 1)[-1]
        for d in tf.config.list_physical_devices()
        if d.device_type != "CPU"
    ]
    jax = sys.modules.get("jax")
    if jax is not None:  # a JAX or Keras-on-JAX step: its devices, not TensorFlow's
        with contextlib.suppress(RuntimeError):  # no JAX backend could start
            accelerators += [
                f"jax:{d.platform}:{d.device_kind}" for d in jax.devices() if d.platform != "cpu"
            ]
    info["accelerators"] = accelerators or None
    if "keras_backend" not in info:
        try:
            import keras

            info["keras_backend"] = str(keras.config.backend())
        except ImportError:
            info["keras_backend"] = None
    info["jax"] = str(getattr(jax, "__version__", "")) or None if jax is not None else None
    return info


def describe_method(
    plan: WindowPlan,
    *,
    confirm_top: int,
    confirm_windows: int,
    study: optuna.Study,
    seed: int | None = None,
) -> dict[str, object]:
    """`TuneResult.method`: how each number of a tuning run was measured.

    Args:
      plan: The measurement of each trial (`tfinput.bench.WindowPlan`).
      confirm_top: Distinct best configs re-measured in the confirmation.
      confirm_windows: Interleaved windows per config in the confirmation.
      study: The Optuna study (its pruner and sampler are named).
      seed: The default sampler's seed (drawn per process unless one was given; None
        for a sampler of the user's).

    Returns:
      ``{what: how}`` sentences, JSON-ready.
    """
    return {
        "trial": f"fresh iterator, {plan.warmup_batches} warm-up batches excluded, "
        f"{plan.windows} windows of {window_rule(plan)}; objective = median "
        "examples/s over windows",
        "window_seconds": plan.window_seconds,
        "window_batches": plan.window_batches,
        "pruning": describe_pruner(study.pruner),
        "sampler": type(study.sampler).__name__,
        "sampler_seed": seed,
        "confirmation": f"top {confirm_top} configs, autotune (and current) re-measured "
        f"interleaved, {confirm_windows} windows each of {window_rule(plan)}, fresh "
        "iterator per window; paired ratio = median of the per-round ratios to "
        "autotune, which ranks the configs and the verdict reads; median = median "
        "examples/s over the rounds",
        "one trial per host": "exclusive host file lock during measurement",
        "beats autotune": "the winner's per-round ratios to autotune in the "
        "confirmation all above 1 (the paired spread excludes 1)",
        "input wait": "share of the confirmation's window time spent waiting for the "
        "next batch; when the step owns the loop (model.fit), 1 - fed / step bound, the "
        f"step bound measured on one cached batch repeated; input-bound when every "
        f"round waited at least {INPUT_BOUND_THRESHOLD:.0%} (measured), or every round fed "
        "slower than every round of the step bound (step bound); not input-bound under "
        f"{INPUT_BOUND_THRESHOLD:.0%} or within the rounds' spread; otherwise cannot tell",
        "gain by knob": "the winner against itself with each differing knob group "
        f"reverted to autotune's values, interleaved, {confirm_windows} windows each; "
        "contribution = winner / without the group, median of per-round ratios",
    }


def window_rule(plan: WindowPlan) -> str:
    """How long each window is: a time target (batches from the warm-up's rate) or a
    fixed count."""
    if plan.timed:
        return (
            f"at least {plan.window_seconds:g} s and {plan.window_batches} batches (the "
            "batches from the warm-up's rate)"
        )
    return f"{plan.window_batches} batches"


def describe_pruner(pruner: Any) -> str:
    """The pruner's own description (`tuners._objective.NoiseAwarePruner.describe`), or
    its class name."""
    from tuners._objective import NoiseAwarePruner

    if isinstance(pruner, NoiseAwarePruner):
        return pruner.describe()
    return type(pruner).__name__


def describe_step(step: Step | Callable[[Any], object]) -> dict[str, object]:
    """The step's own description (`tfinput.steps.Step.describe`), or its name."""
    from tfinput.steps import Step

    if isinstance(step, Step):
        return step.describe()
    return {"name": getattr(step, "__name__", str(step))}
