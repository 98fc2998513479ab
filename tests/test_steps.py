"""Step kinds on every Keras backend: the TensorFlow one in-process, JAX in a child
process (Keras picks its backend once per process, from KERAS_BACKEND)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tfinput
from tfinput import steps
from tfinput.errors import ConfigError


def _env(backend: str) -> dict[str, str]:
    return {
        **os.environ,
        "KERAS_BACKEND": backend,
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }


def test_keras_step_on_the_tensorflow_backend(small_tfrecord, small_schema):
    from tfinput import models

    model = models.ranking_model(small_schema)
    step = steps.keras_step(model)
    assert step.kind == "keras" and step.name.endswith("(tensorflow)")
    ds = tfinput.tfrecord(small_tfrecord, small_schema).build(tfinput.PipelineConfig(batch_size=50))
    losses = [float(np.asarray(step(b)).reshape(-1)[0]) for b in ds.take(3)]
    assert all(np.isfinite(losses))


def test_keras_step_refuses_a_non_model():
    with pytest.raises(ConfigError, match="compiled Keras model"):
        steps.keras_step(object())


_JAX_STEP = """
import numpy as np, keras, tfinput
from tfinput import models, steps
assert keras.config.backend() == "jax"
schema = tfinput.testing.small_schema()
ds = tfinput.tfrecord(FILES, schema).build(tfinput.PipelineConfig(batch_size=50))
step = steps.keras_step(models.ranking_model(schema))
losses = [float(np.asarray(step(b)).reshape(-1)[0]) for b in ds.take(3)]
assert all(np.isfinite(losses)), losses
print("NAME", step.name)
"""


def test_keras_step_on_the_jax_backend(small_tfrecord):
    pytest.importorskip("jax")
    code = _JAX_STEP.replace("FILES", repr(list(small_tfrecord)))
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=_env("jax"),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "NAME keras" in out.stdout and "(jax)" in out.stdout


@pytest.mark.slow
def test_tune_with_the_ranking_step_on_the_jax_backend(small_tfrecord, small_schema, tmp_path):
    """`tfinput tune --step ranking` under KERAS_BACKEND=jax: trials and confirmation
    complete and the result is written (every trial used to fail with a TypeError)."""
    pytest.importorskip("jax")
    schema = tmp_path / "schema.json"
    small_schema.to_json(schema)
    out_dir = tmp_path / "tune"
    cmd = [
        sys.executable, "-m", "tfinput.cli", "tune", *small_tfrecord,
        "--schema", str(schema), "--step", "ranking", "--n-trials", "3",
        "--batch-size", "50", "--windows", "2", "--window-batches", "2",
        "--warmup-batches", "1", "--confirm-top", "1", "--confirm-windows", "1",
        "--out", str(out_dir), "--json",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, env=_env("jax"), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((out_dir / "result.json").read_text())
    assert result["trials"]["complete"] >= 1, result["trials"]
    assert "(jax)" in json.dumps(result)


# ------------------------------------------------------------------ keras_fit
@pytest.fixture(scope="module")
def fit_model(small_schema):
    from tfinput import models

    return models.ranking_model(small_schema)


@pytest.mark.parametrize("k", [1, 4], ids=["steps_per_execution_1", "steps_per_execution_4"])
def test_keras_fit_step_measures_windows_on_the_tensorflow_backend(
    small_tfrecord, small_schema, fit_model, k
):
    from tuners.objective import measure

    step = steps.keras_fit_step(fit_model)
    assert step.kind == "keras_fit" and step.name.endswith("(tensorflow)")
    assert step.owns_loop and step.backend == "tensorflow"
    config = tfinput.PipelineConfig(batch_size=50, steps_per_execution=k)
    prepared = step.prepare(config)
    assert prepared.describe()["steps_per_execution"] == k
    assert prepared.describe()["backend"] == "tensorflow"
    before = [np.array(w) for w in fit_model.get_weights()]
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    m = measure(pipeline, config, step, windows=2, window_batches=6, warmup_batches=2)
    assert len(m.rates) == 2 and all(r > 0 for r in m.rates)
    assert m.stall is None and m.to_attrs()["stall_fraction"] is None
    assert fit_model.steps_per_execution == k
    after = fit_model.get_weights()
    assert any(not np.allclose(a, b) for a, b in zip(before, after))

    # Windows directly: 6 batches are rounded up to a multiple of k; examples counted.
    ws = prepared.run_windows(
        pipeline.build(config).repeat(),
        batch_size=50,
        warmup_batches=1,
        windows=2,
        window_batches=6,
    )
    batches = 6 if k == 1 else 8
    assert [w.batches for w in ws] == [batches, batches]
    assert [w.examples for w in ws] == [50 * batches] * 2
    assert all(w.wait_seconds is None and w.seconds > 0 for w in ws)


def test_keras_fit_step_stops_when_report_says_so(small_tfrecord, small_schema, fit_model):
    from tuners.objective import measure

    seen: list[int] = []

    def report(i: int, rate: float) -> bool:
        seen.append(i)
        return True

    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    config = tfinput.PipelineConfig(batch_size=50)
    m = measure(
        pipeline,
        config,
        steps.keras_fit_step(fit_model),
        windows=4,
        window_batches=2,
        warmup_batches=1,
        report=report,
    )
    assert seen == [0] and len(m.rates) == 1 and m.stopped_early


def test_step_bound_on_one_cached_batch(small_tfrecord, small_schema, fit_model):
    """The tuner's step bound: one batch cached and repeated, fed to model.fit."""
    from tuners.objective import measure

    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    config = tfinput.PipelineConfig(batch_size=50, steps_per_execution=2)
    m = measure(
        lambda cfg: pipeline.build(cfg).take(1).cache().repeat(),
        config,
        steps.keras_fit_step(fit_model),
        windows=2,
        window_batches=4,
        warmup_batches=1,
    )
    assert len(m.rates) == 2 and all(r > 0 for r in m.rates)
    # The same source with a per-batch step (the cached batch is served forever).
    m2 = measure(
        lambda cfg: pipeline.build(cfg).take(1).cache().repeat(),
        config,
        steps.input_only(),
        windows=3,
        window_batches=10,
        warmup_batches=2,
    )
    assert len(m2.rates) == 3 and m2.stall is not None


