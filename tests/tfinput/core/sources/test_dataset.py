"""`tfinput._src.core.sources.dataset` (`DatasetSource`): a user's own dataset, wrapped: what it
declares and refuses, its checks of the elements, reading rows or batches."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import wrapped_dataset
from tfinput._src.core.sources.dataset import DatasetSource
from tfinput._src.core.sources.protocol import FileChecks, RooflineStages
from tfinput._src.measurement.roofline import pipeline_stages
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, DataError, SchemaError, SourceError
from tfinput.schema import Categorical, Label, MultiHot, Schema, Table


@pytest.mark.parametrize(("kind", "batch_size"), [("wrapped", 100), ("wrapped_batched", 50)])
def test_wrapped_reads_the_fixture_rows_in_order(
    kind, batch_size, pipeline_of, assert_reads_fixture_rows
):
    # wrapped_batched: the user's dataset batches by 50, so the pipeline's batch is 50
    assert_reads_fixture_rows(pipeline_of(kind), batch_size=batch_size)


def test_wrapped_declares_batching_and_no_files(small_columns):
    rows = DatasetSource(dataset=wrapped_dataset(small_columns))
    batches = DatasetSource(
        dataset=wrapped_dataset(small_columns).batch(5, drop_remainder=True), batched=True
    )
    assert (rows.kind, rows.batches_itself, rows.resume) == ("dataset", False, "dataset")
    assert batches.batches_itself is True
    assert rows.files() == [] and not isinstance(rows, FileChecks)


def test_wrapped_names_file_knobs_and_honours_a_shuffle_of_batches(
    small_columns, small_schema, warnings_logged
):
    def make():
        return wrapped_dataset(small_columns).ragged_batch(50, drop_remainder=True)

    pipeline = tfinput.wrap(make, small_schema, batched=True).with_file_shuffling()
    config = PipelineConfig(batch_size=50, interleave_cycle_length=5, shuffle_buffer=123)
    ds = pipeline.build(config)
    messages = "\n".join(warnings_logged())
    assert "interleave_cycle_length=5 has no effect on the dataset source" in messages
    assert "shuffle_files has no effect on the dataset source" in messages
    assert "shuffle_buffer" not in messages
    assert "shuffle_buffer" not in pipeline.source.ignored_knobs  # the tuner may search it
    # the batches keep their static size: every row is in one of them
    assert ds.element_spec[0]["dense"]["row_id"].shape == [50]


def test_wrapped_rows_honour_the_shuffle_buffer(small_columns, small_schema, read_request):
    source = DatasetSource(dataset=lambda: wrapped_dataset(small_columns))
    assert source.unhonoured(read_request([], shuffle_buffer=123, cache=True)) == {}


def test_wrapped_source_has_no_roofline(small_columns, small_schema):
    pipeline = tfinput.wrap(lambda: wrapped_dataset(small_columns), small_schema)
    assert not isinstance(pipeline.source, RooflineStages)
    with pytest.raises(SourceError, match="roofline: supported for tfrecord, parquet and columnar"):
        pipeline_stages(pipeline, 100)


def test_a_shuffle_buffer_larger_than_the_dataset_is_capped(
    small_columns, small_schema, warnings_logged
):
    pipeline = tfinput.wrap(lambda: wrapped_dataset(small_columns), small_schema)
    pipeline.build(PipelineConfig(batch_size=50, shuffle_buffer=5000))
    assert (
        "tfinput: shuffle_buffer 5000 is larger than the wrapped dataset's 1000 element(s); "
        "using 1000"
    ) in warnings_logged()


def test_a_callable_must_return_a_dataset(small_schema):
    with pytest.raises(
        SourceError, match=r"wrapped source: expected a tf\.data\.Dataset, got list"
    ):
        tfinput.wrap(lambda: [1, 2], small_schema).build(PipelineConfig(batch_size=2))


def _without(cols, key: str, **replace) -> tf.data.Dataset:
    """The fixture rows without column ``key`` (or with it replaced)."""
    ds = wrapped_dataset(cols)

    def change(row):
        row = {k: v for k, v in row.items() if k != key}
        row.update({k: f(row) for k, f in replace.items()})
        return row

    return ds.map(change)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda cols: _without(cols, "price", prices=lambda r: r["row_id"]),
            "wrapped dataset: feature 'price': key 'price' missing; keys: ['country', "
            "'embedding', 'history', 'history_w', 'label', 'last_item', 'prices', 'row_id', "
            "'tags', 'user_id']; did you mean ['prices']?",
        ),
        (
            lambda cols: _without(
                cols, "user_id", user_id=lambda r: tf.strings.as_string(r["row_id"])
            ),
            "wrapped dataset: feature 'user_id': key 'user_id' has dtype string; the schema "
            "expects numbers",
        ),
        (
            lambda cols: _without(cols, "price", price=lambda r: tf.fill([2], 1.0)),
            "wrapped dataset: feature 'price': key 'price' has shape [2] per example; the "
            "schema expects scalars ([] or [1])",
        ),
        (
            lambda cols: tf.data.Dataset.range(3),
            "wrapped dataset: elements must be dicts keyed by column or (features, labels) "
            "pairs of a dict and a tensor or dict, got TensorSpec",
        ),
    ],
    ids=["missing-key", "wrong-dtype", "wrong-shape", "not-a-dict"],
)
def test_elements_are_checked_against_the_schema_at_build(
    small_columns, small_schema, make, message
):
    pipeline = tfinput.wrap(lambda: make(small_columns), small_schema)
    with pytest.raises(SchemaError) as e:
        pipeline.build(PipelineConfig(batch_size=10))
    assert str(e.value).startswith(message)


def test_scalars_as_length_one_vectors_and_int32_ids_are_accepted(small_columns, small_schema):
    """``FixedLenFeature([1])`` gives ``[1]`` scalars; numpy ids may be int32."""

    def make():
        return wrapped_dataset(small_columns).map(
            lambda r: {
                **r,
                "price": tf.reshape(r["price"], [1]),
                "user_id": tf.cast(r["user_id"], tf.int32),
            }
        )

    pipeline = tfinput.wrap(make, small_schema)
    features, _ = next(iter(pipeline.build(PipelineConfig(batch_size=10))))
    assert features["dense"]["price"].shape == (10,)
    want = small_columns.values["user_id"][:10] % 500
    assert features["ids"]["user_id"].numpy().tolist() == want.tolist()


_IDS = Schema(
    features=(Categorical(name="c", table="t"), MultiHot(name="m", table="t", max_len=3)),
    tables=(Table(name="t", vocabulary_size=1000, dim=4),),
    labels=(Label(name="label"),),
)


def _float_ids(c, m, dtype):
    return tf.data.Dataset.from_tensor_slices(
        {
            "c": np.array(c, dtype),
            "m": tf.ragged.constant(m, dtype=dtype),
            "label": np.zeros(len(c), np.float32),
        }
    )


def test_whole_float_ids_are_read_as_integers():
    """A pandas int column with a missing value becomes float64: whole values read
    exactly, single ids and lists alike."""
    pipeline = tfinput.wrap(_float_ids([1.0, 100.0], [[1.0], [2.0, 3.0]], np.float64), _IDS)
    ((features, _),) = list(pipeline.iterate(PipelineConfig(batch_size=2)))
    assert features["ids"]["c"].numpy().tolist() == [1, 100]
    assert features["ids"]["m"].numpy().tolist() == [[1, 0, 0], [2, 3, 0]]


_NOT_WHOLE = (
    " is not a whole number (float ids are read as integers when whole): give the ids as "
    "int64 (missing ones filled), or fix the data"
)


@pytest.mark.parametrize(
    ("c", "m", "dtype", "message"),
    [
        (
            [1.0, 100.7],
            [[1.0], [2.0]],
            np.float64,
            "feature 'c': key 'c' holds float64 ids; id 100.7" + _NOT_WHOLE,
        ),
        (
            [1.0, float("nan")],
            [[1.0], [2.0]],
            np.float64,
            "feature 'c': key 'c' holds float64 ids; id nan" + _NOT_WHOLE,
        ),
        (
            [1.0, 2.0],
            [[1.0], [2.5, 3.0]],
            np.float32,
            "feature 'm': key 'm' holds float32 ids; id 2.5" + _NOT_WHOLE,
        ),
        (
            [1.0, 2.0**30],
            [[1.0], [2.0]],
            np.float32,
            "feature 'c': key 'c' holds float32 ids; id 1073741824 is beyond 2^24, where "
            "float32 no longer holds every integer exactly (it may have been rounded): give "
            "the ids as int64",
        ),
    ],
    ids=["fraction", "nan", "list-fraction", "beyond-exact"],
)
def test_float_ids_that_are_not_exact_integers_are_a_data_error(c, m, dtype, message):
    """Never a silent truncation (100.7 -> 100) or an id rounded by its float type."""
    pipeline = tfinput.wrap(_float_ids(c, m, dtype), _IDS)
    with pytest.raises(DataError) as e:
        list(pipeline.iterate(PipelineConfig(batch_size=2), diagnose=False))
    assert str(e.value) == f"wrapped dataset: {message}"


# ------------------------------------------------------ (features, labels) pairs
def _pairs(ds: tf.data.Dataset, labels_as_dict: bool = False) -> tf.data.Dataset:
    """The Keras-style form of the same rows: ``(features, label)``."""

    def split(row):
        row = dict(row)
        label = row.pop("label")
        return row, ({"label": label} if labels_as_dict else label)

    return ds.map(split)


@pytest.mark.parametrize("labels_as_dict", [False, True], ids=["label-tensor", "label-dict"])
def test_keras_style_pairs_read_like_dicts(
    labels_as_dict, small_columns, small_schema, assert_reads_fixture_rows
):
    pipeline = tfinput.wrap(
        lambda: _pairs(wrapped_dataset(small_columns), labels_as_dict), small_schema
    )
    assert_reads_fixture_rows(pipeline)


def test_batched_pairs_read_like_dicts(small_columns, small_schema, assert_reads_fixture_rows):
    pipeline = tfinput.wrap(
        lambda: _pairs(wrapped_dataset(small_columns)).ragged_batch(50, drop_remainder=True),
        small_schema,
        batched=True,
    )
    assert_reads_fixture_rows(pipeline, batch_size=50)


def test_pairs_that_do_not_fit_the_schema_are_refused(small_columns, small_schema):
    two_labels = dataclasses.replace(
        small_schema, labels=(*small_schema.labels, Label(name="clicked"))
    )
    pairs = _pairs(wrapped_dataset(small_columns))
    with pytest.raises(SchemaError, match=r"one label tensor, but the schema has 2 labels"):
        tfinput.wrap(pairs, two_labels).build(PipelineConfig(batch_size=10))
    both = pairs.map(lambda x, y: ({**x, "label": y}, y))
    with pytest.raises(SchemaError, match=r"label key\(s\) \['label'\] are also feature keys"):
        tfinput.wrap(both, small_schema).build(PipelineConfig(batch_size=10))
    triples = pairs.map(lambda x, y: (x, y, y))
    with pytest.raises(SchemaError, match=r"elements must be dicts keyed by column or"):
        tfinput.wrap(triples, small_schema).build(PipelineConfig(batch_size=10))


# -------------------------------------------------------------------- rebatch
def test_rebatch_recuts_the_batches_to_the_config_batch_size(
    small_columns, small_schema, assert_reads_fixture_rows
):
    def make():  # batches of 50, the last 1000 rows in 20 batches
        return wrapped_dataset(small_columns).ragged_batch(50)

    pipeline = tfinput.wrap(make, small_schema, batched=True, rebatch=True)
    assert_reads_fixture_rows(pipeline, batch_size=40)  # every row once, in order
    sizes = [
        int(labels.shape[0])
        for _, labels in pipeline.build(PipelineConfig(batch_size=64, drop_remainder=True))
    ]
    assert sizes == [64] * (1000 // 64)  # the static shape XLA needs, the partial one dropped


@pytest.mark.parametrize("batch_size", [50, 32])
def test_batches_that_may_be_partial_are_refused_at_build_unless_rebatched(
    small_columns, small_schema, batch_size
):
    """``Dataset.batch(50)`` keeps a partial last batch (its static size is unknown):
    without ``rebatch`` the build refuses it, whatever the config's batch, instead of a
    shape error at the end of the epoch (or at the first batch for another size)."""
    rows = wrapped_dataset(small_columns).take(990)  # 19 batches of 50 and one of 40

    with pytest.raises(ConfigError) as e:
        tfinput.wrap(rows.batch(50), small_schema, batched=True).build(
            PipelineConfig(batch_size=batch_size)
        )
    assert str(e.value).startswith(
        "wrapped dataset: batched=True, but its batches have no static size (a "
        "Dataset.batch without drop_remainder=True, whose last batch may be partial), and "
        f"the config asks for batches of {batch_size} (per replica): batch with "
        "drop_remainder=True, or wrap(..., batched=True, rebatch=True) to re-cut them"
    )
    rebatched = tfinput.wrap(rows.batch(50), small_schema, batched=True, rebatch=True)
    sizes = [int(y.shape[0]) for _, y in rebatched.build(PipelineConfig(batch_size=batch_size))]
    assert sizes == [batch_size] * (990 // batch_size)  # the partial one dropped


def test_batches_of_another_size_are_refused_unless_rebatched(small_columns, small_schema):
    def make():
        return wrapped_dataset(small_columns).batch(50, drop_remainder=True)

    with pytest.raises(
        ConfigError,
        match=r"wrapped dataset: its batches hold 50 examples, the config asks for 64 \(per "
        r"replica\): build with batch_size=50 \(times the replicas\), or wrap\(\.\.\., "
        r"batched=True, rebatch=True\) to re-cut them",
    ):
        tfinput.wrap(make, small_schema, batched=True).build(PipelineConfig(batch_size=64))
    rebatched = tfinput.wrap(make, small_schema, batched=True, rebatch=True)
    _, labels = next(iter(rebatched.build(PipelineConfig(batch_size=64))))
    assert labels.shape == (64,)
    with pytest.raises(ConfigError, match=r"rebatch=True\) re-cuts batches: it needs batched"):
        tfinput.wrap(make, small_schema, rebatch=True)
