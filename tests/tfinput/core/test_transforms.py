"""`tfinput.transforms`: `parse_spec` and `transform_batch` on raw batches, directly and
through every source (shapes, values, padding, hashing, multi-hot formats, data checks)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import by_row_id, collect, expected_rows
from tfinput import testing
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, clean_error
from tfinput.layout import PackedLayout, pack, unpack
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema, Table
from tfinput.transforms import parse_spec, transform_batch


@pytest.fixture(scope="module", params=["tfrecord", "parquet", "wrapped"])
def pipeline(request, pipeline_of):
    return pipeline_of(request.param)


@pytest.fixture(scope="module")
def rows(pipeline):
    """Every row the pipeline reads in batches of 100, by ``row_id``: read once per
    source for the tests that only look at it."""
    return by_row_id(collect(pipeline.build(PipelineConfig(batch_size=100))))


@pytest.fixture(scope="module")
def first_batch(pipeline):
    """The pipeline's first batch of 50 (dense multi-hot features), read once per source."""
    return next(iter(pipeline.build(PipelineConfig(batch_size=50))))[0]


# --------------------------------------------------------- through every source
def test_every_tensor_has_a_static_shape(pipeline, small_schema):
    ds = pipeline.build(PipelineConfig(batch_size=64))
    features, labels = ds.element_spec
    assert labels.shape == (64,)
    for group, specs in features.items():
        for name, spec in specs.items():
            assert spec.shape.is_fully_defined(), (group, name, spec)
            assert spec.shape[0] == 64
    assert features["ids"]["history"].shape == (64, 5)
    assert features["ids"]["history"].dtype == tf.int32
    assert features["weights"]["history"].dtype == tf.float32
    assert features["dense"]["embedding"].shape == (64, 3)


def test_values_match_independent_computation(rows, small_schema, small_columns):
    got = rows
    want = expected_rows(small_columns, small_schema)
    assert len(got["dense"]["row_id"]) == 1000
    for group in ("dense", "ids", "weights"):
        for name, expected in want[group].items():
            np.testing.assert_allclose(got[group][name], expected, rtol=1e-6, err_msg=name)
    np.testing.assert_array_equal(got["labels"]["label"], small_columns.values["label"])


def test_id_zero_survives_and_empty_lists_are_all_padding(rows, small_columns):
    got = rows
    lengths = small_columns.lengths["history"]
    ids, w = got["ids"]["history"], got["weights"]["history"]
    empty = lengths == 0
    assert empty.any(), "test data must contain empty lists"
    assert (ids[empty] == 0).all() and (w[empty] == 0).all()
    # A real id 0 keeps a positive weight, unlike padding.
    offsets = small_columns.offsets("history")
    real_zero = [
        (r, k)
        for r in range(1000)
        for k in range(min(lengths[r], 5))
        if small_columns.values["history"][offsets[r] + k] == 0
    ]
    assert real_zero, "test data must contain id 0"
    for r, k in real_zero:
        assert ids[r, k] == 0 and w[r, k] > 0
    # Weights are 0 exactly on padding.
    n = np.minimum(lengths, 5)
    assert ((w > 0).sum(axis=1) == n).all()


def test_lists_longer_than_max_len_are_truncated_to_their_first_ids(small_columns, rows):
    got = rows
    lengths = small_columns.lengths["history"]
    offsets = small_columns.offsets("history")
    r = int(np.flatnonzero(lengths > 5)[0])
    first = small_columns.values["history"][offsets[r] : offsets[r] + 5]
    np.testing.assert_array_equal(got["ids"]["history"][r], first)


def test_string_ids_use_tensorflow_hashing(rows, small_columns):
    got = rows
    serving = tf.strings.to_hash_bucket_fast(small_columns.values["country"].astype(bytes), 2048)
    np.testing.assert_array_equal(got["ids"]["country"], serving.numpy())
    assert got["ids"]["country"].max() < 2048 and got["ids"]["country"].min() >= 0


