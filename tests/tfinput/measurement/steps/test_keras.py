"""`tfinput._src.measurement.steps.keras`: ``train_on_batch`` and ``model.fit`` steps on every Keras
backend: TensorFlow in-process, JAX and torch in a child process (Keras picks its
backend once per process, from KERAS_BACKEND)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tfinput
from tfinput import steps
from tfinput._src.measurement.windows import WindowPlan
from tfinput.errors import ConfigError

#: The least plan: no warm-up, one window of one batch.
ONE = WindowPlan(warmup_batches=0, windows=1, window_batches=1)


def _env(backend: str) -> dict[str, str]:
    return {
        **os.environ,
        "KERAS_BACKEND": backend,
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }


def _run(code: str, backend: str, timeout: int) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=_env(backend),
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def fit_model(small_schema):
    from tfinput import models

    # Without XLA (it compiles for seconds): the steps are checked, not the model's jit;
    # and every steps_per_execution below retraces the train function, which an XLA
    # compile of each would make seconds longer without changing what the steps do. One
    # model for the module: each test checks what its own step did to it.
    return models.ranking_model(small_schema, jit_compile=False)


def test_keras_step_on_the_tensorflow_backend(small_tfrecord, small_schema, fit_model):
    step = steps.keras_step(fit_model)
    assert step.kind == "keras" and step.name.endswith("(tensorflow)")
    ds = tfinput.tfrecord(small_tfrecord, small_schema).build(tfinput.PipelineConfig(batch_size=50))
    losses = [float(np.asarray(step(b)).reshape(-1)[0]) for b in ds.take(3)]
    assert all(np.isfinite(losses))
    # The TensorFlow backend feeds tensors as they are: no device prefetch to set up.
    assert step.prepare(tfinput.PipelineConfig(device_prefetch=2)) is step
    assert not step.feeds_device and step.describe()["backend"] == "tensorflow"


def test_keras_step_refuses_a_non_model():
    with pytest.raises(ConfigError, match="compiled Keras model"):
        steps.keras_step(object())


def test_keras_backend_is_read_without_importing_keras(tmp_path, monkeypatch):
    assert steps.keras_backend() == "tensorflow"  # Keras is imported: it says
    monkeypatch.delitem(sys.modules, "keras")  # as if not imported yet (restored after)
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert steps.keras_backend() == "jax"
    monkeypatch.delenv("KERAS_BACKEND")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert steps.keras_backend() == "tensorflow"  # no keras.json
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "torch"}))
    assert steps.keras_backend() == "torch"
    (tmp_path / "keras.json").write_text("not json")
    assert steps.keras_backend() == "tensorflow"


# ------------------------------------------------------------------ keras_fit
@pytest.mark.parametrize("k", [1, 4], ids=["steps_per_execution_1", "steps_per_execution_4"])
def test_keras_fit_step_measures_windows_on_the_tensorflow_backend(
    small_tfrecord, small_schema, fit_model, k
):
    from tuners._objective import measure

    step = steps.keras_fit_step(fit_model)
    assert step.kind == "keras_fit" and step.name.endswith("(tensorflow)")
    assert step.owns_loop and step.backend == "tensorflow"
    config = tfinput.PipelineConfig(batch_size=50, steps_per_execution=k)
    prepared = step.prepare(config)
    assert prepared.describe()["steps_per_execution"] == k
    assert prepared.describe()["backend"] == "tensorflow"
    before = [np.array(w) for w in fit_model.get_weights()]
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    m = measure(
        pipeline, config, step, plan=WindowPlan(windows=2, window_batches=6, warmup_batches=2)
    )
    assert len(m.rates) == 2 and all(r > 0 for r in m.rates)
    assert m.stall is None and m.to_attrs()["stall_fraction"] is None
    assert fit_model.steps_per_execution == k
    after = fit_model.get_weights()
    assert any(not np.allclose(a, b) for a, b in zip(before, after))

    # Windows directly: 6 batches are rounded up to a multiple of k; examples counted.
    ws = prepared.run_windows(
        pipeline.build(config).repeat(),
        plan=WindowPlan(warmup_batches=1, windows=2, window_batches=6),
        batch_size=50,
    )
    batches = 6 if k == 1 else 8
    assert [w.batches for w in ws] == [batches, batches]
    assert [w.examples for w in ws] == [50 * batches] * 2
    assert all(w.wait_seconds is None and w.seconds > 0 for w in ws)


def test_keras_fit_step_stops_when_report_says_so(small_tfrecord, small_schema, fit_model):
    from tuners._objective import measure

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
        plan=WindowPlan(windows=4, window_batches=2, warmup_batches=1),
        report=report,
    )
    assert seen == [0] and len(m.rates) == 1 and m.stopped_early


def test_step_bound_on_one_cached_batch(small_tfrecord, small_schema, fit_model):
    """The tuner's step bound: one batch cached and repeated, fed to model.fit."""
    from tuners._objective import measure

    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    config = tfinput.PipelineConfig(batch_size=50, steps_per_execution=2)
    m = measure(
        lambda cfg: pipeline.build(cfg).take(1).cache().repeat(),
        config,
        steps.keras_fit_step(fit_model),
        plan=WindowPlan(windows=2, window_batches=4, warmup_batches=1),
    )
    assert len(m.rates) == 2 and all(r > 0 for r in m.rates)
    # The same source with a per-batch step (the cached batch is served forever).
    m2 = measure(
        lambda cfg: pipeline.build(cfg).take(1).cache().repeat(),
        config,
        steps.input_only(),
        plan=WindowPlan(windows=3, window_batches=10, warmup_batches=2),
    )
    assert len(m2.rates) == 3 and m2.stall is not None


