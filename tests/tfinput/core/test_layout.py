"""`tfinput.layout`: packed batches hold the same values as per-feature ones for every
source; `PackedLayout` and its JSON description; `pack`, `unpack` (eager, XLA, jax.jit,
numpy) and the Keras `UnpackFeatures` layer; their errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import SEQUENTIAL
from tfinput import testing
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError
from tfinput.layout import PackedLayout, Slot, is_packed, pack, unpack
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema, Table


@pytest.fixture(params=["tfrecord", "parquet", "columnar", "wrapped"])
def pipeline(request, pipeline_of):
    return pipeline_of(request.param)


def _numpy(batch):
    return tf.nest.map_structure(lambda t: t.numpy(), batch)


def _assert_same_features(got, want, where="", *, ordered=True):
    assert set(got) == set(want) == {"dense", "ids", "weights"}, where
    for group in want:
        order = list if ordered else set  # jax pytrees sort dict keys
        assert order(got[group]) == order(want[group]), (where, group)
        for name, value in want[group].items():
            other = np.asarray(got[group][name])
            msg = f"{where} {group}/{name}"
            assert other.dtype == value.dtype, msg
            assert other.shape == value.shape, msg
            np.testing.assert_array_equal(other, value, err_msg=msg)


# ----------------------------------------------------------- equivalence
@pytest.mark.parametrize("drop", [False, True], ids=["keep-tail", "drop-remainder"])
def test_every_feature_is_identical_in_both_layouts(pipeline, drop):
    config = PipelineConfig(batch_size=96, drop_remainder=drop, **SEQUENTIAL)
    layout = pipeline.packed_layout()
    per_feature = [_numpy(b) for b in pipeline.build(config)]
    packed = [_numpy(b) for b in pipeline.with_layout("packed").build(config)]
    assert len(packed) == len(per_feature) == (1000 // 96 if drop else -(-1000 // 96))
    for i, ((pf, pl), (want, wl)) in enumerate(zip(packed, per_feature, strict=True)):
        assert set(pf) == {"dense", "ids", "weights"}
        assert pf["dense"].dtype == np.float32 and pf["dense"].shape[1] == 5
        assert pf["ids"].dtype == np.int32 and pf["ids"].shape[1] == 12
        assert pf["weights"].dtype == np.float32 and pf["weights"].shape[1] == 9
        _assert_same_features(unpack(pf, layout), want, f"batch {i}")
        np.testing.assert_array_equal(pl, wl)
        assert pl.dtype == wl.dtype


def test_the_data_covers_every_feature_kind(small_schema, small_tfrecord):
    """The equivalence test above is only as good as its data: real ids, weights that
    are not all 1, padding, a dense vector."""
    config = PipelineConfig(batch_size=1000, **SEQUENTIAL)
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema).with_layout("packed")
    features, _ = _numpy(next(iter(pipeline.build(config))))
    views = unpack(features, pipeline.packed_layout())
    assert views["dense"]["embedding"].shape == (1000, 3)
    assert views["dense"]["price"].shape == (1000,)
    assert len(np.unique(views["ids"]["user_id"])) > 10
    history_w = views["weights"]["history"]
    assert (history_w == 0).any() and ((history_w != 0) & (history_w != 1)).any()
    tags_w = views["weights"]["tags"]
    assert set(np.unique(tags_w)) == {0.0, 1.0}
    assert (views["ids"]["tags"] != 0).any()


def test_static_shapes_when_drop_remainder(pipeline):
    spec, label = pipeline.with_layout("packed").build(PipelineConfig(batch_size=64)).element_spec
    assert spec == {
        "dense": tf.TensorSpec([64, 5], tf.float32),
        "ids": tf.TensorSpec([64, 12], tf.int32),
        "weights": tf.TensorSpec([64, 9], tf.float32),
    }
    assert label.shape == (64,)
    spec, _ = (
        pipeline.with_layout("packed")
        .build(PipelineConfig(batch_size=64, drop_remainder=False))
        .element_spec
    )
    assert spec["ids"].shape.as_list() == [None, 12]


def test_a_group_without_columns_is_left_out():
    schema = Schema(
        features=(
            Dense(name="x"),
            Dense(name="v", length=2),
            Categorical(name="c", table="t"),
        ),
        tables=(Table(name="t", vocabulary_size=10, dim=2),),
        labels=(Label(name="y"),),
    )
    ds = tf.data.Dataset.from_tensor_slices(
        {
            "x": np.arange(6, dtype=np.float32),
            "v": np.arange(12, dtype=np.float32).reshape(6, 2),
            "c": np.arange(6, dtype=np.int64),
            "y": np.zeros(6, np.float32),
        }
    )
    pipeline = tfinput.wrap(ds, schema).with_layout("packed")
    features, _ = _numpy(next(iter(pipeline.build(PipelineConfig(batch_size=3, **SEQUENTIAL)))))
    assert set(features) == {"dense", "ids"}
    np.testing.assert_array_equal(features["dense"], [[0, 0, 1], [1, 2, 3], [2, 4, 5]])
    np.testing.assert_array_equal(features["ids"], [[0], [1], [2]])
    views = unpack(features, pipeline.packed_layout())
    assert views["weights"] == {}
    np.testing.assert_array_equal(views["dense"]["x"], [0, 1, 2])
    np.testing.assert_array_equal(views["ids"]["c"], [0, 1, 2])
    assert views["ids"]["c"].shape == (3,)


# ------------------------------------------------------------ the layout
def test_layout_from_schema_widths_and_offsets(small_schema):
    layout = PackedLayout.from_schema(small_schema)
    assert [(s.name, s.offset, s.width, s.scalar) for s in layout.dense] == [
        ("row_id", 0, 1, True),
        ("price", 1, 1, True),
        ("embedding", 2, 3, False),
    ]
    assert [(s.name, s.offset, s.width) for s in layout.ids] == [
        ("user_id", 0, 1),
        ("country", 1, 1),
        ("last_item", 2, 1),
        ("history", 3, 5),
        ("tags", 8, 4),
    ]
    assert [(s.name, s.offset, s.width) for s in layout.weights] == [
        ("history", 0, 5),
        ("tags", 5, 4),
    ]
    assert (layout.n_dense, layout.n_ids, layout.n_weights) == (5, 12, 9)
    criteo = PackedLayout.from_schema(testing.criteo_like_schema())
    assert (criteo.n_dense, criteo.n_ids, criteo.n_weights) == (13, 26 + 4 * 20, 4 * 20)
    assert layout.slot("ids", "tags") == Slot(name="tags", offset=8, width=4)
    with pytest.raises(ConfigError, match="no feature 'nope'"):
        layout.slot("ids", "nope")


def test_layout_json_round_trip(small_schema, tmp_path):
    layout = PackedLayout.from_schema(small_schema)
    data = json.loads(json.dumps(layout.to_dict()))
    assert data["format"] == "tfinput.layout/1"
    assert data["dtypes"] == {"dense": "float32", "ids": "int32", "weights": "float32"}
    assert data["ids"][3] == {"name": "history", "offset": 3, "width": 5, "scalar": False}
    assert PackedLayout.from_dict(data) == layout
    path = tmp_path / "layout.json"
    layout.to_json(str(path))
    assert PackedLayout.from_json(str(path)) == layout
    assert PackedLayout.from_json(layout.to_json()) == layout


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: d.update(format="tfinput.layout/0"), "layout.format: expected"),
        (lambda d: d["ids"][1].update(offset=2), r"ids\[1\].offset: expected 1"),
        (lambda d: d["dense"][0].update(width=0), r"dense\[0\].width: expected an int >= 1"),
        (lambda d: d["dense"][2].update(scalar=True), r"dense\[2\].scalar"),
        (lambda d: d.update(n_ids=13), "layout.n_ids: expected 12"),
        (lambda d: d["weights"][0].pop("width"), r"weights\[0\]: expected an object"),
        (lambda d: d["weights"][0].update(dtype="int8"), r"unknown fields \['dtype'\]"),
    ],
    ids=["format", "gap", "width", "scalar-vector", "n", "missing-field", "extra-field"],
)
def test_bad_layout_descriptions_are_refused(small_schema, change, match):
    data = PackedLayout.from_schema(small_schema).to_dict()
    change(data)
    with pytest.raises(ConfigError, match=match):
        PackedLayout.from_dict(data)


# ------------------------------------------------------------ unpack anywhere
@pytest.fixture(scope="module")
def packed_batch(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    config = PipelineConfig(batch_size=64, **SEQUENTIAL)
    packed, _ = next(iter(pipeline.with_layout("packed").build(config)))
    want, _ = next(iter(pipeline.build(config)))
    return packed, _numpy(want), pipeline.packed_layout()


def test_unpack_numpy_and_eager_tensors(packed_batch):
    packed, want, layout = packed_batch
    _assert_same_features(unpack(packed, layout), want, "eager")
    _assert_same_features(unpack(_numpy(packed), layout), want, "numpy")
    assert unpack(want, layout) is want  # a per-feature batch passes through


def test_unpack_inside_tf_function_with_xla(packed_batch):
    packed, want, layout = packed_batch

    @tf.function(jit_compile=True)
    def views(features):
        return unpack(features, layout)

    _assert_same_features(_numpy(views(packed)), want, "xla")


def test_unpack_inside_jax_jit(packed_batch):
    jax = pytest.importorskip("jax")
    packed, want, layout = packed_batch
    got = jax.jit(lambda f: unpack(f, layout))(_numpy(packed))
    _assert_same_features(jax.tree_util.tree_map(np.asarray, got), want, "jax.jit", ordered=False)


def test_keras_layer_round_trip(packed_batch):
    import keras

    from tfinput.layout import UnpackFeatures

    packed, want, layout = packed_batch
    layer = UnpackFeatures(layout, name="unpack")
    config = layer.get_config()
    assert config["layout"] == layout.to_dict()
    again = UnpackFeatures.from_config(json.loads(json.dumps(config)))
    assert again.layout == layout and again.name == "unpack"
    _assert_same_features(_numpy(again(packed)), want, "keras")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is UnpackFeatures and restored.layout == layout


def test_keras_layer_in_a_functional_model(packed_batch):
    import keras

    from tfinput.layout import UnpackFeatures

    packed, want, layout = packed_batch
    inputs = {
        g: keras.Input(shape=(n,), dtype=d, name=g)
        for (g, n), d in zip(layout.widths().items(), ("float32", "int32", "float32"))
    }
    views = UnpackFeatures(layout)(inputs)
    model = keras.Model(inputs, views["ids"]["history"])
    np.testing.assert_array_equal(model(packed), want["ids"]["history"])


# ------------------------------------------------------------ pack errors
def test_pack_refuses_what_it_cannot_pack(small_schema):
    layout = PackedLayout.from_schema(small_schema)
    ids = {s.name: tf.zeros([2] if s.scalar else [2, s.width], tf.int32) for s in layout.ids}
    good = {
        "dense": {s.name: tf.zeros([2] if s.scalar else [2, s.width]) for s in layout.dense},
        "ids": ids,
        "weights": {s.name: tf.zeros([2, s.width]) for s in layout.weights},
    }
    packed = pack(good, layout)
    assert {k: v.shape.as_list() for k, v in packed.items()} == {
        "dense": [2, 5],
        "ids": [2, 12],
        "weights": [2, 9],
    }
    bad = {**good, "ids": {**ids, "history": tf.sparse.from_dense(ids["history"])}}
    with pytest.raises(ConfigError, match=r"'history'\]: a SparseTensor cannot be packed"):
        pack(bad, layout)
    bad = {**good, "ids": {**ids, "user_id": tf.zeros([2], tf.int64)}}
    with pytest.raises(ConfigError, match=r"'user_id'\]: expected int32 to pack, got int64"):
        pack(bad, layout)
    bad = {**good, "ids": {**ids, "tags": tf.zeros([2, 3], tf.int32)}}
    with pytest.raises(ConfigError, match=r"'tags'\]: expected shape \[B, 4\]"):
        pack(bad, layout)
    bad = {**good, "dense": {}}
    with pytest.raises(ConfigError, match=r"\['dense'\]\['row_id'\]: missing"):
        pack(bad, layout)


def test_unpack_refuses_a_layout_that_does_not_match(small_schema):
    layout = PackedLayout.from_schema(small_schema)
    features = {
        "dense": np.zeros((2, 4), np.float32),
        "ids": np.zeros((2, 12), np.int32),
        "weights": np.zeros((2, 9), np.float32),
    }
    with pytest.raises(ConfigError, match=r"features\['dense'\]: expected 5 columns"):
        unpack(features, layout)
    with pytest.raises(ConfigError, match=r"features\['weights'\]: missing"):
        unpack({"dense": np.zeros((2, 5)), "ids": np.zeros((2, 12))}, layout)


def test_is_packed():
    assert is_packed({"dense": np.zeros((2, 1)), "ids": np.zeros((2, 1))})
    assert not is_packed({"dense": {"x": np.zeros(2)}, "ids": {}, "weights": {}})
    assert not is_packed(np.zeros(2)) and not is_packed({})


def test_unpack_keeps_multi_hot_padding_and_schema_order():
    schema = Schema(
        features=(
            MultiHot(name="a", table="t", max_len=2),
            Categorical(name="b", table="t"),
        ),
        tables=(Table(name="t", vocabulary_size=10, dim=2),),
    )
    layout = PackedLayout.from_schema(schema)
    features = {"ids": np.array([[3, 0, 7]], np.int32), "weights": np.array([[1, 0]], np.float32)}
    views = unpack(features, layout)
    np.testing.assert_array_equal(views["ids"]["a"], [[3, 0]])
    np.testing.assert_array_equal(views["ids"]["b"], [7])
    assert views["dense"] == {} and list(views["ids"]) == ["a", "b"]