@pytest.mark.parametrize("fmt", ["sparse", "ragged"])
def test_sparse_and_ragged_formats_hold_the_same_ids(pipeline, first_batch, small_schema, fmt):
    config = PipelineConfig(batch_size=50)
    dense = first_batch
    other = next(iter(pipeline.with_multi_hot_format(fmt).build(config)))[0]
    for name in ("history", "tags"):
        ids, w = other["ids"][name], other["weights"][name]
        if fmt == "sparse":
            assert isinstance(ids, tf.SparseTensor)
            assert ids.shape.as_list() == [50, small_schema.feature(name).max_len]
            ids_d = tf.sparse.to_dense(ids).numpy()
            w_d = tf.sparse.to_dense(w).numpy()
            # explicit entries are exactly the real ids, id 0 included
            assert ids.values.shape[0] == int((dense["weights"][name].numpy() > 0).sum())
        else:
            assert isinstance(ids, tf.RaggedTensor)
            ids_d = ids.to_tensor(shape=[50, small_schema.feature(name).max_len]).numpy()
            w_d = w.to_tensor(shape=[50, small_schema.feature(name).max_len]).numpy()
        np.testing.assert_array_equal(ids_d, dense["ids"][name].numpy())
        np.testing.assert_allclose(w_d, dense["weights"][name].numpy())


# ------------------------------------------------------------------ parse_spec
def test_parse_spec_covers_every_column_with_its_type_and_default(small_schema):
    spec = parse_spec(small_schema)
    assert list(spec) == small_schema.columns()
    assert spec["row_id"] == tf.io.FixedLenFeature([], tf.int64, 0)
    assert spec["price"] == tf.io.FixedLenFeature([], tf.float32, 0.0)
    assert spec["embedding"] == tf.io.FixedLenFeature([3], tf.float32, [0.5, 0.5, 0.5])
    assert spec["user_id"] == tf.io.FixedLenFeature([], tf.int64, None)  # required
    assert spec["country"] == tf.io.FixedLenFeature([], tf.string, "")
    assert spec["history"] == tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int64)
    assert spec["history_w"] == tf.io.RaggedFeature(tf.float32, row_splits_dtype=tf.int64)
    assert spec["tags"] == tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64)
    assert spec["label"] == tf.io.FixedLenFeature([], tf.float32, None)


def test_parse_spec_and_transform_batch_turn_examples_into_the_expected_rows(small_schema):
    cols = testing.generate(small_schema, 60, seed=11, max_list_len=8)
    records = tf.constant(testing.to_examples(cols))
    raw = tf.io.parse_example(records, parse_spec(small_schema))
    features, labels = transform_batch(raw, small_schema, batch_size=60)
    want = expected_rows(cols, small_schema)
    for group in ("dense", "ids", "weights"):
        assert list(features[group]) == list(want[group])
        for name, expected in want[group].items():
            np.testing.assert_allclose(features[group][name], expected, rtol=1e-6, err_msg=name)
    np.testing.assert_array_equal(labels, cols.values["label"])


# ------------------------------------------------- transform_batch, directly
TABLE = Table(name="t", vocabulary_size=10, dim=2)
SCHEMA = Schema(
    features=(
        Dense(name="x", clip=(0.0, None), log1p=True),
        Dense(name="g", log1p=True),
        Dense(name="v", length=2, clip=(None, 4.0)),
        Categorical(name="c", table="t"),
        Categorical(name="m", table="t", out_of_range="modulo"),
        Categorical(name="s", table="t", dtype="string", default=""),
        MultiHot(name="h", table="t", max_len=3, weights="h_w"),
        MultiHot(name="u", table="t", max_len=2),
    ),
    tables=(TABLE,),
    labels=(Label(name="y", dtype="int64"),),
)


def raw_batch(**changes):
    """Three rows of every kind of raw column; ``changes`` replace columns."""
    raw = {
        "x": tf.constant([-1.0, 0.0, 3.0]),
        "g": tf.constant([0.0, 1.0, 2.0]),
        "v": tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
        "c": tf.constant([0, 9, 4], tf.int64),
        "m": tf.constant([12, -1, 3], tf.int64),
        "s": tf.constant([b"a", b"", b"b"]),
        "h": tf.ragged.constant([[0, 5, 7, 8], [], [3]], dtype=tf.int64),
        "h_w": tf.ragged.constant([[0.5, 1.0, 2.0, 3.0], [], [0.25]], dtype=tf.float32),
        "u": tf.ragged.constant([[2], [0, 1, 6], []], dtype=tf.int64),
        "y": tf.constant([0, 1, 0], tf.int64),
    }
    raw.update(changes)
    return raw


