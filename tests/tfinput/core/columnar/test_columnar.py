"""`tfinput.columnar_records` (the package) and the `tfinput.columnar` pipeline factory
beside `tfinput.tfrecord`: its schema (from the manifest, or another compatible one), its
options and the module's names."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

import tfinput
from tfinput import columnar_records
from tfinput.config import PipelineConfig
from tfinput.errors import SchemaError, SourceError


def test_schema_comes_from_the_manifest_and_shapes_are_static(small_schema, small_columnar):
    pipeline = tfinput.columnar(os.path.dirname(small_columnar[0]))
    assert pipeline.schema == small_schema and pipeline.source.kind == "columnar"
    features, labels = pipeline.build(PipelineConfig(batch_size=200)).element_spec
    assert labels.shape == (200,)
    for group in features.values():
        for spec in group.values():
            assert spec.shape.is_fully_defined() and spec.shape[0] == 200
    assert features["ids"]["history"].shape == (200, 5)


def test_factory_passes_its_options_to_the_source(small_columnar):
    pipeline = tfinput.columnar(
        small_columnar[:2], verify=False, shuffle_rows=True, buffer_size=1 << 16
    )
    source = pipeline.source
    assert isinstance(source, columnar_records.ColumnarSource)
    assert (source.verify, source.shuffle_rows, source.buffer_size) == (False, True, 1 << 16)
    assert source.files() == small_columnar[:2]


def test_factory_without_a_manifest_is_a_source_error(tmp_path):
    with pytest.raises(SourceError, match="no columnar manifest"):
        tfinput.columnar(tmp_path)


def test_reading_with_another_compatible_schema(small_columnar, small_schema):
    history = small_schema.feature("history")
    narrow = small_schema.replace(
        features=tuple(
            f if f.name != "history" else type(f)(**{**f.__dict__, "max_len": 2})
            for f in small_schema.features
        )
    )
    assert history.max_len == 5
    features, _ = next(
        iter(tfinput.columnar(small_columnar, narrow).build(PipelineConfig(batch_size=100)))
    )
    assert features["ids"]["history"].shape == (100, 2)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "nope"}, r"feature 'nope': column 'nope' is not stored"),
        (
            {"dtype": "string"},
            r"column 'user_id' is stored as fixed int64 but the schema reads it as fixed string",
        ),
    ],
    ids=["missing-column", "other-layout"],
)
def test_incompatible_schema_is_a_schema_error(small_columnar, small_schema, change, message):
    features = tuple(
        type(f)(**{**f.__dict__, **change, **({"default": ""} if "dtype" in change else {})})
        if f.name == "user_id"
        else f
        for f in small_schema.features
    )
    schema = small_schema.replace(features=features)
    with pytest.raises(SchemaError, match=message):
        tfinput.columnar(small_columnar, schema).build(PipelineConfig(batch_size=100))


def test_names_resolve_and_unknown_ones_raise():
    from tfinput._src.core.columnar.writer import verify_files

    assert columnar_records.verify_files is verify_files
    assert {"ColumnarSource", "verify_files", "ChunkProblem"} <= set(dir(columnar_records))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        columnar_records.nope  # noqa: B018


def test_the_factory_is_a_pipeline_builder_beside_tfrecord_and_parquet():
    import tfinput.columnar_records  # sets the attribute tfinput.columnar_records only
    import tfinput.pipeline

    assert "columnar" in tfinput.__all__ and callable(tfinput.columnar)
    assert tfinput.columnar is tfinput.pipeline.columnar
    assert tfinput.columnar.__module__ == tfinput.tfrecord.__module__
    assert not hasattr(tfinput.columnar_records, "columnar")


def test_tuner_accepts_a_columnar_pipeline(small_columnar, tmp_path):
    from tfinput._src.measurement.target import MeasureOptions
    from tuners._options import ConfirmOptions, StudyOptions, TuneOptions
    from tuners._study import tune

    pipeline = tfinput.columnar(small_columnar)
    result = tune(
        pipeline,
        n_trials=3,
        base=PipelineConfig(batch_size=100),
        options=TuneOptions(
            measurement=MeasureOptions(cpu_count=2, windows=2, window_batches=2, warmup_batches=1),
            study=StudyOptions(lock_path=str(tmp_path / "lock")),
            confirmation=ConfirmOptions(confirm_top=1, confirm_windows=1),
        ),
    )
    assert sum(result.trials.values()) == 3 and result.best_config.batch_size == 100
    # The best config may pack the features (a layout the search tries): 100 rows either way.
    features, _ = next(iter(pipeline.build(result.best_config)))
    assert {t.shape[0] for t in tf.nest.flatten(features)} == {100}
