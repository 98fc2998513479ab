"""The built-in models' JAX train step (`_row_step`): it reads and writes each table only
at the batch's rows (nothing else in the step makes an array of a table's shape, and
XLA copies no table), learns what Keras's own JAX step learns, and keeps ``fit``
(``steps_per_execution``), ``evaluate``, ``predict`` and saving working; an optimizer it
cannot apply row-wise gets Keras's step, with a warning. Run in a child process on the
JAX backend (this one is TensorFlow's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfinput._src.measurement.models._row_step import dense_step_reason

ROOT = Path(__file__).resolve().parents[4]

_CHILD = r"""
import json, re, sys, tempfile, warnings
import jax, jax.numpy as jnp, keras, numpy as np
from tests.tfinput.measurement.models.conftest import (
    built_in, every_feature_kind, kinds_batches, towers,
)
from tfinput import models
from tfinput._src.measurement.models._row_step import dense_step_reason

assert keras.config.backend() == "jax"
ROWS = 97  # no other weight has a table's shape
schema = every_feature_kind(ROWS)
TABLES = {(ROWS, 8), (ROWS, 1)}  # the tables and their row accumulators
CALLS = ("jaxpr", "call_jaxpr", "fun_jaxpr", "body_jaxpr", "cond_jaxpr")


def first(logs):
    return float(np.ravel(logs)[0])  # the loss, with or without metrics


def keras_step(model):
    # The reference: Keras's own JAX step (a table-shaped gradient, every row written).
    model.train_step = lambda *a: keras.Model.train_step(model, *a)
    return model


def state_and_data(model, data):
    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in model.optimizer.variables],
        [v.value for v in model.metrics_variables],
    )
    return state, jax.tree_util.tree_map(jnp.asarray, data)


def table_writes(model, data):
    # The primitives whose output has a table's shape, sub-jaxprs opened.
    found = set()

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            inner = [eqn.params[k] for k in CALLS if k in eqn.params]
            inner += eqn.params.get("branches", ())
            for sub in inner:  # a call (jit, custom derivative, control flow): its body
                walk(getattr(sub, "jaxpr", sub))
            if inner:
                continue
            for v in eqn.outvars:
                if tuple(getattr(v.aval, "shape", ())) in TABLES:
                    found.add(eqn.primitive.name)

    walk(jax.make_jaxpr(model.train_step)(*state_and_data(model, data)).jaxpr)
    return sorted(found)


def table_copies(model, data):
    hlo = jax.jit(model.train_step, donate_argnums=0).lower(*state_and_data(model, data))
    text = hlo.compile().as_text()
    shapes = "|".join(f"{r},{c}" for r, c in TABLES)
    return re.findall(rf"= f32\[(?:{shapes})\]\S* copy\(", text)