def test_transform_batch_clips_logs_folds_hashes_and_pads():
    features, labels = transform_batch(raw_batch(), SCHEMA, batch_size=3)
    dense, ids, weights = features["dense"], features["ids"], features["weights"]
    assert list(dense) == ["x", "g", "v"] and list(ids) == ["c", "m", "s", "h", "u"]
    np.testing.assert_allclose(dense["x"], [0.0, 0.0, np.log1p(3.0)], rtol=1e-6)
    np.testing.assert_allclose(dense["g"], np.log1p([0.0, 1.0, 2.0]), rtol=1e-6)
    np.testing.assert_array_equal(dense["v"], [[1, 2], [3, 4], [4, 4]])
    np.testing.assert_array_equal(ids["c"], [0, 9, 4])
    np.testing.assert_array_equal(ids["m"], [2, 9, 3])  # floor modulo: -1 -> vocab - 1
    hashed = tf.strings.to_hash_bucket_fast([b"a", b"", b"b"], 10).numpy()
    np.testing.assert_array_equal(ids["s"], hashed)
    np.testing.assert_array_equal(ids["h"], [[0, 5, 7], [0, 0, 0], [3, 0, 0]])
    np.testing.assert_array_equal(weights["h"], [[0.5, 1, 2], [0, 0, 0], [0.25, 0, 0]])
    np.testing.assert_array_equal(ids["u"], [[2, 0], [0, 1], [0, 0]])
    np.testing.assert_array_equal(weights["u"], [[1, 0], [1, 1], [0, 0]])
    for group, dtype in (("dense", tf.float32), ("ids", tf.int32), ("weights", tf.float32)):
        assert {t.dtype for t in features[group].values()} == {dtype}, group
    assert labels.dtype == tf.float32 and labels.numpy().tolist() == [0.0, 1.0, 0.0]


@pytest.mark.parametrize("fmt", ["sparse", "ragged"])
def test_transform_batch_sparse_and_ragged_hold_only_the_real_ids(fmt):
    features, _ = transform_batch(raw_batch(), SCHEMA, batch_size=3, multi_hot_format=fmt)
    ids, weights = features["ids"]["h"], features["weights"]["h"]
    if fmt == "sparse":
        assert ids.dense_shape.numpy().tolist() == [3, 3]
        assert ids.indices.numpy().tolist() == [[0, 0], [0, 1], [0, 2], [2, 0]]
        assert ids.values.numpy().tolist() == [0, 5, 7, 3]  # the real id 0 is kept
        assert weights.values.numpy().tolist() == [0.5, 1.0, 2.0, 0.25]
    else:
        assert ids.to_list() == [[0, 5, 7], [], [3]]
        assert weights.to_list() == [[0.5, 1.0, 2.0], [], [0.25]]
        assert features["weights"]["u"].to_list() == [[1.0], [1.0, 1.0], []]
    assert ids.dtype == tf.int32
    np.testing.assert_array_equal(features["ids"]["c"], [0, 9, 4])  # singles stay dense


def test_batch_size_none_leaves_the_batch_dimension_open():
    raw_spec = {
        k: (
            tf.RaggedTensorSpec([None, None], v.dtype, 1, tf.int64)
            if isinstance(v, tf.RaggedTensor)
            else tf.TensorSpec([None, *v.shape[1:]], v.dtype)
        )
        for k, v in raw_batch().items()
    }
    for batch_size, first in ((None, None), (8, 8)):
        fn = tf.function(lambda raw, b=batch_size: transform_batch(raw, SCHEMA, batch_size=b))
        features, labels = fn.get_concrete_function(raw_spec).structured_outputs
        assert labels.shape.as_list() == [first]
        assert features["ids"]["h"].shape.as_list() == [first, 3]
        assert features["weights"]["u"].shape.as_list() == [first, 2]
        assert features["dense"]["v"].shape.as_list() == [first, 2]


def test_several_labels_come_as_a_dict():
    schema = SCHEMA.replace(labels=(Label(name="y", dtype="int64"), Label(name="z")))
    raw = raw_batch(z=tf.constant([0.5, 1.5, 2.5]))
    _, labels = transform_batch(raw, schema, batch_size=3)
    assert list(labels) == ["y", "z"]
    assert labels["z"].numpy().tolist() == [0.5, 1.5, 2.5]


