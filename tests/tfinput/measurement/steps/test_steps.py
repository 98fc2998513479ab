"""`tfinput._src.measurement.steps`: `make`, a step from command-line choices (``--step``,
``--model``, ``--step-fn``, ``--device-time-ms``)."""

from __future__ import annotations

import pytest

from tfinput import steps
from tfinput.errors import ConfigError

FACTORIES = """
import keras

def model(schema):
    inputs = keras.Input(shape=(len(schema.features),))
    m = keras.Model(inputs, keras.layers.Dense(1)(inputs), name="mine")
    m.compile(loss="mse")
    return m

def step(batch):
    return None
"""


def test_make_builds_every_cli_step(small_schema, tmp_path, monkeypatch):
    pytest.importorskip("jax")
    (tmp_path / "jaxfactory.py").write_text(
        "import jax.numpy as jnp\n"
        "def make(schema):\n"
        "    return (lambda s, b: s + 1), jnp.int32(len(schema.features))\n"
        "def bad():\n"
        "    return 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fit = steps.make("ranking_fit", schema=small_schema)
    assert fit.kind == "keras_fit" and "steps_per_execution" in fit.describe()
    jx = steps.make("jax", schema=small_schema, step_fn="jaxfactory:make")
    assert jx.kind == "jax" and int(jx.state) == len(small_schema.features)
    assert set(steps.CLI_STEPS) >= {"ranking_fit", "keras_fit", "jax"}
    with pytest.raises(ConfigError, match="--step keras_fit needs --model"):
        steps.make("keras_fit")
    with pytest.raises(ConfigError, match="--step jax needs --step-fn"):
        steps.make("jax")
    with pytest.raises(ConfigError, match=r"\(step_fn, initial_state\), got int"):
        steps.make("jax", step_fn="jaxfactory:bad")
    with pytest.raises(ConfigError, match="use --step keras_fit --model"):
        steps.make("ranking_fit")


def test_make_the_framework_free_steps(tmp_path):
    (tmp_path / "factories.py").write_text(FACTORIES)
    assert steps.make("input_only").kind == "input_only"
    sim = steps.make("simulated", device_time_ms=5)
    assert sim.kind == "simulated" and sim.device_time_s == 0.005
    fn = steps.make("function", step_fn=f"{tmp_path / 'factories.py'}:step")
    assert fn.kind == "function" and fn.name == "step"


def test_make_keras_steps_from_a_model_factory(small_schema, tmp_path):
    (tmp_path / "factories.py").write_text(FACTORIES)
    spec = f"{tmp_path / 'factories.py'}:model"
    keras_step = steps.make("keras", schema=small_schema, model=spec)
    assert keras_step.kind == "keras" and keras_step.name == "keras mine (tensorflow)"
    assert steps.make("keras_fit", model=spec, schema=small_schema).kind == "keras_fit"
    ranking = steps.make("ranking", schema=small_schema)
    assert ranking.kind == "keras" and ranking.accepts_packed


@pytest.mark.parametrize(
    ("kind", "options", "message"),
    [
        ("simulated", {}, "the simulated step needs --device-time-ms > 0"),
        ("simulated", {"device_time_ms": -2.0}, "the simulated step needs --device-time-ms > 0"),
        ("function", {}, "--step function needs --step-fn MODULE:FUNCTION"),
        ("keras", {}, "--step keras needs --model MODULE:FUNCTION"),
        ("ranking", {}, "the ranking step needs a tfinput pipeline.*use --step keras --model"),
        ("function", {"step_fn": "nocolon"}, "--step-fn: expected MODULE:FUNCTION"),
        ("fastest", {}, r"unknown step 'fastest'; choose from \['input_only', 'ranking'"),
    ],
    ids=["no-device-time", "negative-time", "no-step-fn", "no-model", "no-schema", "bad-spec",
         "unknown"],
)  # fmt: skip
def test_make_names_the_missing_or_bad_option(kind, options, message):
    with pytest.raises(ConfigError, match=message):
        steps.make(kind, **options)
