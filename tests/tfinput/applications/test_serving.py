"""Serving: the same raw rows through the training pipeline and through the exported
SavedModel (reloaded from disk) give identical model inputs and predictions; bad
requests fail clearly or take the documented default."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import SEQUENTIAL
from tfinput import serving
from tfinput._src.applications.serving import ASSETS_DIR
from tfinput.errors import ConfigError, SchemaError

ROWS = 100


def _config(**kw):
    return tfinput.PipelineConfig(batch_size=ROWS, shuffle_buffer=0, **SEQUENTIAL, **kw)


def _serialized(files) -> tf.Tensor:
    """The first ROWS records of the first file: the rows of the pipeline's first batch."""
    return next(iter(tf.data.TFRecordDataset(files[:1]).batch(ROWS)))


def _raw(columns, schema) -> dict[str, np.ndarray]:
    """The first ROWS rows of the generated columns as raw-signature tensors."""
    out = {}
    for f in schema.features:
        values = columns.values[f.source]
        if isinstance(f, tfinput.MultiHot):
            lengths = columns.lengths[f.source][:ROWS].astype(np.int64)
            n = int(lengths.sum())
            out[f.source] = values[:n]
            out[f.source + serving.ROW_LENGTHS_SUFFIX] = lengths
            if f.weights:
                out[f.weights] = columns.values[f.weights][:n].astype(np.float32)
        else:
            out[f.source] = values[:ROWS]
    return out


def _flat(features) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in serving.flatten_features(features).items()}


def _assert_same(got, want) -> None:
    got, want = _flat(got), _flat(want)
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.fixture(scope="module")
def trained(small_schema, small_tfrecord):
    """A small ranking model trained two steps, and the first batch of the pipeline."""
    from tfinput.models import ranking_model

    pipe = tfinput.tfrecord(small_tfrecord, small_schema)
    ds = pipe.build(_config())
    m = ranking_model(small_schema, jit_compile=False, bottom=(8,), top=(8,), cross_layers=1)
    m.fit(ds.take(2), verbose=0)
    features, _ = next(iter(ds))
    return m, pipe, features


@pytest.mark.parametrize("layout", ["per_feature", "packed"])
def test_examples_and_raw_inputs_equal_the_training_batch(
    small_schema, small_tfrecord, small_columns, layout
):
    pipe = tfinput.tfrecord(small_tfrecord, small_schema).with_layout(layout)
    want, _ = next(iter(pipe.build(_config())))
    from_examples = serving.serving_fn(pipe)(_serialized(small_tfrecord))
    _assert_same(from_examples, want)
    from_raw = serving.serving_fn(pipe, inputs="raw")(_raw(small_columns, small_schema))
    _assert_same(from_raw, want)


def test_exported_savedmodel_reloaded_gives_the_training_inputs_and_predictions(
    tmp_path, trained, small_tfrecord, small_columns, small_schema
):
    model, pipe, features = trained
    want = model(features, training=False).numpy()
    summary = serving.export(tmp_path / "export", pipe, model)
    assert set(summary["signatures"]) == set(serving.SIGNATURES)

    loaded = tf.saved_model.load(str(tmp_path / "export"))
    assert set(loaded.signatures) == set(serving.SIGNATURES)
    examples = _serialized(small_tfrecord)
    got = loaded.signatures["serving_default"](examples=examples)["predictions"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    raw = {k: tf.constant(v) for k, v in _raw(small_columns, small_schema).items()}
    got_raw = loaded.signatures["serve_raw"](**raw)["predictions"].numpy()
    np.testing.assert_allclose(got_raw, want, rtol=1e-6, atol=1e-6)
    inputs = loaded.signatures["transform"](examples=examples)
    _assert_same(inputs, features)

    meta = json.loads((tmp_path / "export" / ASSETS_DIR / "tfinput_serving.json").read_text())
    assert meta["layout"] == "per_feature" and meta["multi_hot_format"] == "dense"
    schema = tfinput.Schema.from_json(str(tmp_path / "export" / ASSETS_DIR / "tfinput_schema.json"))
    assert schema == small_schema


def _example(**features) -> bytes:
    def feature(v):
        if isinstance(v, list) and v and isinstance(v[0], bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
        if isinstance(v, list) and v and isinstance(v[0], float):
            return tf.train.Feature(float_list=tf.train.FloatList(value=v))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=v))

    return tf.train.Example(
        features=tf.train.Features(feature={k: feature(v) for k, v in features.items()})
    ).SerializeToString()


GOOD = dict(
    row_id=[1],
    price=[2.0],
    embedding=[0.1, 0.2, 0.3],
    user_id=[7],
    country=[b"fr"],
    last_item=[3],
    history=[1, 2],
    history_w=[0.5, 1.0],
    tags=[b"a"],
)