out = {}
for which in ("ranking", "two_tower"):
    batches = kinds_batches(schema, ROWS, 5, size=32)
    if which == "two_tower":
        batches = [(towers(x), y) for x, y in batches]

    def make(reference=False, **kwargs):
        keras.utils.set_random_seed(0)
        model = built_in(which, schema, jit_compile=True, **kwargs)
        return keras_step(model) if reference else model

    model, ref = make(), make(reference=True)
    r = out[which] = {"reason": dense_step_reason(model)}
    r["writes"] = table_writes(model, batches[0])
    r["reference_writes"] = table_writes(ref, batches[0])
    r["copies"] = table_copies(model, batches[0])
    r["losses"] = [first(model.train_on_batch(x, y)) for x, y in batches]
    r["reference_losses"] = [first(ref.train_on_batch(x, y)) for x, y in batches]
    r["differ"] = [
        a.path
        for a, b in zip(model.weights + model.optimizer.variables, ref.weights + ref.optimizer.variables)
        if not np.allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)
    ]
    x = jax.tree_util.tree_map(lambda *v: np.concatenate(v), *[b[0] for b in batches[:4]])
    y = np.concatenate([b[1] for b in batches[:4]])
    spe = make(steps_per_execution=2)
    r["fit"] = spe.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0).history["loss"]
    r["evaluate"] = first(spe.evaluate(x, y, batch_size=32, verbose=0))
    before = spe.predict(x, batch_size=32, verbose=0)
    path = tempfile.mkdtemp() + "/m.keras"
    spe.save(path)
    loaded = keras.saving.load_model(path)
    r["loaded_difference"] = float(np.max(np.abs(loaded.predict(x, batch_size=32, verbose=0) - before)))
    r["loaded_trains"] = first(loaded.train_on_batch(*batches[4]))

    clipped = make()
    clipped.compile(
        optimizer=models.SparseTableAdam(1e-3, clipnorm=1.0),
        loss=clipped.loss, jit_compile=True,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clipped.train_on_batch(*batches[0])
    r["clipped_reason"] = dense_step_reason(clipped)
    r["clipped_warnings"] = [str(w.message) for w in caught if "embedding row" in str(w.message)]
    r["clipped_writes"] = table_writes(clipped, batches[0])
print("RESULT", json.dumps(out))
"""


@pytest.fixture(scope="module")
def jax_run():
    """The child's findings for the ranking and the two-tower model."""
    pytest.importorskip("jax", reason="the JAX backend needs jax")
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


MODELS = ["ranking", "two_tower"]


@pytest.mark.parametrize("which", MODELS)
def test_the_jax_step_writes_tables_only_by_scattering_the_batchs_rows(jax_run, which):
    """Every feature kind (single ids, weighted and unweighted lists, a table read by
    four features and by both towers): in the step, only scatter-adds make arrays of a
    table's shape, and XLA updates them in place (no table is copied); Keras's own step
    makes them with dense arithmetic (a table-sized gradient, every row updated)."""
    r = jax_run[which]
    assert r["reason"] is None
    assert r["writes"] == ["scatter-add"], r["writes"]
    assert r["copies"] == []
    assert {"add", "mul"} & set(r["reference_writes"]), r["reference_writes"]


@pytest.mark.parametrize("which", MODELS)
def test_the_jax_step_learns_what_keras_step_learns(jax_run, which):
    """Five steps on seeded data: the same losses, weights and accumulators as Keras's
    JAX step (a row met k times takes the sum of its slices in both)."""
    r = jax_run[which]
    assert r["losses"] == pytest.approx(r["reference_losses"], rel=1e-5)
    assert r["differ"] == []


@pytest.mark.parametrize("which", MODELS)
def test_fit_evaluate_predict_and_saving_work_with_the_jax_step(jax_run, which):
    r = jax_run[which]
    assert len(r["fit"]) == 2 and all(0 < x < 100 for x in r["fit"] + [r["evaluate"]])
    assert r["loaded_difference"] < 1e-6
    assert 0 < r["loaded_trains"] < 100


@pytest.mark.parametrize("which", MODELS)
def test_an_optimizer_that_clips_gets_kerass_step_and_a_warning(jax_run, which):
    r = jax_run[which]
    assert r["clipped_reason"] == "its optimizer clips gradients (clipnorm)"
    assert len(r["clipped_warnings"]) == 1, r["clipped_warnings"]
    assert "because its optimizer clips gradients (clipnorm)" in r["clipped_warnings"][0]
    assert set(r["clipped_writes"]) - {"scatter-add"}, "a dense update"


def test_why_a_step_would_be_dense():
    """`dense_step_reason` names the optimizer's class, or the setting, that rules the
    row step out (on any backend: TensorFlow's step is Keras's anyway)."""
    import keras

    from tests.tfinput.measurement.models.conftest import built_in, every_feature_kind
    from tfinput import models

    model = built_in("ranking", every_feature_kind(20))
    assert dense_step_reason(model) is None
    for opt, reason in [
        (keras.optimizers.Adam(), "its optimizer is Adam, not SparseTableAdam"),
        (
            models.SparseTableAdam(global_clipnorm=1.0),
            "its optimizer clips gradients (global_clipnorm)",
        ),
        (
            models.SparseTableAdam(use_ema=True),
            "its optimizer keeps a moving average of the weights (use_ema)",
        ),
        (
            models.SparseTableAdam(gradient_accumulation_steps=2),
            "its optimizer accumulates gradients",
        ),
    ]:
        model.compile(optimizer=opt, loss=model.loss)
        assert dense_step_reason(model) == reason
    model.compile(optimizer=models.SparseTableAdam(), loss=model.loss)
    model.tables["s"].embeddings.trainable = False
    assert dense_step_reason(model) == "table 's' is frozen, constrained or not updated row-wise"
