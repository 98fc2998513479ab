"""`tfinput._src.measurement.steps.base`: the `Step` object (call, prepare, describe, state, packed
batches), the names of the step kinds, the input-only, user-function and simulated-device
steps, and the JAX step (a user's jitted ``fn(state, batch) -> state`` fed by tfinput, with
and without device prefetch)."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tfinput import steps
from tfinput._src.measurement.windows import WindowPlan
from tfinput.errors import ConfigError, DataError


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
    with pytest.raises(ConfigError, match=r"Step 'n': a kind is needed, one of \['input_only'"):
        steps.Step(name="n", fn=len)
    replaced = dataclasses.replace(steps.KerasFitStep(name="n", fn=len), name="m")
    assert type(replaced) is steps.KerasFitStep and replaced.kind == "keras_fit"


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


def test_input_only_consumes_the_batch():
    step = steps.input_only()
    assert step({"x": 1}) is None
    assert step.describe() == {"kind": "input_only", "name": "input only"}
    assert step.accepts_packed and not step.owns_loop


def test_function_step_returns_what_the_function_returns_and_fetches_tensors():
    fetched = []

    class Handle:
        """A result of an asynchronous step: `numpy()` waits for it."""

        def numpy(self):
            fetched.append(self)
            return 0

    handles = [Handle(), Handle(), Handle()]

    def train(batch):
        return {"loss": handles[0], "more": [handles[1], (handles[2], None)], "n": batch}

    step = steps.function_step(train)
    out = step(3)
    assert out["n"] == 3 and fetched == handles
    assert step.kind == "function" and step.name == "train"
    assert float(steps.function_step(lambda b: tf.reduce_sum(b), name="sum")(tf.ones(4))) == 4.0
    assert steps.function_step(lambda b: None, name="sum").describe()["name"] == "sum"


def test_function_step_refuses_a_non_callable():
    with pytest.raises(ConfigError, match=r"^function_step: expected a callable, got int$"):
        steps.function_step(3)


def test_simulated_step_sleeps_its_device_time():
    slept: list[float] = []
    step = steps.simulated_step(0.02, sleep=slept.append)
    step("batch")
    step("batch")
    assert slept == [0.02, 0.02]
    assert step.describe() == {
        "kind": "simulated",
        "name": "simulated accelerator 20 ms/batch",
        "device_time_s": 0.02,
    }
    assert step.accepts_packed


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan")], ids=["zero", "negative", "nan"])
def test_simulated_step_needs_a_positive_device_time(seconds):
    with pytest.raises(ConfigError, match="simulated_step: device_time_s must be > 0"):
        steps.simulated_step(seconds)


#: The JAX step's tests need JAX (the other steps' do not).
needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs jax")


def _jax_source(cfg):
    import tensorflow as tf

    x = np.arange(40 * 3, dtype=np.float32).reshape(40, 3)
    ds = tf.data.Dataset.from_tensor_slices({"x": x, "y": np.arange(40, dtype=np.int32)})
    return ds.batch(cfg.batch_size, drop_remainder=True).repeat()


def _jax_train():
    import jax
    import jax.numpy as jnp

    @jax.jit
    def train(state, batch):
        return {
            "w": state["w"] * 0.5 + jnp.sum(batch["x"], axis=0),
            "n": state["n"] + batch["y"].shape[0],
            "last": batch["y"][-1],
        }

    return train, {"w": jnp.zeros(3), "n": jnp.int32(0), "last": jnp.int32(-1)}


@needs_jax
def test_jax_step_trains_and_device_prefetch_gives_the_same_state():
    import jax

    from tuners._objective import measure

    final = []
    for prefetch in (0, 2):
        train, state = _jax_train()
        step = steps.jax_step(train, state)
        config = tfinput.PipelineConfig(batch_size=4, device_prefetch=prefetch)
        assert step.feeds_device and step.backend == "jax" and step.owns_loop
        assert step.prepare(config).describe()["device_prefetch"] == prefetch
        m = measure(
            _jax_source,
            config,
            step,
            plan=WindowPlan(windows=2, window_batches=3, warmup_batches=1),
        )
        assert len(m.rates) == 2 and all(r > 0 for r in m.rates)
        assert 0.0 <= m.stall <= 1.0
        # 1 warm-up + 2 x 3 batches of 4 examples: 7 batches, the last one is rows 24-27.
        assert int(step.state["n"]) == 28 and int(step.state["last"]) == 27
        final.append(step.state)
    same = jax.tree_util.tree_map(lambda a, b: bool(np.allclose(a, b)), *final)
    assert all(jax.tree_util.tree_leaves(same)), same


@needs_jax
def test_jax_step_jits_a_plain_function_and_runs_one_batch():
    def plain(state, batch):
        return state + batch["y"].sum()

    step = steps.jax_step(plain, np.int32(0))
    batch = next(iter(_jax_source(tfinput.PipelineConfig(batch_size=4))))
    assert int(step(batch)) == 0 + 1 + 2 + 3 and int(step.state) == 6
    assert step.name == "jax plain"
    with pytest.raises(ConfigError, match="carries no state"):
        _ = steps.input_only().state
    with pytest.raises(ConfigError, match="callable"):
        steps.jax_step(42, None)


@needs_jax
def test_jax_step_windows_count_examples_and_need_data_past_the_warmup():
    train, state = _jax_train()
    assert steps.jax_step(train, state).name == "jax train"  # named through jax.jit
    step = steps.jax_step(train, state).prepare(tfinput.PipelineConfig(device_prefetch=1))
    ws = step.run_windows(
        _jax_source(tfinput.PipelineConfig(batch_size=5)),
        plan=WindowPlan(warmup_batches=2, windows=2, window_batches=3),
        batch_size=None,
    )
    assert [(w.round, w.batches, w.examples) for w in ws] == [(0, 3, 15), (1, 3, 15)]
    assert int(step.state["n"]) == 40 and int(step.state["last"]) == 39  # 8 batches of 5
    short = _jax_source(tfinput.PipelineConfig(batch_size=20)).take(1)
    with pytest.raises(DataError, match=r"step: the data ended after 1 warm-up batch\(es\)"):
        step.run_windows(
            short, plan=WindowPlan(warmup_batches=2, windows=1, window_batches=1), batch_size=20
        )
