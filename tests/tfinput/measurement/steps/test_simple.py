"""`tfinput._src.measurement.steps.simple`: the input-only, user-function and simulated-device steps."""

from __future__ import annotations

import pytest
import tensorflow as tf

from tfinput import steps
from tfinput.errors import ConfigError


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