def test_a_missing_feature_takes_the_schema_default(small_schema):
    fn = serving.serving_fn(small_schema)
    partial = {k: v for k, v in GOOD.items() if k not in ("embedding", "history", "history_w")}
    got = _flat(fn(tf.constant([_example(**partial), _example(**GOOD)])))
    np.testing.assert_allclose(got["dense/embedding"][0], [0.5, 0.5, 0.5])  # default=0.5
    np.testing.assert_array_equal(got["weights/history"][0], np.zeros(5))  # empty list
    np.testing.assert_allclose(got["dense/embedding"][1], [0.1, 0.2, 0.3])
    np.testing.assert_allclose(got["weights/history"][1], [0.5, 1.0, 0, 0, 0])


def test_a_value_of_the_wrong_type_names_the_key(small_schema):
    fn = serving.serving_fn(small_schema)
    bad = _example(**{**GOOD, "user_id": [b"seven"]})
    with pytest.raises(tf.errors.InvalidArgumentError, match="user_id"):
        fn(tf.constant([bad]))


def test_an_out_of_range_id_fails_like_training(small_schema):
    fn = serving.serving_fn(small_schema)
    bad = _example(**{**GOOD, "user_id": [10**6]})
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"tfinput DataError.*user_id"):
        fn(tf.constant([bad]))
    raw_fn = serving.serving_fn(small_schema, inputs="raw")
    raw = _raw_one(GOOD, small_schema, user_id=10**6)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"tfinput DataError.*user_id"):
        raw_fn(raw)


def _raw_one(row, schema, **override):
    row = {**row, **{k: [v] for k, v in override.items()}}
    out = {}
    for f in schema.features:
        v = row[f.source]
        if isinstance(f, tfinput.MultiHot):
            out[f.source] = np.asarray(v)
            out[f.source + serving.ROW_LENGTHS_SUFFIX] = np.asarray([len(v)], np.int64)
            if f.weights:
                out[f.weights] = np.asarray(row[f.weights], np.float32)
        elif isinstance(f, tfinput.Dense) and f.length:
            out[f.source] = np.asarray([v], np.float32)
        else:
            out[f.source] = np.asarray(v)
    specs = serving.raw_signature(schema)  # the signature's dtypes, exactly
    return {k: tf.constant(v, dtype=specs[k].dtype) for k, v in out.items()}


def test_a_raw_request_missing_a_column_is_refused_by_name(small_schema):
    fn = serving.serving_fn(small_schema, inputs="raw")
    raw = _raw_one(GOOD, small_schema)
    del raw["user_id"]
    with pytest.raises((TypeError, ValueError), match="user_id"):
        fn(raw)


def test_bad_arguments_are_config_errors(small_schema, tmp_path):
    with pytest.raises(ConfigError, match="inputs"):
        serving.serving_fn(small_schema, inputs="json")
    with pytest.raises(ConfigError, match="packed"):
        serving.serving_fn(small_schema, layout="packed", multi_hot_format="ragged")
    with pytest.raises(ConfigError, match=r"Pipeline or tfinput\.Schema"):
        serving.serving_fn({"features": []})
    # a look-alike of a pipeline (its schema and formats, not a tfinput.Pipeline)
    look_alike = dataclasses.make_dataclass("LookAlike", ["schema", "multi_hot_format", "layout"])(
        small_schema, "dense", "per_feature"
    )
    with pytest.raises(ConfigError, match=r"Pipeline or tfinput\.Schema, got LookAlike"):
        serving.serving_fn(look_alike)
    with pytest.raises(ConfigError, match="Keras model"):
        serving.export(tmp_path / "x", small_schema, lambda f: f)


def test_a_schema_other_than_the_training_one_is_refused_naming_feature_and_field(
    trained, small_schema, tmp_path
):
    """A re-inferred schema with a smaller table folds served ids onto others: export
    and serving_fn refuse it, naming the feature and the field, before writing."""
    model, _, _ = trained
    tables = tuple(
        dataclasses.replace(t, vocabulary_size=5) if t.name == "user" else t
        for t in small_schema.tables
    )
    features = tuple(
        dataclasses.replace(f, log1p=False) if f.name == "price" else f
        for f in small_schema.features
        if f.name != "row_id"
    )
    other = small_schema.replace(tables=tables, features=features)
    expected = (
        "serving: the schema given is not the one the model was trained with (the model "
        "records it): feature 'row_id' is missing (the model was trained with it); feature "
        "'price' log1p: trained True, given False; feature 'user_id' table vocabulary_size: "
        "trained 500, given 5. Serve through the training schema"
    )
    with pytest.raises(SchemaError) as e:
        serving.export(tmp_path / "served", other, model)
    assert str(e.value).startswith(expected)
    assert not (tmp_path / "served").exists()
    with pytest.raises(SchemaError) as e:
        serving.serving_fn(other, model)
    assert str(e.value).startswith(expected)
    # Labels are not served: a schema without them is the same for serving.
    serving.serving_fn(small_schema.replace(labels=()), model)