def test_keras_fit_step_needs_a_dataset_and_a_model(fit_model):
    with pytest.raises(ConfigError, match="compiled Keras model"):
        steps.keras_fit_step(object())
    step = steps.keras_fit_step(fit_model)
    with pytest.raises(ConfigError, match=r"tf\.data\.Dataset"):
        step.run_windows([1, 2, 3], batch_size=1, warmup_batches=0, windows=1, window_batches=1)


# ------------------------------------------------------------------------ jax
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


def test_jax_step_trains_and_device_prefetch_gives_the_same_state():
    pytest.importorskip("jax")
    import jax

    from tuners.objective import measure

    final = []
    for prefetch in (0, 2):
        train, state = _jax_train()
        step = steps.jax_step(train, state)
        config = tfinput.PipelineConfig(batch_size=4, device_prefetch=prefetch)
        assert step.feeds_device and step.backend == "jax" and step.owns_loop
        assert step.prepare(config).describe()["device_prefetch"] == prefetch
        m = measure(_jax_source, config, step, windows=2, window_batches=3, warmup_batches=1)
        assert len(m.rates) == 2 and all(r > 0 for r in m.rates)
        assert 0.0 <= m.stall <= 1.0
        # 1 warm-up + 2 x 3 batches of 4 examples: 7 batches, the last one is rows 24-27.
        assert int(step.state["n"]) == 28 and int(step.state["last"]) == 27
        final.append(step.state)
    same = jax.tree_util.tree_map(lambda a, b: bool(np.allclose(a, b)), *final)
    assert all(jax.tree_util.tree_leaves(same)), same


def test_jax_step_jits_a_plain_function_and_runs_one_batch():
    pytest.importorskip("jax")

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


# ----------------------------------------------------------------------- make
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


# --------------------------------------------------------------- jax backend
_JAX_BACKEND = """
import numpy as np, keras, tfinput
from tfinput import models, steps
from tuners.objective import measure
assert keras.config.backend() == "jax"
schema = tfinput.testing.small_schema()
pipeline = tfinput.tfrecord(FILES, schema)
model = models.ranking_model(schema)
before = [np.array(w) for w in model.get_weights()]
for step in (steps.keras_step(model), steps.keras_fit_step(model)):
    for extra in ({"device_prefetch": 2}, {"steps_per_execution": 2}):
        config = tfinput.PipelineConfig(batch_size=50, **extra)
        m = measure(pipeline, config, step, windows=2, window_batches=2, warmup_batches=1)
        assert len(m.rates) == 2 and min(m.rates) > 0, m
        print("RESULT", step.kind, step.prepare(config).describe()["backend"], m.stall)
after = model.get_weights()
assert any(not np.allclose(a, np.asarray(b)) for a, b in zip(before, after))
"""


def test_keras_and_keras_fit_steps_on_the_jax_backend(small_tfrecord):
    pytest.importorskip("jax")
    code = _JAX_BACKEND.replace("FILES", repr(list(small_tfrecord)))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env("jax"), timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line.split() for line in out.stdout.splitlines() if line.startswith("RESULT")]
    assert [line[1:3] for line in lines] == [["keras", "jax"]] * 2 + [["keras_fit", "jax"]] * 2
    assert [line[3] for line in lines[2:]] == ["None", "None"]  # model.fit hides input waits
    assert all(float(line[3]) >= 0 for line in lines[:2])


def test_keras_step_on_the_torch_backend(small_tfrecord):
    pytest.importorskip("torch")
    code = _JAX_STEP.replace("FILES", repr(list(small_tfrecord))).replace('"jax"', '"torch"')
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env("torch"), timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "(torch)" in out.stdout


@pytest.mark.slow
def test_tune_with_the_ranking_fit_step_on_the_jax_backend(small_tfrecord, small_schema, tmp_path):
    """`tfinput tune --step ranking_fit` under KERAS_BACKEND=jax: model.fit trials and
    confirmation complete; the backend is in the step description and the fingerprint."""
    pytest.importorskip("jax")
    schema = tmp_path / "schema.json"
    small_schema.to_json(schema)
    out_dir = tmp_path / "tune"
    cmd = [
        sys.executable, "-m", "tfinput.cli", "tune", *small_tfrecord,
        "--schema", str(schema), "--step", "ranking_fit", "--n-trials", "2",
        "--batch-size", "50", "--windows", "2", "--window-batches", "2",
        "--warmup-batches", "1", "--confirm-top", "1", "--confirm-windows", "1",
        "--out", str(out_dir), "--json",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, env=_env("jax"), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((out_dir / "result.json").read_text())
    assert result["trials"]["complete"] >= 1, result["trials"]
    assert result["fingerprint"]["keras_backend"] == "jax"
    assert "keras fit ranking_model (jax)" in json.dumps(result)


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