NAN = float("nan")


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"c": tf.constant([0, 10, 4], tf.int64)},
            "feature 'c': id out of range; expected ids in [0, 10) (table 't'), or set "
            "out_of_range='modulo'. Largest id found: 10",
        ),
        (
            {"c": tf.constant([-3, 1, 2], tf.int64)},
            "feature 'c': negative id; expected ids in [0, 10) (table 't'). Smallest id found: -3",
        ),
        (
            # past max_len, so the id is dropped, but still checked
            {"h": tf.ragged.constant([[0, 5, 7, 11], [], [3]], dtype=tf.int64)},
            "feature 'h': id out of range; expected ids in [0, 10) (table 't')",
        ),
        ({"x": tf.constant([1.0, NAN, 0.0])}, "feature 'x': NaN or inf in a dense feature"),
        (
            {"v": tf.constant([[1.0, 2.0], [3.0, float("inf")], [5.0, 6.0]])},
            "feature 'v': NaN or inf in a dense feature",
        ),
        (
            {"g": tf.constant([0.0, -2.0, 1.0])},
            "feature 'g': log1p needs values > -1; set \"clip\": [0, null] in the schema. "
            "Smallest value found: -2",
        ),
        (
            {"h_w": tf.ragged.constant([[0.5, 1.0, 2.0, 3.0], [1.0], [0.25]])},
            "feature 'h': weights column 'h_w' has a different number of values than the ids",
        ),
        (
            {"h_w": tf.ragged.constant([[0.5, NAN, 2.0, 3.0], [], [0.25]])},
            "feature 'h': NaN or inf in weights column 'h_w'",
        ),
        ({"y": tf.constant([0.0, NAN, 1.0])}, "label 'y': NaN or inf in a label"),
    ],
    ids=[
        "id-too-large",
        "id-negative",
        "list-id-past-max-len",
        "nan-dense",
        "inf-vector",
        "log1p-below-minus-one",
        "weights-length",
        "nan-weight",
        "nan-label",
    ],
)
def test_bad_values_fail_naming_the_feature_and_the_value(changes, message):
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        transform_batch(raw_batch(**changes), SCHEMA, batch_size=3)
    assert message in clean_error(error.value)


def test_several_bad_values_in_one_batch_fail_with_the_first_check_every_time():
    """All of a batch's checks share one guard: with several failing, the error is the
    first failing check's (dense features, then weights, ids, labels), eagerly and in a
    traced function alike, not whichever check the runtime happened to run first."""
    bad = raw_batch(
        x=tf.constant([NAN, 0.0, 3.0]),
        c=tf.constant([0, 10, 4], tf.int64),
        y=tf.constant([0.0, NAN, 1.0]),
    )
    traced = tf.function(lambda raw: transform_batch(raw, SCHEMA, batch_size=3))
    for run in (lambda: transform_batch(bad, SCHEMA, batch_size=3), lambda: traced(bad)) * 2:
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            run()
        message = clean_error(error.value)
        assert "feature 'x': NaN or inf in a dense feature" in message
        assert "feature 'c'" not in message and "label 'y'" not in message


# ------------------------------------------------------------ packed layout
def _fused_schema() -> Schema:
    """Runs the fused packing must handle: clipped and log1p scalars around a vector,
    int and string single ids (two bucket counts) around lists, lists sharing max_len
    with and without weights, then one with its own max_len."""
    return Schema(
        features=(
            Dense(name="d0", clip=(0.0, None), log1p=True),
            Dense(name="v", length=3),
            Dense(name="d1"),
            Categorical(name="c_int", table="t"),
            MultiHot(name="m_w", table="t", max_len=4, weights="m_w_weights"),
            Categorical(name="c_str", table="s", dtype="string"),
            MultiHot(name="m_a", table="t", max_len=4),
            MultiHot(name="m_b", table="s", max_len=4, dtype="string"),
            MultiHot(name="m_c", table="t", max_len=4),
            Categorical(name="c_str2", table="s2", dtype="string"),
            MultiHot(name="m_long", table="t", max_len=6),
        ),
        tables=(
            Table(name="t", vocabulary_size=1000, dim=8),
            Table(name="s", vocabulary_size=50, dim=8),
            Table(name="s2", vocabulary_size=7, dim=8),
        ),
        labels=(Label(name="y"),),
    )


@pytest.mark.parametrize("batch_size", [64, None])
def test_packed_layout_is_fused_and_equals_per_feature_output(batch_size):
    """`transform_batch(layout=...)` copies features as whole blocks (scalar matrices,
    one mask for a run of lists); the result is value for value what packing the
    per-feature output gives, and unpacks to it."""
    schema = _fused_schema()
    cols = testing.generate(schema, 64, seed=3, max_list_len=7)
    raw = {
        c: tf.RaggedTensor.from_row_lengths(v, cols.lengths[c])
        if c in cols.lengths
        else tf.constant(v)
        for c, v in cols.values.items()
    }
    layout = PackedLayout.from_schema(schema)
    per_feature, labels = transform_batch(raw, schema, batch_size=batch_size)
    packed, packed_labels = transform_batch(raw, schema, batch_size=batch_size, layout=layout)
    assert sorted(packed) == ["dense", "ids", "weights"]
    assert packed["ids"].shape[1] == layout.n_ids == 1 + 4 + 1 + 4 + 4 + 4 + 1 + 6
    np.testing.assert_array_equal(labels.numpy(), packed_labels.numpy())
    # the fused result is what packing the per-feature output gives, value for value
    plain = pack(per_feature, layout)
    for group in packed:
        np.testing.assert_array_equal(packed[group].numpy(), plain[group].numpy())
    views = unpack(packed, layout)
    for group, values in per_feature.items():
        for name, value in values.items():
            np.testing.assert_array_equal(views[group][name].numpy(), value.numpy(), err_msg=name)


