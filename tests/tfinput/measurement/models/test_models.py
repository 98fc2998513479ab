"""`tfinput.models`: `PaddedEmbeddingBag`, `signed_log1p` and the Keras 3 ranking model,
which trains under XLA on per-feature and packed batches (TensorFlow and JAX backends)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.tfinput.measurement.models.conftest import (
    built_in,
    every_feature_kind,
    kinds_batches,
    towers,
)
from tfinput import models, testing
from tfinput.config import PipelineConfig


def test_ranking_model_compiles_with_xla_where_it_pays():
    """``jit_compile="auto"``: TensorFlow here sees only CPUs, where an XLA compile of
    each input signature costs more than a short run gains (the JAX backend: in
    tests/tfinput/measurement/steps/test_keras.py's children)."""
    schema = testing.small_schema(row_id=False)
    assert not [d for d in tf.config.list_physical_devices() if d.device_type != "CPU"]
    assert models.ranking_model(schema).jit_compile is False
    assert models.ranking_model(schema, jit_compile=True).jit_compile is True


def test_ranking_model_trains_with_jit_compile(small_tfrecord):
    schema = testing.small_schema(row_id=False)
    ds = tfinput.tfrecord(small_tfrecord, schema).build(PipelineConfig(batch_size=100))
    model = models.ranking_model(schema, jit_compile=True)
    assert model.jit_compile
    features, labels = next(iter(ds))
    model.train_on_batch(features, labels)  # builds the variables
    before = [w.numpy().copy() for w in model.trainable_weights]
    losses = [float(model.train_on_batch(f, y)[0]) for f, y in ds.repeat(3)]
    assert len(losses) == 30 and all(np.isfinite(losses))
    changed = [
        not np.array_equal(a, w.numpy())
        for a, w in zip(before, model.trainable_weights, strict=True)
    ]
    assert all(changed), "every weight, every embedding table included, was trained"


def test_ranking_model_fits_with_the_tuned_steps_per_execution(small_tfrecord):
    """Also proves that ``Model.fit`` takes the pipeline's dataset as it is."""
    schema = testing.small_schema(row_id=False)
    ds = tfinput.tfrecord(small_tfrecord, schema).build(PipelineConfig(batch_size=100))
    model = models.ranking_model(schema, steps_per_execution=5)
    assert model.steps_per_execution == 5
    history = model.fit(ds, epochs=1, verbose=0)  # 10 batches: two calls of 5 steps
    assert np.isfinite(history.history["loss"][-1])


def test_ranking_model_traces_its_first_train_step_once(small_tfrecord):
    """The model and its optimizer come built: TensorFlow traces the step once, where a
    step that made the optimizer's variables would be traced again."""
    schema = testing.small_schema(row_id=False)
    ds = tfinput.tfrecord(small_tfrecord, schema).build(PipelineConfig(batch_size=100))
    model = models.ranking_model(schema, bottom=(8,), top=(8,), cross_layers=1)
    assert model.built and model.optimizer.built
    traced = []
    train_step = model.train_step
    model.train_step = lambda *data: traced.append(1) or train_step(*data)
    model.fit(ds.take(3), epochs=1, verbose=0)
    if keras.config.backend() == "tensorflow":
        assert len(traced) == 1, f"the train step was traced {len(traced)} times"
    model.fit(ds.take(2), epochs=1, verbose=0)
    assert len(traced) <= 1, "a second fit traced the step again"


def test_forward_pass_compiles_with_xla_and_static_shapes(small_tfrecord):
    schema = testing.small_schema(row_id=False)
    ds = tfinput.tfrecord(small_tfrecord, schema).build(PipelineConfig(batch_size=100))
    model = models.RankingModel(schema)
    features, _ = next(iter(ds))

    @tf.function(jit_compile=True, input_signature=[ds.element_spec[0]])
    def forward(f):
        return model(f)

    logits = forward(features)
    assert logits.shape == (100,)
    hlo = forward.experimental_get_compiler_ir(features)(stage="hlo")
    assert "gather" in hlo.lower()


def test_embedding_bag_combiners_and_empty_rows():
    layer = models.PaddedEmbeddingBag(10, 2, "mean")
    layer.build(None) if not layer.built else None
    table = layer.embeddings.numpy()
    ids = np.array([[1, 2, 0], [0, 0, 0]], np.int32)
    w = np.array([[1.0, 3.0, 0.0], [0.0, 0.0, 0.0]], np.float32)
    out = layer(ids, w).numpy()
    np.testing.assert_allclose(out[0], (table[1] + 3 * table[2]) / 4, rtol=1e-6)
    np.testing.assert_allclose(out[1], 0.0)
    for combiner, norm in (("sum", 1.0), ("sqrtn", np.sqrt(10.0))):
        layer2 = models.PaddedEmbeddingBag(10, 2, combiner)
        t2 = layer2.embeddings.numpy()
        np.testing.assert_allclose(layer2(ids, w).numpy()[0], (t2[1] + 3 * t2[2]) / norm, rtol=1e-5)


def _raw_magnitudes(tmp_path, n=512):
    """Parquet with unscaled dense columns: ids near 1e19 stored as floats, hour stamps
    near 1.4e7, signed values of 1e9, plus one categorical and a label."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    path = tmp_path / "raw.parquet"
    table = pa.table(
        {
            "big_id": pa.array(rng.uniform(1e18, 1e19, n), pa.float32()),
            "hour": pa.array(rng.integers(14_000_000, 14_010_000, n), pa.int64()),
            "delta": pa.array(rng.normal(0, 1e9, n), pa.float32()),
            "cat": pa.array(rng.integers(0, 10, n), pa.int64()),
            "label": pa.array(rng.integers(0, 2, n), pa.int64()),
        }
    )
    pq.write_table(table, path)
    return str(path)


def test_ranking_model_loss_stays_finite_on_raw_dense_magnitudes(tmp_path):
    from tfinput.schema import Categorical, Dense, Label, Schema, Table

    schema = Schema(
        features=(
            Dense(name="big_id"),
            Dense(name="hour", dtype="int64"),
            Dense(name="delta"),
            Categorical(name="cat", table="cat"),
        ),
        tables=(Table(name="cat", vocabulary_size=10, dim=4),),
        labels=(Label(name="label", dtype="int64"),),
    )
    ds = tfinput.parquet(_raw_magnitudes(tmp_path), schema).build(PipelineConfig(batch_size=64))
    model = models.ranking_model(schema, jit_compile=True)
    losses = [float(model.train_on_batch(f, y)[0]) for f, y in ds.repeat(2)]
    assert len(losses) == 16 and all(np.isfinite(losses)), losses


def test_signed_log1p_is_finite_and_odd():
    x = np.array([-3.4e38, -1e19, -1.0, 0.0, 1.0, 1e19, 3.4e38], np.float32)
    y = np.asarray(models.signed_log1p(tf.constant(x)))
    assert np.isfinite(y).all() and y[3] == 0.0
    np.testing.assert_allclose(y, -y[::-1], rtol=1e-6)
    np.testing.assert_allclose(y[4], np.log1p(1.0), rtol=1e-6)


def test_ranking_model_takes_packed_batches_with_jit_compile(small_tfrecord):
    """The same model gives the same logits on both layouts, and trains on packed
    batches with ``train_on_batch`` and ``fit`` under XLA."""
    schema = testing.small_schema(row_id=False)
    pipeline = tfinput.tfrecord(small_tfrecord, schema)
    config = PipelineConfig(batch_size=100, deterministic=True)
    packed = pipeline.with_layout("packed").build(config)
    model = models.ranking_model(schema, jit_compile=True)
    features, _ = next(iter(packed))
    per_feature, _ = next(iter(pipeline.build(config)))
    np.testing.assert_allclose(
        model.predict_on_batch(features), model.predict_on_batch(per_feature), rtol=1e-6
    )
    before = [w.numpy().copy() for w in model.trainable_weights]
    losses = [float(model.train_on_batch(f, y)[0]) for f, y in packed]
    history = model.fit(
        packed.repeat(), steps_per_epoch=5, epochs=2, shuffle=False, verbose=0
    ).history
    assert len(losses) == 10 and all(np.isfinite(losses + history["loss"]))
    assert all(
        not np.array_equal(a, w.numpy())
        for a, w in zip(before, model.trainable_weights, strict=True)
    )


_JAX_PACKED = """
import numpy as np, keras, tensorflow as tf, tfinput
from tfinput import models
assert keras.config.backend() == "jax"
schema = tfinput.testing.small_schema(row_id=False)
pipeline = tfinput.tfrecord(FILES, schema)
config = tfinput.PipelineConfig(batch_size=100, deterministic=True)
numpy = lambda b: tf.nest.map_structure(lambda t: t.numpy(), b)
packed = [numpy(b) for b in pipeline.with_layout("packed").build(config)]
per_feature = [numpy(b) for b in pipeline.build(config)]
model = models.ranking_model(schema, jit_compile=True)
np.testing.assert_allclose(
    model.predict_on_batch(packed[0][0]), model.predict_on_batch(per_feature[0][0]), rtol=1e-5
)
losses = [float(model.train_on_batch(f, y)[0]) for f, y in packed]
x = {k: np.concatenate([f[k] for f, _ in packed]) for k in packed[0][0]}
y = np.concatenate([lab for _, lab in packed])
history = model.fit(x, y, batch_size=100, epochs=2, verbose=0).history
assert all(np.isfinite(losses + history["loss"])), (losses, history)
print("OK", len(losses), len(history["loss"]))
"""


@pytest.mark.slow
def test_ranking_model_takes_packed_numpy_batches_on_the_jax_backend(small_tfrecord):
    pytest.importorskip("jax")
    code = _JAX_PACKED.replace("FILES", repr(list(small_tfrecord)))
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "OK 10 2" in out.stdout


def test_embedding_bag_single_ids_unweighted_lists_and_serialization():
    layer = models.PaddedEmbeddingBag(10, 3, "sum", name="bag")
    table = layer.embeddings.numpy()
    assert table.shape == (10, 3)
    np.testing.assert_allclose(layer(np.array([4, 0], np.int32)).numpy(), table[[4, 0]])
    lists = layer(np.array([[1, 2], [5, 5]], np.int32)).numpy()  # no weights: all 1
    np.testing.assert_allclose(lists, [table[1] + table[2], 2 * table[5]], rtol=1e-6)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is models.PaddedEmbeddingBag
    assert (restored.vocabulary_size, restored.dim, restored.combiner) == (10, 3, "sum")


def test_ranking_model_shares_tables_and_sizes_its_cross_layers(small_tfrecord):
    schema = testing.small_schema(row_id=False)
    ds = tfinput.tfrecord(small_tfrecord, schema).build(PipelineConfig(batch_size=8))
    model = models.ranking_model(schema, learning_rate=0.01, jit_compile=False, cross_layers=3)
    features, _ = next(iter(ds))
    assert model(features).shape == (8,)
    assert model.name == "ranking_model"
    assert float(model.optimizer.learning_rate) == pytest.approx(0.01)
    # history and last_item share "items", country and tags share "tokens"
    assert {n: t.embeddings.shape for n, t in model.tables.items()} == {
        "items": (1000, 8),
        "user": (500, 8),
        "tokens": (2048, 4),
    }
    # bottom MLP 32 + user 8 + country 4 + last_item 8 + history 8 + tags 4
    assert [layer.kernel.shape for layer in model.cross_dense] == [(64, 64)] * 3
    assert model.cross_projections == [], "64 wide: no wider than twice the projection"


def _wide_schema():
    from tfinput.schema import Categorical, Dense, Label, Schema, Table

    return Schema(
        features=(
            Dense(name="d"),
            Categorical(name="a", table="t"),
            Categorical(name="b", table="t"),
        ),
        tables=(Table(name="t", vocabulary_size=50, dim=64),),
        labels=(Label(name="label"),),
    )


def test_wide_ranking_models_cross_through_a_low_rank_projection(tmp_path):
    """Wider than twice ``cross_projection_dim``: each cross layer is ``U·V`` (V down to
    the projection, U back up), trains under XLA, saves and loads; None keeps W
    full-rank, and so does a config without the argument (files saved before it)."""
    schema = _wide_schema()  # bottom MLP 32 + a 64 + b 64 = 160 wide
    rng = np.random.default_rng(0)
    batches = [
        (
            {
                "dense": {"d": rng.random(16, dtype=np.float32)},
                "ids": {n: rng.integers(0, 50, 16) for n in ("a", "b")},
            },
            rng.integers(0, 2, 16).astype(np.float32),
        )
        for _ in range(3)
    ]
    model = models.ranking_model(schema, jit_compile=True)
    model.train_on_batch(*batches[0])
    assert [layer.kernel.shape for layer in model.cross_projections] == [(160, 64)] * 2
    assert [layer.kernel.shape for layer in model.cross_dense] == [(64, 160)] * 2
    before = [w.numpy().copy() for w in model.trainable_weights]
    losses = [float(model.train_on_batch(x, y)[0]) for x, y in batches]
    assert all(np.isfinite(losses)), losses
    assert all(
        not np.array_equal(a, w.numpy())
        for a, w in zip(before, model.trainable_weights, strict=True)
    ), "every weight, the projections included, was trained"
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert loaded.get_config()["cross_projection_dim"] == 64
    x = batches[0][0]
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-6)

    full = models.ranking_model(schema, jit_compile=False, cross_projection_dim=None)
    full(x)
    assert [layer.kernel.shape for layer in full.cross_dense] == [(160, 160)] * 2
    assert full.cross_projections == []
    config = full.get_config()
    del config["cross_projection_dim"]
    older = models.RankingModel.from_config(config)
    older(x)
    assert [layer.kernel.shape for layer in older.cross_dense] == [(160, 160)] * 2
    assert older.cross_projections == []


def test_ranking_model_saves_and_loads_as_a_keras_file(tmp_path, small_tfrecord):
    """``model.save("m.keras")`` + ``keras.saving.load_model`` give the same model (the
    schema and architecture travel in its config; ``tfinput export`` loads such files)."""
    schema = testing.small_schema()
    ds = tfinput.tfrecord(small_tfrecord, schema).build(PipelineConfig(batch_size=64))
    model = models.ranking_model(schema, jit_compile=False, bottom=(8,), top=(8,))
    model.fit(ds.take(2), verbose=0)
    features, _ = next(iter(ds))
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert isinstance(loaded, models.RankingModel) and loaded.schema == schema
    assert loaded.get_config()["bottom"] == [8] and loaded.get_config()["top"] == [8]
    np.testing.assert_array_equal(loaded(features).numpy(), model(features).numpy())


MILLION = 1_000_000


def _ops_that_ran(logdir) -> dict[str, str]:
    """Operation name -> type of every TensorFlow op in a profile (xprof's
    ``framework_op_stats``, its table found by column ids)."""
    import json

    from xprof.convert import raw_to_tool_data

    paths = [str(p) for p in logdir.rglob("*.xplane.pb")]
    data, _ = raw_to_tool_data.xspace_to_tool_data(paths, "framework_op_stats", {})
    for table in json.loads(data):
        cols = [c["id"] for c in table["cols"]]
        if {"type", "operation"} <= set(cols):
            rows = [dict(zip(cols, [c and c.get("v") for c in r["c"]])) for r in table["rows"]]
            return {r["operation"]: r["type"] for r in rows}
    raise AssertionError(f"framework_op_stats has no table of ops: {data[:300]}")


@pytest.mark.parametrize("which", ["ranking", "two_tower"])
def test_built_in_models_read_only_the_batchs_rows_on_tensorflow(which, tmp_path):
    """Tables of 1M rows, every feature kind (single ids, multi-hot lists with and
    without weights, a table shared by four features, across both towers): a profiled
    ``train_on_batch`` runs no ReadVariableOp as large as a table (each op is found in
    the traced step, which gives its shape), the lookups are ``ResourceGather`` on the
    variables, and no op of the step makes a table-sized tensor (no dense gradient)."""
    pytest.importorskip("xprof")
    schema = every_feature_kind(MILLION)
    model = built_in(which, schema)
    batches = kinds_batches(schema, MILLION, 3)
    if which == "two_tower":
        batches = [(towers(x), y) for x, y in batches]
    batches = [tf.nest.map_structure(tf.constant, b) for b in batches]
    for x, y in batches[:2]:
        model.train_on_batch(x, y)  # traced
    tf.profiler.experimental.start(str(tmp_path))
    for x, y in batches:
        model.train_on_batch(x, y)
    tf.profiler.experimental.stop()
    ran = _ops_that_ran(tmp_path)

    graph = tf.function(model.train_step).get_concrete_function(batches[0]).graph
    shapes = {op.name: [o.shape for o in op.outputs] for op in graph.get_operations()}
    reads = sorted(n for n, t in ran.items() if t == "ReadVariableOp")
    assert reads and set(reads) <= set(shapes), sorted(set(reads) - set(shapes))
    table_sized = [n for n in reads if any(s.rank and s[0] == MILLION for s in shapes[n])]
    assert table_sized == []
    dense = [n for n, ss in shapes.items() if any(s.rank and s[0] == MILLION for s in ss)]
    assert dense == [], "no op makes a tensor as large as a table"
    gathers = [n for n, t in ran.items() if t == "ResourceGather"]
    for table in ("s", "t", "u"):
        assert [n for n in gathers if re.search(rf"/emb_{table}(_\d+)?/", n)], (table, gathers)
    assert not [n for n, t in ran.items() if t == "GatherV2" and "/emb_" in n]


def _dense_read(model):
    """``model`` with its tables read as they were before the sparse read: a gather on a
    read of the whole table (``keras.ops.take`` of the variable), kept here as the
    reference."""
    for bag in model.tables.values():
        bag._gather = lambda ids, bag=bag: keras.ops.take(bag.embeddings, ids, axis=0)
    return model


def _trained_on_small_data(files, read, steps=5):
    """A small ranking model (seeded) after ``steps`` steps, its tables read by ``read``,
    and its losses."""
    schema = testing.small_schema(row_id=False)
    batches = tfinput.tfrecord(files, schema).build(
        PipelineConfig(batch_size=50, deterministic=True)
    )
    keras.utils.set_random_seed(0)
    model = models.ranking_model(schema, bottom=(8,), top=(8,), cross_layers=1, learning_rate=0.05)
    read(model)
    return model, [float(model.train_on_batch(x, y)[0]) for x, y in batches.take(steps)]


def test_sparse_reads_learn_what_the_dense_read_learnt(small_tfrecord):
    """Seeded data (a table shared by three features, weighted and unweighted lists):
    the same losses, weights and accumulators as the whole-table read."""
    model, losses = _trained_on_small_data(small_tfrecord, lambda m: m)
    old, old_losses = _trained_on_small_data(small_tfrecord, _dense_read)
    np.testing.assert_allclose(losses, old_losses, rtol=1e-6)
    for a, b in zip(
        model.weights + model.optimizer.variables,
        old.weights + old.optimizer.variables,
        strict=True,
    ):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)


def test_serving_fn_exports_the_scores_of_the_dense_read(small_tfrecord):
    """A trained model exported through `tfinput.serving.serving_fn` scores requests as
    the whole-table read scores the same features."""
    from tfinput import serving

    model, _ = _trained_on_small_data(small_tfrecord, lambda m: m, steps=2)
    pipe = tfinput.tfrecord(small_tfrecord, model.schema)
    examples = next(iter(tf.data.TFRecordDataset(small_tfrecord[:1]).batch(50)))
    scores = serving.serving_fn(pipe, model)(examples)["predictions"].numpy()
    want = _dense_read(model)(serving.serving_fn(pipe)(examples)).numpy()
    np.testing.assert_allclose(scores, want, rtol=1e-6, atol=1e-6)


def test_under_mixed_precision_the_bag_casts_the_rows_it_reads_not_the_table():
    layer = models.PaddedEmbeddingBag(100_000, 4, "sum", dtype="mixed_float16")
    ids = tf.constant([[1, 7, 0], [99_999, 3, 3]])
    weights = tf.constant([[1.0, 1.0, 0.0], [1.0, 0.5, 0.5]], tf.float16)
    out = layer(ids, weights)
    table = layer.embeddings.numpy()
    assert out.dtype == tf.float16 and layer.embeddings.dtype == "float32"
    want = [table[1] + table[7], table[99_999] + table[3]]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-2, atol=1e-3)
    graph = tf.function(layer).get_concrete_function(ids, weights).graph
    sizes = [o.shape for op in graph.get_operations() for o in op.outputs if o.shape.rank]
    assert not [s for s in sizes if s[0] == 100_000], "nothing as large as the table"
