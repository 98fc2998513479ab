"""`tfinput.retrieval` and the two-tower inputs: ``Pipeline.with_towers`` batches
(keys, static shapes, the same values as per-feature batches), the candidate corpus,
the two-tower model trained on real files (TensorFlow in-process, JAX in a child
process), recall@k, and the tuner measuring the model as its step."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import SEQUENTIAL, collect, wrapped_dataset
from tfinput import retrieval, testing
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError

QUERY = ("user_id", "country", "history", "embedding")
CANDIDATE = ("last_item", "tags", "price")


@pytest.fixture(scope="module")
def schema(small_schema):
    """The shared schema with towers; ``row_id`` stays unmarked (not emitted)."""
    return small_schema.with_towers(query=QUERY, candidate=CANDIDATE, candidate_id="last_item")


@pytest.fixture(params=["tfrecord", "parquet"])
def files(request, small_tfrecord, small_parquet):
    return request.param, small_tfrecord if request.param == "tfrecord" else small_parquet


def _pipeline(kind: str, paths, schema):
    return tfinput.tfrecord(paths, schema) if kind == "tfrecord" else tfinput.parquet(paths, schema)


def test_tower_batches_split_the_per_feature_batches(files, schema):
    kind, paths = files
    config = PipelineConfig(batch_size=64, **SEQUENTIAL)
    towers = _pipeline(kind, paths, schema).with_towers().build(config)
    features, _ = towers.element_spec
    assert set(features) == {"query", "candidate"}
    for side, names in (("query", QUERY), ("candidate", CANDIDATE)):
        assert set(features[side]) == {"dense", "ids", "weights"}
        emitted = {n for group in features[side].values() for n in group}
        assert emitted == set(names), side
    for spec in tf.nest.flatten(towers.element_spec):
        assert spec.shape.is_fully_defined() and spec.shape[0] == 64, spec
    assert features["candidate"]["weights"]["tags"].shape == (64, 4)
    assert features["query"]["dense"]["embedding"].shape == (64, 3)

    plain = collect(_pipeline(kind, paths, schema).build(config))
    got = {"query": {}, "candidate": {}}
    label_parts = []
    for batch, y in towers:
        label_parts.append(y.numpy())
        for side in got:
            for group, values in batch[side].items():
                for name, t in values.items():
                    got[side].setdefault((group, name), []).append(t.numpy())
    for side, names in (("query", QUERY), ("candidate", CANDIDATE)):
        for (group, name), parts in got[side].items():
            assert name in names
            np.testing.assert_array_equal(np.concatenate(parts), plain[group][name])
    np.testing.assert_array_equal(np.concatenate(label_parts), plain["labels"]["label"])
    assert len(label_parts) == 1000 // 64  # drop_remainder: fixed shapes


def test_towers_need_both_sides_and_the_per_feature_layout(small_tfrecord, small_schema, schema):
    with pytest.raises(ConfigError, match="no query and no candidate feature"):
        tfinput.tfrecord(small_tfrecord, small_schema).with_towers()
    only_query = small_schema.with_towers(query=["user_id"])
    with pytest.raises(ConfigError, match="marks no candidate feature"):
        tfinput.tfrecord(small_tfrecord, only_query).with_towers()
    pipeline = tfinput.tfrecord(small_tfrecord, schema).with_towers()
    with pytest.raises(ConfigError, match="packed layout is not supported with towers"):
        pipeline.with_layout("packed")
    with pytest.raises(ConfigError, match="packed layout is not supported with towers"):
        pipeline.build(PipelineConfig(batch_size=8, layout="packed"))
    assert pipeline.describe()["towers"] is True
    assert "towers" not in pipeline.with_towers(False).describe()


def test_check_reads_every_feature_of_a_towers_pipeline(small_tfrecord, schema):
    report = tfinput.tfrecord(small_tfrecord, schema).with_towers().check(batch_size=500)
    assert report.ok and report.records == 1000


def test_candidate_corpus_is_unique_with_first_occurrence_features(small_parquet, schema):
    pipeline = tfinput.parquet(small_parquet, schema)
    corpus = retrieval.candidate_corpus(pipeline, batch_size=100)
    features, _ = corpus.element_spec
    assert set(features) == {"dense", "ids", "weights"}
    assert set(features["ids"]) == {"last_item", "tags"} and set(features["dense"]) == {"price"}
    got = collect(corpus.map(lambda f, i: (f, i)))
    corpus_ids = got["ids"]["last_item"]
    np.testing.assert_array_equal(got["labels"]["label"], corpus_ids)  # the second element

    rows = collect(pipeline.build(PipelineConfig.naive(batch_size=1000, drop_remainder=False)))
    all_ids = rows["ids"]["last_item"]
    unique, first = np.unique(all_ids, return_index=True)
    assert len(corpus_ids) == len(unique) < 1000  # the data repeats items
    order = np.sort(first)  # first occurrences, in read order
    np.testing.assert_array_equal(corpus_ids, all_ids[order])
    np.testing.assert_array_equal(got["ids"]["tags"], rows["ids"]["tags"][order])
    np.testing.assert_array_equal(got["weights"]["tags"], rows["weights"]["tags"][order])
    np.testing.assert_allclose(got["dense"]["price"], rows["dense"]["price"][order])

    with pytest.raises(ConfigError, match="more than max_candidates=10 unique"):
        retrieval.candidate_corpus(pipeline, max_candidates=10)
    with pytest.raises(ConfigError, match="names no candidate_id"):
        retrieval.candidate_corpus(pipeline.with_schema(schema.replace(candidate_id=None)))


def test_two_tower_model_trains_and_recall_at_k(small_tfrecord, schema):
    import keras

    keras.utils.set_random_seed(0)
    pipeline = tfinput.tfrecord(small_tfrecord, schema).with_towers()
    ds = pipeline.build(PipelineConfig(batch_size=50, shuffle_buffer=1000, shuffle_seed=0))
    model = retrieval.two_tower_model(schema, embedding_dim=8, jit_compile=False)
    assert model.built and model.optimizer.built  # the first fit traces its step once
    features, _ = next(iter(ds))
    logits = model(features)
    assert tuple(logits.shape) == (50, 50)
    q = model.query_tower(features["query"]).numpy()
    c = model.candidate_tower(features["candidate"]).numpy()
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(logits.numpy(), q @ c.T / 0.05, rtol=1e-4, atol=1e-4)

    history = model.fit(ds.repeat(), steps_per_epoch=20, epochs=3, verbose=0).history["loss"]
    assert all(np.isfinite(history)) and history[-1] < history[0], history

    corpus = retrieval.candidate_corpus(pipeline, batch_size=256)
    size = sum(int(i.shape[0]) for _, i in corpus)
    queries = pipeline.build(PipelineConfig(batch_size=200, drop_remainder=False))
    recall = retrieval.recall_at_k(model, queries, corpus, k=10)
    assert 10 / size < recall <= 1.0  # the training rows: better than chance
    assert retrieval.recall_at_k(model, queries, corpus, k=size) == 1.0
    one = corpus.take(1)
    with pytest.raises(ConfigError, match="queries have a 'last_item' not in the corpus"):
        retrieval.recall_at_k(model, queries, one, k=10)
    with pytest.raises(ConfigError, match="k must be an integer >= 1"):
        retrieval.recall_at_k(model, queries, corpus, k=0)


def test_two_tower_model_round_trips_through_keras_saving(tmp_path, schema):
    import keras

    model = retrieval.two_tower_model(schema, embedding_dim=4, hidden=(), jit_compile=False)
    batch = next(iter(_towers_batches(schema)))
    before = model(batch).numpy()
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert isinstance(loaded, retrieval.TwoTowerModel)
    np.testing.assert_allclose(loaded(batch).numpy(), before, rtol=1e-5)


def _towers_batches(schema):
    cols = testing.generate(schema, 16, seed=3, max_list_len=4)
    config = PipelineConfig(batch_size=16)
    return (
        tfinput.wrap(lambda: wrapped_dataset(cols), schema)
        .with_towers()
        .build(config)
        .map(lambda f, y: f)
    )


def test_model_needs_both_towers(small_schema):
    with pytest.raises(ConfigError, match="marks no query feature"):
        retrieval.two_tower_model(small_schema.with_towers(candidate=["last_item"]))


def test_the_tuner_measures_the_two_tower_model_as_its_step(small_tfrecord, schema, tmp_path):
    from tfinput._src.measurement.target import MeasureOptions
    from tuners._options import ConfirmOptions, SearchOptions, StudyOptions, TuneOptions
    from tuners._study import tune

    model = retrieval.two_tower_model(schema, embedding_dim=4, jit_compile=False)
    result = tune(
        tfinput.tfrecord(small_tfrecord, schema).with_towers(),
        step=tfinput.steps.keras_fit_step(model),
        n_trials=2,
        base=PipelineConfig(batch_size=50),
        options=TuneOptions(
            measurement=MeasureOptions(cpu_count=2, windows=1, window_batches=2, warmup_batches=1),
            search=SearchOptions(seed=0),
            confirmation=ConfirmOptions(
                confirm_top=1, confirm_windows=1, advise_format=False, breakdown=False
            ),
            study=StudyOptions(lock_path=str(tmp_path / "lock")),
        ),
    )
    assert result.best_config.batch_size == 50
    assert result.step["kind"] == "keras_fit"
    assert not result.trials.get("fail"), result.trials  # every trial trained the model
    assert sum(result.trials.values()) == 2
    assert result.confirmed[0].median > 0  # examples/s of the confirmed winner


_JAX = """
import numpy as np, keras, tfinput
from tfinput import retrieval, testing
assert keras.config.backend() == "jax"
schema = testing.small_schema().with_towers(
    query=["user_id", "history"], candidate=["last_item", "tags"], candidate_id="last_item")
paths = testing.write_parquet({tmp!r}, schema, rows=200, files=1)
pipeline = tfinput.parquet(paths, schema).with_towers()
keras.utils.set_random_seed(0)
model = retrieval.two_tower_model(schema, embedding_dim=8)
ds = pipeline.build(tfinput.PipelineConfig(batch_size=40)).repeat()
loss = model.fit(ds, steps_per_epoch=5, epochs=2, verbose=0).history["loss"]
assert all(np.isfinite(loss)), loss
corpus = retrieval.candidate_corpus(pipeline, batch_size=64)
queries = pipeline.build(tfinput.PipelineConfig(batch_size=100, drop_remainder=False))
print("recall", retrieval.recall_at_k(model, queries, corpus, k=5), loss)
"""


def test_two_tower_model_trains_on_jax_under_xla(tmp_path):
    pytest.importorskip("jax", reason="the JAX backend needs jax")
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    out = subprocess.run(
        [sys.executable, "-c", _JAX.format(tmp=str(tmp_path))],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=os.path.dirname(
            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        ),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    recall = float(out.stdout.split("recall ")[1].split()[0])
    assert 0.0 <= recall <= 1.0