def test_keras_fit_step_needs_a_dataset_and_a_model(fit_model):
    with pytest.raises(ConfigError, match="compiled Keras model"):
        steps.keras_fit_step(object())
    step = steps.keras_fit_step(fit_model)
    with pytest.raises(ConfigError, match=r"tf\.data\.Dataset"):
        step.run_windows([1, 2, 3], plan=ONE, batch_size=1)


def test_keras_fit_step_needs_countable_batches(small_tfrecord, small_schema, fit_model):
    """Without drop_remainder the batch dimension is unknown: say how to fix it."""
    config = tfinput.PipelineConfig(batch_size=50, drop_remainder=False)
    ds = tfinput.tfrecord(small_tfrecord, small_schema).build(config)
    step = steps.keras_fit_step(fit_model)
    with pytest.raises(ConfigError, match="drop_remainder=True"):
        step.run_windows(ds, plan=ONE, batch_size=None)


# --------------------------------------------------- other backends (children)
# train_on_batch on a few batches, in a child process whose backend is BACKEND.
_KERAS_STEP = """
import numpy as np, keras, tfinput
from tfinput import models, steps
assert keras.config.backend() == BACKEND
schema = tfinput.testing.small_schema()
ds = tfinput.tfrecord(FILES, schema).build(tfinput.PipelineConfig(batch_size=50))
model = models.ranking_model(schema)
assert model.jit_compile == (BACKEND == "jax")  # "auto": XLA on JAX, not on a CPU-only TF
step = steps.keras_step(model)
losses = [float(np.asarray(step(b)).reshape(-1)[0]) for b in ds.take(3)]
assert all(np.isfinite(losses)), losses
print("NAME", step.name)
"""

