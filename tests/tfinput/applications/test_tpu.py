"""TPU embedding glue: configs from the schema, placement, and batches accepted by
`TPUEmbeddingForServing` (the CPU implementation of the TPU embedding API)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import SEQUENTIAL
from tfinput import tpu
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError
from tfinput.schema import Categorical, Schema, Table


def test_configs_share_tables_and_pin_output_shape(small_schema):
    tables, features = tpu.embedding_configs(small_schema, per_replica_batch_size=64)
    assert set(tables) == {"items", "user", "tokens"}
    assert features["history"].table is features["last_item"].table is tables["items"]
    assert features["country"].table is features["tags"].table is tables["tokens"]
    for f in features.values():
        assert list(f.output_shape) == [64] and f.max_sequence_length == 0
    assert tables["tokens"].combiner == "sqrtn" and tables["items"].dim == 8
    assert tables["user"].vocabulary_size == 500


def test_bad_batch_size():
    schema = Schema(
        features=(Categorical(name="c", table="t"),),
        tables=(Table(name="t", vocabulary_size=3, dim=2),),
    )
    with pytest.raises(ConfigError, match="per_replica_batch_size"):
        tpu.embedding_configs(schema, per_replica_batch_size=0)


def test_placement_by_size():
    schema = Schema(
        features=tuple(Categorical(name=n, table=n) for n in ("s", "m", "l")),
        tables=(
            Table(name="s", vocabulary_size=5_000, dim=8),
            Table(name="m", vocabulary_size=50_000, dim=8),
            Table(name="l", vocabulary_size=5_000_000, dim=32),
        ),
    )
    got = {p.table: p for p in tpu.placement(schema)}
    assert got["s"].decision == "mirror" and got["l"].decision == "shard"
    assert got["m"].decision == "shard" and "either" in got["m"].reason
    assert got["l"].bytes == 5_000_000 * 32 * 4


@pytest.mark.parametrize("fmt", ["sparse", "ragged"])
def test_batches_are_accepted_by_tpu_embedding_for_serving(small_tfrecord, small_schema, fmt):
    batch = 50
    _, features_cfg = tpu.embedding_configs(small_schema, per_replica_batch_size=batch)
    embedding = tf.tpu.experimental.embedding.TPUEmbeddingForServing(
        features_cfg, tf.tpu.experimental.embedding.SGD(0.1)
    )
    embedding.build()
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema).with_multi_hot_format(fmt)
    features, _ = next(iter(pipeline.build(PipelineConfig(batch_size=batch))))
    out = embedding(features["ids"], weights=tpu.enqueue_weights(small_schema, features))
    for name, cfg in features_cfg.items():
        assert out[name].shape == (batch, cfg.table.dim), name
    # The combined multi-hot activation equals a manual weighted mean over real ids.
    dense_features, _ = next(
        iter(tfinput.tfrecord(small_tfrecord, small_schema).build(PipelineConfig(batch_size=batch)))
    )
    table = embedding.embedding_tables[features_cfg["history"].table].numpy()
    ids = dense_features["ids"]["history"].numpy()
    w = dense_features["weights"]["history"].numpy()
    rows = (table[ids] * w[..., None]).sum(1) / np.maximum(w.sum(1, keepdims=True), 1e-12)
    np.testing.assert_allclose(out["history"].numpy(), rows, rtol=1e-5, atol=1e-6)


def test_enqueue_weights_refuses_the_dense_multi_hot_format(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    features, _ = next(iter(pipeline.build(PipelineConfig(batch_size=8))))
    with pytest.raises(ConfigError) as e:
        tpu.enqueue_weights(small_schema, features)
    msg = str(e.value)
    assert "'history'" in msg and 'with_multi_hot_format("sparse")' in msg and "ragged" in msg


def test_placement_maps_to_keras_rs_placement():
    schema = Schema(
        features=tuple(Categorical(name=n, table=n) for n in ("s", "l")),
        tables=(
            Table(name="s", vocabulary_size=50, dim=4),
            Table(name="l", vocabulary_size=10**6, dim=4),
        ),
    )
    got = {p.table: p for p in tpu.placement(schema)}
    assert got["s"].keras_rs_placement == "default_device"
    assert got["l"].keras_rs_placement == "sparsecore"
    assert got["s"].__dict__["keras_rs_placement"] == "default_device"  # in the CLI's JSON
    assert tpu.KERAS_RS_PLACEMENT == {"mirror": "default_device", "shard": "sparsecore"}


# --- keras-rs (Keras 3 DistributedEmbedding) ------------------------------------------

_NO_KERAS_RS = "keras-rs is not installed (optional extra tfinput[keras-rs], Python >= 3.11)"


def _keras_rs():
    return pytest.importorskip("keras_rs", reason=_NO_KERAS_RS)


class _Limits:
    """What the SparseCore statistics pass hands over: an object with table_limits()."""

    def table_limits(self):
        return {"items": (np.int64(40), 12), "tokens": (64, 64)}


def test_keras_rs_configs_shapes_sharing_combiners_optimizers_limits(small_schema, small_tfrecord):
    keras_rs = _keras_rs()
    import keras

    sgd = keras.optimizers.SGD(learning_rate=0.5)
    tables, features = tpu.keras_rs_configs(
        small_schema,
        per_replica_batch_size=4,
        replicas=3,
        optimizer={"items": sgd, "tokens": "adagrad"},
        limits=_Limits(),
    )
    assert set(tables) == {"items", "user", "tokens"}
    assert all(isinstance(t, keras_rs.layers.TableConfig) for t in tables.values())
    assert features["history"].table is features["last_item"].table is tables["items"]
    assert features["country"].table is features["tags"].table is tables["tokens"]
    assert tables["tokens"].combiner == "sqrtn" and tables["items"].combiner == "mean"
    assert (tables["user"].vocabulary_size, tables["user"].embedding_dim) == (500, 8)
    assert tables["items"].optimizer is sgd and tables["tokens"].optimizer == "adagrad"
    assert tables["user"].optimizer == "adam"  # keras-rs's default for tables left out
    assert (
        tables["items"].max_ids_per_partition,
        tables["items"].max_unique_ids_per_partition,
    ) == (
        40,
        12,
    )
    assert type(tables["items"].max_ids_per_partition) is int
    assert tables["tokens"].max_unique_ids_per_partition == 64
    assert tables["user"].max_ids_per_partition == 256  # keras-rs's default
    assert {t.placement for t in tables.values()} == {"auto"}
    # Shapes use the global batch (4 per replica x 3) and match what the pipeline emits.
    ds = tfinput.tfrecord(small_tfrecord, small_schema).build(PipelineConfig(batch_size=12))
    batch, _ = next(iter(ds))
    assert set(features) == set(batch["ids"])
    for name, cfg in features.items():
        assert tuple(cfg.input_shape) == tuple(batch["ids"][name].shape), name
        assert tuple(cfg.output_shape) == (12, cfg.table.embedding_dim), name
    assert tuple(features["history"].input_shape) == (12, 5)
    assert tuple(features["user_id"].input_shape) == (12,)


def test_keras_rs_configs_placement_advice_and_dict(small_schema):
    _keras_rs()
    tables, _ = tpu.keras_rs_configs(small_schema, per_replica_batch_size=8, placement="advice")
    assert {n: t.placement for n, t in tables.items()} == dict.fromkeys(
        ("items", "user", "tokens"), "default_device"
    )  # all three are small: mirrored
    tables, _ = tpu.keras_rs_configs(
        small_schema, per_replica_batch_size=8, placement={"items": "sparsecore"}
    )
    assert tables["items"].placement == "sparsecore" and tables["user"].placement == "auto"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(per_replica_batch_size=0), "per_replica_batch_size: expected a positive int"),
        (dict(per_replica_batch_size=8.0), "per_replica_batch_size"),
        (dict(per_replica_batch_size=8, replicas=0), "replicas: expected a positive int"),
        (
            dict(per_replica_batch_size=8, optimizer={"nope": "sgd"}),
            r"optimizer: unknown table\(s\) \['nope'\]",
        ),
        (
            dict(per_replica_batch_size=8, optimizer="rmsprop"),
            "optimizer for table 'items'.*'ftrl'",
        ),
        (dict(per_replica_batch_size=8, placement="tpu"), "placement for table 'items'.*'advice'"),
        (
            dict(per_replica_batch_size=8, placement={"nope": "auto"}),
            r"placement: unknown table\(s\)",
        ),
        (
            dict(per_replica_batch_size=8, limits={"nope": (8, 8)}),
            r"limits: unknown table\(s\) \['nope'\]",
        ),
        (
            dict(per_replica_batch_size=8, limits={"items": (8, 16)}),
            "limits for table 'items'.*unique <= ids",
        ),
        (dict(per_replica_batch_size=8, limits={"items": 8}), "limits for table 'items'"),
        (dict(per_replica_batch_size=8, limits=[("items", 8)]), "table_limits"),
    ],
    ids=[
        "zero-batch",
        "float-batch",
        "zero-replicas",
        "optimizer-unknown-table",
        "optimizer-unsupported",
        "placement-bad",
        "placement-unknown-table",
        "limits-unknown-table",
        "limits-unique-above-ids",
        "limits-not-a-pair",
        "limits-bad-type",
    ],
)
def test_keras_rs_configs_bad_arguments(small_schema, kwargs, match):
    _keras_rs()
    with pytest.raises(ConfigError, match=match):
        tpu.keras_rs_configs(small_schema, **kwargs)


def test_keras_rs_configs_without_the_extra_says_what_to_install():
    # No keras-rs needed: the child process hides it (as on Python 3.10).
    code = (
        "import sys\n"
        "sys.modules['keras_rs'] = None\n"
        "from tfinput import testing, tpu\n"
        "from tfinput.errors import ConfigError\n"
        "try:\n"
        "    tpu.keras_rs_configs(testing.small_schema(), per_replica_batch_size=8)\n"
        "except ConfigError as e:\n"
        "    print('ConfigError:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "pip install 'tfinput[keras-rs]'" in out.stdout
    assert "Python >= 3.11" in out.stdout


def test_keras_rs_configs_round_trip_through_get_config(small_schema):
    keras_rs = _keras_rs()
    import keras

    layers = keras_rs.layers
    tables, features = tpu.keras_rs_configs(
        small_schema,
        per_replica_batch_size=8,
        optimizer={"items": keras.optimizers.SGD(learning_rate=0.5)},
        initializer="zeros",
        placement={"user": "default_device"},
        limits={"tokens": (100, 30)},
    )
    for t in tables.values():
        assert layers.TableConfig.from_config(t.get_config()).get_config() == t.get_config()
    for f in features.values():
        assert layers.FeatureConfig.from_config(f.get_config()).get_config() == f.get_config()
    restored = layers.TableConfig.from_config(tables["items"].get_config())
    assert isinstance(restored.optimizer, keras.optimizers.SGD)
    assert restored.optimizer.get_config()["learning_rate"] == pytest.approx(0.5)

    layer = layers.DistributedEmbedding(features)
    config = layer.get_config()
    assert len(config["tables"]) == 3  # shared tables serialized once
    # keras-rs 0.4's from_config rewrites the nested dicts it is given: pass a copy.
    again = layers.DistributedEmbedding.from_config(copy.deepcopy(config))
    assert again.get_config() == config
    saved = keras.saving.serialize_keras_object(layer)
    restored_layer = keras.saving.deserialize_keras_object(saved)
    assert restored_layer.get_config() == config
    # Shared tables stay shared: 3 tables, and features of one table see the same rows.
    ids = {n: np.zeros(s.input_shape, np.int32) for n, s in features.items()}
    out = restored_layer(ids)
    assert set(restored_layer.get_embedding_tables()) == {"items", "user", "tokens"}
    np.testing.assert_array_equal(np.asarray(out["last_item"]), np.asarray(out["history"]))
    assert {n: tuple(o.shape) for n, o in out.items()} == {
        n: tuple(f.output_shape) for n, f in features.items()
    }


def _keras_rs_model(features_cfg):
    """Ids (and weights) -> DistributedEmbedding -> one logit: the smallest ranking model."""
    import keras
    import keras_rs

    class Model(keras.Model):
        def __init__(self):
            super().__init__()
            self.embedding = keras_rs.layers.DistributedEmbedding(features_cfg)
            self.head = keras.layers.Dense(1)

        def call(self, features):
            ids = features["ids"]
            weights = {name: features["weights"].get(name) for name in ids}
            out = self.embedding(ids, weights)
            x = keras.ops.concatenate([out[n] for n in sorted(out)], axis=-1)
            return self.head(x)[:, 0]

    return Model()


#: Which multi-hot formats DistributedEmbedding (keras-rs 0.4, default_device placement)
#: trains on, per backend and jit_compile, as measured. Asserted exactly: a keras-rs or
#: Keras change that alters it fails here, and docs/tpu.md must follow.
TF_FORMAT_MATRIX = {
    ("dense", False): "ok",
    ("sparse", False): "ok",
    ("ragged", False): "ok",
    ("dense", True): "ok",
    ("sparse", True): "InvalidArgumentError",  # SparseReshape has no XLA kernel
    ("ragged", True): "InvalidArgumentError",  # RaggedRange has no XLA kernel
}


def test_keras_rs_model_trains_on_tensorflow_and_the_format_matrix(small_schema, small_tfrecord):
    _keras_rs()
    import keras

    batch = 16
    _, features_cfg = tpu.keras_rs_configs(
        small_schema, per_replica_batch_size=batch, optimizer="sgd"
    )
    model = _keras_rs_model(features_cfg)
    dense = tfinput.tfrecord(small_tfrecord, small_schema).build(PipelineConfig(batch_size=batch))
    model(next(iter(dense))[0])  # build
    measured, batches = {}, {}
    for fmt in ("dense", "sparse", "ragged"):
        pipeline = tfinput.tfrecord(small_tfrecord, small_schema).with_multi_hot_format(fmt)
        ds = pipeline.build(PipelineConfig(batch_size=batch, **SEQUENTIAL)).take(2)
        for jit in (False, True):
            model.compile(
                optimizer=keras.optimizers.Adam(0.05),
                loss=keras.losses.BinaryCrossentropy(from_logits=True),
                jit_compile=jit,
            )
            before = {n: np.array(t) for n, t in model.embedding.get_embedding_tables().items()}
            try:
                history = model.fit(ds, epochs=1, shuffle=False, verbose=0).history
            except tf.errors.InvalidArgumentError as e:
                assert "XLA" in str(e), str(e)[:2000]
                measured[fmt, jit] = "InvalidArgumentError"
                continue
            measured[fmt, jit] = "ok"
            assert np.all(np.isfinite(history["loss"])), (fmt, jit, history)
            after = model.embedding.get_embedding_tables()
            assert all(not np.allclose(before[n], np.array(after[n])) for n in before), (fmt, jit)
        batches[fmt] = next(iter(ds))[0]
    assert measured == TF_FORMAT_MATRIX
    predictions = {fmt: np.asarray(model(features)) for fmt, features in batches.items()}
    # The three formats of the same rows give the same outputs (weighted combiners agree).
    np.testing.assert_allclose(predictions["sparse"], predictions["dense"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(predictions["ragged"], predictions["dense"], rtol=1e-5, atol=1e-6)


_JAX_KERAS_RS = """
import json
import numpy as np
import keras
import tfinput
from tfinput import testing, tpu
from tfinput.config import PipelineConfig

