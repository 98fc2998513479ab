"""`tfinput._src.measurement.steps.base`: the `Step` object (call, prepare, describe, state, packed
batches) and the names of the step kinds."""

from __future__ import annotations

import pytest

import tfinput
from tfinput import steps
from tfinput.errors import ConfigError


def test_step_kinds_and_cli_names():
    assert set(steps.STEP_KINDS) <= set(steps.CLI_STEPS)
    assert set(steps.CLI_STEPS) - set(steps.STEP_KINDS) == {"ranking", "ranking_fit"}
    assert len(set(steps.CLI_STEPS)) == len(steps.CLI_STEPS)


def test_a_plain_step_calls_its_function_and_is_the_same_for_every_config():
    seen = []
    step = steps.Step(kind="function", name="mine", fn=lambda b: seen.append(b) or len(b))
    assert step([1, 2, 3]) == 3 and seen == [[1, 2, 3]]
    assert step.prepare(tfinput.PipelineConfig(steps_per_execution=4)) is step
    assert not step.owns_loop and not step.accepts_packed
    assert step.describe() == {"kind": "function", "name": "mine"}


def test_of_declares_a_callable_or_nothing_as_a_step():
    step = steps.function_step(len)
    assert steps.Step.of(step) is step
    seen = []

    def mine(batch):
        seen.append(batch)
        return "not fetched"

    declared = steps.Step.of(mine)
    assert declared("b") == "not fetched" and seen == ["b"]  # called as it is
    assert declared.describe() == {"kind": "function", "name": "mine"}
    nothing = steps.Step.of(None)
    assert nothing.describe() == steps.input_only().describe()
    assert nothing.accepts_packed and nothing("batch") is None
    with pytest.raises(ConfigError, match="expected a tfinput Step or a callable, got int"):
        steps.Step.of(3)


def test_each_kind_is_a_class_with_its_kind_fixed():
    assert set(steps.STEP_CLASSES) == set(steps.STEP_KINDS)
    made = {
        "input_only": steps.input_only(),
        "function": steps.function_step(len),
        "simulated": steps.simulated_step(0.01),
        "declared function": steps.Step.of(len),
    }
    assert type(made["input_only"]) is steps.InputOnlyStep
    assert type(made["function"]) is type(made["declared function"]) is steps.FunctionStep
    assert type(made["simulated"]) is steps.SimulatedStep
    for step in made.values():
        assert steps.STEP_CLASSES[step.kind] is type(step)
        assert isinstance(step, steps.Step)
    assert steps.KerasFitStep(name="n", fn=len).kind == "keras_fit"
    with pytest.raises(ConfigError, match="KerasStep: its kind is 'keras', not 'jax'"):
        steps.KerasStep(kind="jax", name="n", fn=len)
    assert steps.Step(kind="jax", name="n", fn=len).kind == "jax"  # a plain Step still works


def test_prepare_and_describe_carry_every_field():
    def prepare(config):
        return steps.Step(
            kind="jax",
            name="loop",
            fn=lambda b: None,
            backend="jax",
            feeds_device=True,
            run_windows=lambda source, **kw: [],
            details={"device_prefetch": config.device_prefetch},
            state_fn=lambda: 7,
        )

    step = steps.Step(kind="jax", name="loop", fn=lambda b: None, prepare_fn=prepare)
    ready = step.prepare(tfinput.PipelineConfig(device_prefetch=3))
    assert ready.owns_loop and ready.state == 7
    assert ready.describe() == {
        "kind": "jax",
        "name": "loop",
        "backend": "jax",
        "feeds_device": True,
        "device_prefetch": 3,
    }
    sim = steps.Step(kind="simulated", name="s", fn=lambda b: None, device_time_s=0.5)
    assert sim.describe() == {"kind": "simulated", "name": "s", "device_time_s": 0.5}


def test_a_stateless_step_names_itself_when_asked_for_state():
    step = steps.Step(kind="function", name="mine", fn=lambda b: None)
    with pytest.raises(ConfigError, match=r"^step 'mine' \(function\) carries no state$"):
        _ = step.state


def test_which_steps_accept_packed_batches(small_schema):
    """The tuner searches ``layout`` only for steps that take packed batches."""
    import keras

    from tfinput import models

    assert steps.input_only().accepts_packed
    assert steps.simulated_step(0.001).accepts_packed
    assert steps.keras_step(models.ranking_model(small_schema)).accepts_packed
    assert steps.keras_fit_step(models.ranking_model(small_schema)).accepts_packed
    own = keras.Sequential([keras.layers.Dense(1)])
    own.compile(loss="mse")
    assert not steps.keras_step(own).accepts_packed
    assert not steps.function_step(lambda batch: None).accepts_packed