# Then, on JAX: both Keras steps measured with each feeding knob (on the model above: its
# train step is compiled once), and `tfinput tune` with both ranking steps, all in the
# same child (one Python + TensorFlow + JAX start). The tunes skip the format advice: it
# measures input only (tf.Example against columnar records, no step, nothing of JAX) and
# took a third of this test's time.
_JAX_MORE = """
from tfinput import cli
from tfinput._src.measurement.windows import WindowPlan
from tuners._objective import measure
pipeline = tfinput.tfrecord(FILES, schema)
before = [np.array(w) for w in model.get_weights()]
for step in (steps.keras_step(model), steps.keras_fit_step(model)):
    for extra in ({"device_prefetch": 2}, {"steps_per_execution": 2}):
        config = tfinput.PipelineConfig(batch_size=50, **extra)
        m = measure(pipeline, config, step, plan=WindowPlan(windows=2, window_batches=2, warmup_batches=1))
        assert len(m.rates) == 2 and min(m.rates) > 0, m
        print("RESULT", step.kind, step.prepare(config).describe()["backend"], m.stall)
after = model.get_weights()
assert any(not np.allclose(a, np.asarray(b)) for a, b in zip(before, after))
for kind, trials, out in TUNES:
    code = cli.main([
        "tune", *FILES, "--schema", SCHEMA, "--step", kind, "--n-trials", trials,
        "--batch-size", "50", "--windows", "2", "--window-batches", "2",
        "--warmup-batches", "1", "--confirm-top", "1", "--confirm-windows", "1",
        "--out", out, "--json", "--no-format-advice",
    ])
    print("TUNE", kind, code)
"""


def _script(code: str, files: list[str], backend: str, **names: str) -> str:
    code = code.replace("FILES", repr(list(files))).replace("BACKEND", repr(backend))
    for name, value in names.items():
        code = code.replace(name, value)
    return code


@pytest.mark.slow
def test_keras_steps_and_tune_on_the_jax_backend(small_tfrecord, small_schema, tmp_path):
    """Under KERAS_BACKEND=jax, in one child process: ``keras_step`` trains batch by
    batch; ``keras`` and ``keras_fit`` are measured with device prefetch and
    steps_per_execution and train the model; ``tfinput tune --step ranking`` and
    ``--step ranking_fit`` complete trials and confirmation and write their result (every
    ranking trial used to fail with a TypeError); the backend is in the step description
    and the fingerprint."""
    pytest.importorskip("jax")
    schema = tmp_path / "schema.json"
    small_schema.to_json(schema)
    tunes = [
        ("ranking", "3", str(tmp_path / "ranking")),
        ("ranking_fit", "2", str(tmp_path / "fit")),
    ]
    code = _script(
        _KERAS_STEP + _JAX_MORE, small_tfrecord, "jax", TUNES=repr(tunes), SCHEMA=repr(str(schema))
    )
    out = _run(code, "jax", timeout=900)

    assert "NAME keras" in out.stdout and "(jax)" in out.stdout
    lines = [line.split() for line in out.stdout.splitlines() if line.startswith("RESULT")]
    assert [line[1:3] for line in lines] == [["keras", "jax"]] * 2 + [["keras_fit", "jax"]] * 2
    assert [line[3] for line in lines[2:]] == ["None", "None"]  # model.fit hides input waits
    assert all(float(line[3]) >= 0 for line in lines[:2])

    assert "TUNE ranking 0" in out.stdout and "TUNE ranking_fit 0" in out.stdout, out.stderr[-3000:]
    ranking = json.loads((tmp_path / "ranking" / "result.json").read_text())
    assert ranking["trials"]["complete"] >= 1, ranking["trials"]
    assert "(jax)" in json.dumps(ranking)
    fit = json.loads((tmp_path / "fit" / "result.json").read_text())
    assert fit["trials"]["complete"] >= 1, fit["trials"]
    assert fit["fingerprint"]["keras_backend"] == "jax"
    assert "keras fit ranking_model (jax)" in json.dumps(fit)


def test_keras_step_on_the_torch_backend(small_tfrecord):
    pytest.importorskip("torch")
    out = _run(_script(_KERAS_STEP, small_tfrecord, "torch"), "torch", timeout=300)
    assert "(torch)" in out.stdout