assert keras.backend.backend() == "jax"
schema = testing.small_schema()
files = FILES
batch = 16
_, features_cfg = tpu.keras_rs_configs(schema, per_replica_batch_size=batch)
model = MODEL(features_cfg)
data = {
    fmt: tfinput.tfrecord(files, schema)
    .with_multi_hot_format(fmt)
    .build(PipelineConfig(batch_size=batch, **SEQUENTIAL))
    .take(2)
    for fmt in ("dense", "sparse", "ragged")
}
model(next(data["dense"].as_numpy_iterator())[0])  # build on numpy
matrix = {}
for fmt, ds in data.items():
    for feed in ("dataset", "numpy"):
        for jit in (True, False):
            if feed == "numpy" and not jit:
                continue
            model.compile(
                optimizer=keras.optimizers.Adam(0.05),
                loss=keras.losses.BinaryCrossentropy(from_logits=True),
                jit_compile=jit,
            )
            before = {n: np.array(t) for n, t in model.embedding.get_embedding_tables().items()}
            # Keras takes a generator, not the _NumpyIterator object itself (ValueError).
            x = ds if feed == "dataset" else (b for b in ds.as_numpy_iterator())
            try:
                loss = model.fit(x, epochs=1, steps_per_epoch=2, shuffle=False, verbose=0)
            except Exception as e:
                matrix[f"{fmt}/{feed}/jit={jit}"] = type(e).__name__
                continue
            loss = loss.history["loss"]
            after = model.embedding.get_embedding_tables()
            changed = all(not np.allclose(before[n], np.array(after[n])) for n in before)
            ok = bool(np.all(np.isfinite(loss))) and changed
            matrix[f"{fmt}/{feed}/jit={jit}"] = "ok" if ok else f"bad: {loss} {changed}"