def test_packed_layout_needs_the_dense_multi_hot_format(small_schema):
    raw_schema = small_schema
    layout = PackedLayout.from_schema(raw_schema)
    with pytest.raises(ConfigError, match=r'packed layout needs "dense", got .sparse.'):
        transform_batch({}, raw_schema, batch_size=4, multi_hot_format="sparse", layout=layout)


LISTS = Schema(
    features=(
        MultiHot(name="a", table="small", max_len=3),
        MultiHot(name="b", table="big", max_len=3),
        MultiHot(name="c", table="small", max_len=3, out_of_range="modulo"),
        MultiHot(name="d", table="small", max_len=2),
    ),
    tables=(
        Table(name="small", vocabulary_size=10, dim=2),
        Table(name="big", vocabulary_size=100, dim=2),
    ),
)


def _lists(**changes):
    raw = {
        "a": tf.ragged.constant([[1], [2, 3], []], dtype=tf.int64),
        "b": tf.ragged.constant([[50], [], [99, 1, 7, 8]], dtype=tf.int64),
        "c": tf.ragged.constant([[12, -1], [], [5]], dtype=tf.int64),
        "d": tf.ragged.constant([[], [9], [4, 4, 4]], dtype=tf.int64),
    }
    return raw | {k: tf.ragged.constant(v, dtype=tf.int64) for k, v in changes.items()}


@pytest.fixture(params=["blocks", "one by one"])
def list_blocks(request, monkeypatch):
    """Lists sharing ``max_len`` padded as one block (as from `MIN_LIST_BLOCK` of them)
    and one by one (fewer): the same batches, the same errors."""
    from tfinput._src.core import transforms

    if request.param == "blocks":
        monkeypatch.setattr(transforms, "MIN_LIST_BLOCK", 1)
    return request.param


def test_lists_sharing_max_len_are_padded_folded_and_checked_each_against_its_table(
    list_blocks,
):
    """Lists of one ``max_len`` are padded as one block; each keeps its own table and
    ``out_of_range`` (a list of another ``max_len`` is a block of its own)."""
    features, _ = transform_batch(_lists(), LISTS, batch_size=3)
    ids, weights = features["ids"], features["weights"]
    np.testing.assert_array_equal(ids["a"], [[1, 0, 0], [2, 3, 0], [0, 0, 0]])
    np.testing.assert_array_equal(ids["b"], [[50, 0, 0], [0, 0, 0], [99, 1, 7]])
    np.testing.assert_array_equal(ids["c"], [[2, 9, 0], [0, 0, 0], [5, 0, 0]])
    np.testing.assert_array_equal(ids["d"], [[0, 0], [9, 0], [4, 4]])
    np.testing.assert_array_equal(weights["b"], [[1, 0, 0], [0, 0, 0], [1, 1, 1]])
    np.testing.assert_array_equal(weights["d"], [[0, 0], [1, 0], [1, 1]])


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"a": [[1], [50], []]}, "feature 'a': id out of range; expected ids in [0, 10) "
         "(table 'small'), or set out_of_range='modulo'. Largest id found: 50"),
        ({"b": [[1], [], [100]]}, "feature 'b': id out of range; expected ids in [0, 100) "
         "(table 'big'), or set out_of_range='modulo'. Largest id found: 100"),
        ({"b": [[1], [-4], []]}, "feature 'b': negative id; expected ids in [0, 100) "
         "(table 'big'). Smallest id found: -4"),
        ({"d": [[], [9], [4, 4, 10]]}, "feature 'd': id out of range; expected ids in [0, 10)"),
    ],
    ids=["small-table", "big-table", "negative", "alone-past-max-len"],
)  # fmt: skip
def test_an_id_out_of_its_table_in_a_block_of_lists_names_its_feature(
    changes, message, list_blocks
):
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        transform_batch(_lists(**changes), LISTS, batch_size=3)
    assert message in clean_error(error.value)
