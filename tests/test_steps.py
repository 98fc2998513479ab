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