# The same rows in every format give the same outputs (fed as Keras feeds a dataset).
preds = {fmt: model.predict(ds.take(1), verbose=0) for fmt, ds in data.items()}
same = {
    fmt: bool(np.allclose(preds[fmt], preds["dense"], rtol=1e-5, atol=1e-6)) for fmt in preds
}
print("RESULT", json.dumps({"matrix": matrix, "same": same}))
"""

#: The JAX backend (keras-rs 0.4 without jax-tpu-embedding: the default_device path), as
#: measured. ``dataset``: ``model.fit(tf.data.Dataset)``, where Keras converts each batch
#: (SparseTensor -> jax BCOO, RaggedTensor -> dense padded to the batch's longest row);
#: ``numpy``: ``fit`` on a generator over ``ds.as_numpy_iterator()`` (Keras refuses the
#: iterator object itself), whose ragged batches are object arrays Keras cannot take.
JAX_FORMAT_MATRIX = {
    "dense/dataset/jit=True": "ok",
    "dense/dataset/jit=False": "ok",
    "dense/numpy/jit=True": "ok",
    "sparse/dataset/jit=True": "ok",
    "sparse/dataset/jit=False": "ok",
    "sparse/numpy/jit=True": "ok",
    "ragged/dataset/jit=True": "ok",
    "ragged/dataset/jit=False": "ok",
    "ragged/numpy/jit=True": "ValueError",
}


@pytest.mark.slow
def test_keras_rs_model_trains_on_jax_and_the_format_matrix(small_tfrecord):
    _keras_rs()
    pytest.importorskip("jax")
    import inspect
    import textwrap

    model_src = textwrap.dedent(inspect.getsource(_keras_rs_model))
    code = model_src + _JAX_KERAS_RS.replace(
        "FILES", repr([str(f) for f in small_tfrecord])
    ).replace("MODEL", "_keras_rs_model").replace("**SEQUENTIAL", "**" + repr(SEQUENTIAL))
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    assert result["matrix"] == JAX_FORMAT_MATRIX
    assert result["same"] == {"dense": True, "sparse": True, "ragged": True}
