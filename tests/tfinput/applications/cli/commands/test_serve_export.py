"""``tfinput export``: a saved ``.keras`` model becomes a SavedModel whose signatures
give the trained model's predictions from serialized tf.Examples."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import SEQUENTIAL, run_cli
from tfinput import serving


@pytest.fixture(scope="module")
def trained(small_schema, small_tfrecord):
    from tfinput.models import ranking_model

    pipe = tfinput.tfrecord(small_tfrecord, small_schema)
    config = tfinput.PipelineConfig(batch_size=100, shuffle_buffer=0, **SEQUENTIAL)
    ds = pipe.build(config)
    m = ranking_model(small_schema, jit_compile=False, bottom=(8,), top=(8,), cross_layers=1)
    m.fit(ds.take(2), verbose=0)
    features, _ = next(iter(ds))
    return m, pipe, features


def _serialized(files) -> tf.Tensor:
    return next(iter(tf.data.TFRecordDataset(files[:1]).batch(100)))


def test_export_writes_a_savedmodel_from_a_keras_file(tmp_path, capsys, trained, small_tfrecord):
    model, pipe, features = trained
    model.save(tmp_path / "model.keras")
    pipe.schema.to_json(str(tmp_path / "schema.json"))
    out = tmp_path / "served"
    code, stdout, stderr = run_cli(
        capsys, "export", out, "--model", tmp_path / "model.keras", "--schema",
        tmp_path / "schema.json", "--json",
    )  # fmt: skip
    assert code == 0, stderr
    assert json.loads(stdout)["signatures"].keys() == serving.SIGNATURES.keys()
    loaded = tf.saved_model.load(str(out))
    got = loaded.signatures["serving_default"](examples=_serialized(small_tfrecord))
    want = model(features, training=False).numpy()
    np.testing.assert_allclose(got["predictions"].numpy(), want, rtol=1e-6, atol=1e-6)

    code, _, stderr = run_cli(
        capsys, "export", out, "--model", tmp_path / "model.keras", "--schema",
        tmp_path / "schema.json",
    )  # fmt: skip
    assert code == 2 and "already holds a SavedModel" in stderr


def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, small_schema):
    small_schema.to_json(str(tmp_path / "schema.json"))
    code, _, stderr = run_cli(
        capsys, "export", tmp_path / "out", "--model", tmp_path / "none.keras", "--schema",
        tmp_path / "schema.json",
    )  # fmt: skip
    assert code == 2 and "--model" in stderr and "no such file" in stderr
    (tmp_path / "bad.keras").write_text("not a model")
    code, _, stderr = run_cli(
        capsys, "export", tmp_path / "out", "--model", tmp_path / "bad.keras", "--schema",
        tmp_path / "schema.json",
    )  # fmt: skip
    assert code == 2 and "cannot load --model" in stderr
