"""`tfinput.sparsecore.sparsecore_feed`: jax-tpu-embedding's SparseCore preprocessing of
each batch on worker threads, in order, bit for bit what a serial call returns; the plan
from the schema and the measured limits; buffer usage and dropped ids counted; errors
that name the batch."""

from __future__ import annotations

import copy
import dataclasses
import gc
import logging
import multiprocessing
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import tfinput
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, DataError

pytest.importorskip(
    "jax_tpu_embedding",
    reason="jax-tpu-embedding is not installed (pip install 'tfinput[sparsecore]': wheels "
    "for CPython 3.12+ on x86-64 Linux)",
)

from jax_tpu_embedding.sparsecore.lib.fdo.file_fdo_client import NPZFileFDOClient
from jax_tpu_embedding.sparsecore.lib.nn import embedding

from tests.helpers import run_cli, without_weight_zero
from tfinput._src.applications.sparsecore.workers import used_entries
from tfinput.sparsecore import LimitsExceeded, SparseCorePlan, sparsecore_feed, sparsecore_step

ROOT = Path(__file__).resolve().parents[4]
BATCH = 64
DEVICES = 2
SC = 4


@pytest.fixture(scope="module")
def batches(small_tfrecord, small_schema):
    """Eight batches of the shared 1000 rows (deterministic order), as numpy."""
    config = PipelineConfig(batch_size=BATCH, deterministic=True)
    ds = tfinput.tfrecord(small_tfrecord, small_schema).build(config)
    return list(ds.take(8).as_numpy_iterator())


def _plan(schema, stacking, **kw):
    return SparseCorePlan.from_schema(
        schema,
        batch_size=BATCH,
        local_device_count=DEVICES,
        num_sc_per_device=SC,
        stacking=stacking,
        **kw,
    )


def _serial(plan, features, number, *, padding=False):
    """The reference: jax-tpu-embedding called directly, with the batch's arrays
    converted by hand (not through the plan's own conversion): each multi-hot row
    without its entries of weight 0 (the padding), as ragged rows; ``padding``: the
    dense arrays as they are, padding included."""
    ids, weights = {}, {}
    for name in plan.feature_specs:
        x = features["ids"][name].astype(np.int32)
        if x.ndim == 1:
            x = x.reshape(-1, 1)
        ids[name] = x
        w = features["weights"].get(name)
        weights[name] = np.ones(x.shape, np.float32) if w is None else w.astype(np.float32)
    if not padding:
        ids, weights = without_weight_zero(ids, weights)
    out, _ = embedding.preprocess_sparse_dense_matmul_input(
        ids,
        weights,
        dict(plan.feature_specs),
        local_device_count=DEVICES,
        global_device_count=DEVICES,
        num_sc_per_device=SC,
        allow_id_dropping=plan.allow_id_dropping,
        batch_number=number,
    )
    return out


def _valid(row_pointers, size):
    """The entries of a flat COO buffer that carry ids: per local SparseCore a segment of
    ``size / SparseCores`` entries, its partition p from the previous end rounded up to
    8 to ``row_pointers[p]`` (the rest is padding, left uninitialized)."""
    partitions = DEVICES * SC
    ends = row_pointers.reshape(-1, partitions).astype(np.int64)
    segment = size // ends.shape[0]
    mask = np.zeros(size, bool)
    for k, sc_ends in enumerate(ends):
        start = 0
        for end in sc_ends:
            mask[k * segment + start : k * segment + end] = True
            start = -(-end // 8) * 8
    return mask


def _assert_same(got, want):
    """Bit for bit on everything that carries data: the row pointers, and the ids,
    sample ids and gains of every entry the row pointers cover (padding entries are
    uninitialized memory, different between two serial calls)."""
    assert sorted(got.lhs_row_pointers) == sorted(want.lhs_row_pointers)
    for table, pointers in want.lhs_row_pointers.items():
        assert got.lhs_row_pointers[table].tobytes() == pointers.tobytes(), table
        size = want.lhs_embedding_ids[table].size
        mask = _valid(pointers, size)
        assert mask.any()
        for field in ("lhs_embedding_ids", "lhs_sample_ids", "lhs_gains"):
            a, b = getattr(got, field)[table], getattr(want, field)[table]
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a[mask].tobytes() == b[mask].tobytes(), (field, table)
    np.testing.assert_array_equal(got.num_minibatches, want.num_minibatches)


def _weights(batches, form):
    """``batches`` with their multi-hot weights as in ``form``: ``weighted`` (as read:
    padding 0, history's weights in (0, 1)), ``ones`` (every real id 1) or ``full``
    (no weight 0: the padding becomes ids 0 of weight 1)."""
    if form == "weighted":
        return batches

    def change(features):
        for name, w in features["weights"].items():
            features["weights"][name] = (w != 0).astype(w.dtype) if form == "ones" else w * 0 + 1

    return [_altered(batch, change) for batch in batches]


@pytest.mark.parametrize("stacking", ["none", "auto"])
@pytest.mark.parametrize(
    "workers,form", [(1, "weighted"), (3, "weighted"), (1, "ones"), (3, "full")]
)
def test_the_feed_is_bit_identical_to_serial_calls_in_order(
    batches, small_schema, stacking, workers, form
):
    # small_schema has single ids (user_id, last_item, country), a weighted multi-hot
    # list (history) and one without weights (tags); "items" and "tokens" are shared by
    # two features each; "auto" stacks tables of the same width and combiner. The plan
    # leaves the padding out: weighted lists go to jax-tpu-embedding as ragged rows,
    # lists whose real ids all weigh 1 as sparse COO, lists without weight 0 as they
    # are; the reference is always the ragged call.
    batches = _weights(batches, form)
    plan = _plan(small_schema, stacking)
    stacks = {f.table_spec.setting_in_stack.stack_name for f in plan.feature_specs.values()}
    assert len(stacks) == (3 if stacking == "none" else 2)  # items+user stack on "auto"
    with sparsecore_feed(batches, plan, workers=workers, prefetch=2) as feed:
        fed = list(feed)
    assert len(fed) == len(batches) and feed.stats.batches == len(batches)
    for number, (((dense, sparse), labels), (features, want_labels)) in enumerate(
        zip(fed, batches)
    ):
        _assert_same(sparse, _serial(plan, features, number))
        np.testing.assert_array_equal(labels, want_labels)
        assert dense.keys() == features["dense"].keys()
        np.testing.assert_array_equal(dense["price"], features["dense"]["price"])


def test_the_keras_rs_form_is_what_keras_rs_preprocessing_returns(batches, small_schema):
    """``output="keras_rs"``: bit for bit what keras-rs 0.4's own JAX preprocessing
    (``create_feature_samples`` and ``stack_and_shard_samples``, what
    ``DistributedEmbedding.preprocess`` runs on a TPU) returns for the batch as a keras-rs
    user passes it without its padding (single ids ``[B]``, multi-hot lists of each
    row's ids and weights: keras-rs makes ragged rows of them), in the structure
    ``preprocess`` wraps it in."""
    pytest.importorskip("keras_rs", reason="keras-rs is not installed (Python 3.11+)")
    from keras_rs.src.layers.embedding.jax import embedding_utils

    plan = _plan(small_schema, "auto", output="keras_rs")
    with sparsecore_feed(batches[:4], plan, workers=2) as feed:
        fed = [sparse for (_, sparse), _ in feed]
    for (features, _), got in zip(batches[:4], fed, strict=True):
        ids, weights = {}, {}
        for name in plan.feature_specs:
            x, w = features["ids"][name], features["weights"].get(name)
            if w is None:
                ids[name], weights[name] = x, np.ones(x.shape, np.float32)
            else:
                ids[name] = [row[g != 0].tolist() for row, g in zip(x, w)]
                weights[name] = [g[g != 0].tolist() for g in w]
        samples = embedding_utils.create_feature_samples(plan.feature_specs, ids, weights)
        want, _ = embedding_utils.stack_and_shard_samples(
            plan.feature_specs, samples, DEVICES, DEVICES, SC
        )
        assert list(got) == ["preprocessed_inputs_per_placement"]
        matrices = got["preprocessed_inputs_per_placement"]["sparsecore"]["inputs"]
        assert sorted(matrices) == sorted(want) and len(want) == 2
        for stack, w in want.items():
            g = matrices[stack]
            assert type(g) is type(w)
            for field in ("shard_starts", "shard_ends"):
                a, b = getattr(g, field), getattr(w, field)
                assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (stack, field)
            mask = _valid(w.shard_ends, w.col_ids.size)
            assert mask.any()
            for field in ("col_ids", "row_ids", "values"):
                a, b = getattr(g, field), getattr(w, field)
                assert a.dtype == b.dtype and a.shape == b.shape
                assert a[mask].tobytes() == b[mask].tobytes(), (stack, field)


def test_from_keras_rs_takes_only_a_sparsecore_layer_on_jax(small_schema):
    pytest.importorskip("keras_rs", reason="keras-rs is not installed (Python 3.11+)")
    import keras_rs

    _, features = tfinput.keras_rs_configs(small_schema, per_replica_batch_size=BATCH)
    layer = keras_rs.layers.DistributedEmbedding(features)  # this process: TensorFlow
    with pytest.raises(ConfigError, match=r"expected a keras_rs\.layers\.DistributedEmbedding on"):
        SparseCorePlan.from_keras_rs(layer)
    plan = _plan(small_schema, "none")
    with pytest.raises(ConfigError, match="keras-rs preprocesses with sharding_strategy='MOD'"):
        SparseCorePlan(
            feature_specs=plan.feature_specs,
            local_device_count=DEVICES,
            global_device_count=DEVICES,
            num_sc_per_device=SC,
            has_leading_dimension=True,
            output="keras_rs",
        )
    with pytest.raises(ConfigError, match=r"SparseCorePlan\.output: expected one of"):
        _plan(small_schema, "none", output="flax")


def test_a_built_dataset_feeds_directly_and_stats_count_the_buffers(
    small_tfrecord, small_schema, batches
):
    plan = _plan(small_schema, "none")
    config = PipelineConfig(batch_size=BATCH, deterministic=True)
    ds = tfinput.tfrecord(small_tfrecord, small_schema).build(config).take(8)
    with sparsecore_feed(ds, plan, workers=2) as feed:
        fed = list(feed)
    assert len(fed) == 8
    stats = feed.stats.to_dict()
    assert sorted(stats["tables"]) == ["items", "tokens", "user"]
    user = stats["tables"]["user"]
    # user_id: one id per row, 8 batches of 64 rows, nothing dropped.
    assert user["batches"] == 8 and user["used_entries"] == 8 * BATCH
    assert user["dropped_ids"] == 0 and 0 < user["usage"] < 1
    tokens = stats["tables"]["tokens"]
    # country (1 per row) + tags (4 per row, padding included: id 0, weight 0).
    assert tokens["used_entries"] <= 8 * BATCH * 5
    assert stats["preprocess_seconds"] > 0 and stats["wait_seconds"] >= 0
    first = plan.preprocess(batches[0][0], batch_number=0)[0]
    _assert_same(fed[0][0][1], first)


def test_used_entries_reads_the_row_pointers():
    # 2 SparseCores x 3 partitions, each partition starting at the previous end rounded
    # up to 8. First: ends 3, 10, 17 -> [0, 3), [8, 10), [16, 17): 3 + 2 + 1. Second:
    # ends 0, 9, 9 -> [0, 0), [0, 9), [16, 9): 0 + 9 + 0.
    pointers = np.array([3, 10, 17, 0, 9, 9])
    assert used_entries(pointers, 64, 3) == 6 + 9
    assert used_entries(np.array([], np.int32), 64, 3) == 0


def test_limits_from_the_data_fill_more_of_the_buffers(small_tfrecord, small_schema, batches):
    stats = tfinput.sparsecore_stats(
        tfinput.tfrecord(small_tfrecord, small_schema),
        per_replica_batch_size=BATCH // DEVICES,
        devices=DEVICES,
        sparsecores_per_device=SC,
    )
    default = _plan(small_schema, "auto")
    measured = _plan(small_schema, "auto", limits=stats)
    with pytest.raises(ConfigError, match="the limits were measured for the stacks"):
        _plan(small_schema, "none", limits=stats)  # stats of auto stacks, tables alone
    by_table = {f.table_spec.name: f.table_spec for f in measured.feature_specs.values()}
    limits = stats.table_limits()
    for table, (ids, unique) in limits.items():
        stacked = by_table[table].stacked_table_spec
        assert stacked.max_ids_per_partition >= ids  # a stack takes its members' largest
        assert stacked.max_unique_ids_per_partition >= unique
    usage = {}
    for name, plan in (("default", default), ("measured", measured)):
        with sparsecore_feed(batches, plan, workers=2) as feed:
            list(feed)
        usage[name] = feed.stats
        assert feed.stats.dropped_ids == 0
    for table, u in usage["measured"].tables.items():
        assert u.usage > usage["default"].tables[table].usage


@pytest.mark.parametrize("fmt", ["dense", "sparse", "ragged"])
def test_limits_measured_in_any_format_hold_every_batch_the_feed_sends(
    small_tfrecord, small_schema, tmp_path, fmt
):
    # The statistics of one format, with no margin, are the limits of a plan that feeds
    # every batch of the same data: none refused, no id dropped, and the counts the feed
    # published (jax-tpu-embedding's own, per partition, maxima over the batches) are
    # the ones the statistics measured, per partition and stack (jax-tpu-embedding's
    # per device, one after the other). The feed leaves the padding out; the dense
    # counts do too, the sparse and ragged ones never had it.
    config = PipelineConfig(batch_size=BATCH, deterministic=True)
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    stats = tfinput.sparsecore_stats(
        pipeline.with_multi_hot_format(fmt),
        per_replica_batch_size=BATCH // DEVICES,
        devices=DEVICES,
        sparsecores_per_device=SC,
        margin=0.0,
        config=config,
    )
    plan = _plan(small_schema, "auto", limits=stats)
    client = NPZFileFDOClient(tmp_path)
    with sparsecore_feed(pipeline.build(config), plan, workers=2, fdo=client) as feed:
        batches = sum(1 for _ in feed)
    assert batches == stats.batches == 15 and feed.stats.dropped_ids == 0
    sent = client.load()
    assert sorted(sent.max_ids_per_partition) == sorted(s.stack.name for s in stats.stacks)
    for s in stats.stacks:
        name = s.stack.name
        for field, want in (
            ("max_ids_per_partition", s.partition_ids),
            ("max_unique_ids_per_partition", s.partition_unique),
        ):
            per_device = np.reshape(getattr(sent, field)[name], (DEVICES, DEVICES * SC))
            np.testing.assert_array_equal(per_device.max(axis=0), want, err_msg=field)
        # The buffer: what the feed needed, and the one entry the rule adds (docs).
        needed = np.max(sent.required_buffer_size_per_sc[name])
        assert needed + 1 == s.observed.required_buffer_size_per_sc


def test_a_row_without_ids_looks_nothing_up_and_padding_takes_no_entry(small_schema, batches):
    # Row 0's history (table "items", combiner mean) emptied: fed to jax-tpu-embedding
    # as the dense batch is, its padding entries (id 0, weight 0) get the gain 0 / 0;
    # the feed leaves them out, and its buffers carry exactly one entry per distinct
    # (feature, row, id) of weight above 0.
    def empty_history(features):
        features["weights"]["history"][0] = 0

    features, labels = _altered(batches[0], empty_history)
    plan = _plan(small_schema, "none")
    with sparsecore_feed([(features, labels)], plan, workers=0) as feed:
        (((_, sparse), _),) = list(feed)
    as_given = _serial(plan, features, 0, padding=True)

    def carried(p, field):
        mask = _valid(p.lhs_row_pointers["items"], p.lhs_gains["items"].size)
        return getattr(p, field)["items"][mask]

    assert np.isnan(carried(as_given, "lhs_gains")).any()
    assert np.isfinite(carried(sparse, "lhs_gains")).all()
    real = {(0, r, int(i)) for r, i in enumerate(features["ids"]["last_item"])}
    ids, weights = features["ids"]["history"], features["weights"]["history"]
    real |= {(1, r, int(i)) for r in range(BATCH) for i, w in zip(ids[r], weights[r]) if w}
    assert not {i for f, r, i in real if f == 1 and r == 0}  # row 0: no history left
    assert carried(sparse, "lhs_embedding_ids").size == len(real)
    assert carried(as_given, "lhs_embedding_ids").size > len(real)  # padding entries


def test_overflow_is_counted_when_dropping_and_an_error_naming_the_batch_otherwise(
    small_schema, batches, caplog
):
    tight = {t.name: (1, 1) for t in small_schema.tables}
    dropping = _plan(small_schema, "none", limits=tight, allow_id_dropping=True)
    feed = sparsecore_feed(batches, dropping, workers=2)
    with caplog.at_level(logging.WARNING, logger="tfinput"), feed:
        list(feed)
    assert feed.stats.dropped_ids > 0
    assert all(u.dropped_ids > 0 for u in feed.stats.tables.values())
    assert "id(s) dropped in batch" in caplog.text and "counted in the feed's stats" in caplog.text
    # Without dropping, jax-tpu-embedding aborts the process on an overflow; the feed
    # preprocesses with dropping on and refuses a batch that dropped anything.
    strict = _plan(small_schema, "none", limits=tight)
    with sparsecore_feed(batches, strict, workers=2) as feed, pytest.raises(DataError) as e:
        list(feed)
    text = str(e.value)
    assert text.startswith("SparseCore batch 0: table ")
    assert "id(s) beyond max_ids_per_partition 1 / max_unique_ids_per_partition 1" in text
    assert "allow_id_dropping=True" in text and "tfinput schema sparsecore" in text


def test_bad_input_and_arguments_are_clear_errors(small_schema, batches):
    plan = _plan(small_schema, "none")
    with pytest.raises(ConfigError, match="workers must be an int >= 0, got -1"):
        sparsecore_feed(batches, plan, workers=-1)
    with pytest.raises(ConfigError, match="local_device_count 4 exceeds global_device_count 2"):
        SparseCorePlan(
            feature_specs=plan.feature_specs,
            local_device_count=4,
            global_device_count=2,
            num_sc_per_device=SC,
        )
    with pytest.raises(
        ConfigError, match=r"limits: unknown table\(s\) \['nope'\]; the schema's tables are"
    ):
        _plan(small_schema, "none", limits={"nope": (8, 8)})
    packed = [({"packed_ids": np.zeros((BATCH, 3))}, np.zeros(BATCH))]
    feed = sparsecore_feed(packed, plan)
    with feed, pytest.raises(ConfigError, match="batch 0: SparseCore preprocessing needs tfinp"):
        next(feed)

    def broken():
        yield batches[0]
        raise OSError("disk gone")

    with sparsecore_feed(broken(), plan) as feed:
        assert next(feed) is not None
        with pytest.raises(OSError, match="disk gone"):
            next(feed)


def _altered(batch, change):
    """A deep copy of ``batch`` with ``change(features)`` applied."""
    features, labels = copy.deepcopy(batch)
    change(features)
    return features, labels


@pytest.mark.parametrize("workers", [2, 0], ids=["workers", "serial"])
def test_a_plain_iterable_is_checked_as_a_pipeline_checks_it(small_schema, batches, workers):
    """Batches from any iterable: ids outside their table, a batch of other rows than
    the plan's and weights of another shape are refused, naming the batch, the feature,
    the table and what was expected (jax-tpu-embedding takes them without a word)."""
    plan = _plan(small_schema, "none")
    vocab = {t.name: t.vocabulary_size for t in small_schema.tables}

    def refused(bad):
        with sparsecore_feed([batches[0], bad], plan, workers=workers) as feed:
            assert next(feed) is not None
            with pytest.raises(DataError) as e:
                next(feed)
        return str(e.value)

    def too_big(f):
        f["ids"]["user_id"][5] = vocab["user"]

    assert refused(_altered(batches[1], too_big)) == (
        f"SparseCore batch 1: feature 'user_id': id out of range; expected ids in "
        f"[0, {vocab['user']}) (table 'user'), or fold the ids into the table first (a "
        f"tfinput pipeline does with out_of_range='modulo'). Largest id found: {vocab['user']}"
    )

    def wraps(f):  # int64 beyond int32: not wrapped into the table by the cast
        f["ids"]["country"] = f["ids"]["country"].astype(np.int64) + 2**32

    assert "feature 'country': id out of range" in refused(_altered(batches[1], wraps))

    def negative(f):
        f["ids"]["history"][3, 1] = -1

    assert refused(_altered(batches[1], negative)) == (
        f"SparseCore batch 1: feature 'history': negative id; expected ids in "
        f"[0, {vocab['items']}) (table 'items'). Smallest id found: -1"
    )

    def half(f):
        for group in f.values():
            for name in group:
                group[name] = group[name][: BATCH // 2]

    text = refused(_altered(batches[1], half))
    assert text.startswith(f"SparseCore batch 1: feature 'user_id' has {BATCH // 2} rows; ")
    assert f"the plan expects {BATCH} (its input_shape ({BATCH}, 1))" in text
    assert "drop_remainder=True" in text

    def weights(f):
        f["weights"]["tags"] = f["weights"]["tags"][:, :2]

    assert refused(_altered(batches[1], weights)) == (
        f"SparseCore batch 1: feature 'tags': weights of shape ({BATCH}, 2) for ids of "
        f"shape ({BATCH}, 4); expected one weight per id"
    )


def test_a_packed_batch_is_refused_naming_the_layout(small_tfrecord, small_schema):
    plan = _plan(small_schema, "none")
    config = PipelineConfig(batch_size=BATCH, deterministic=True, layout="packed")
    packed = tfinput.tfrecord(small_tfrecord, small_schema).build(config).take(1)
    with sparsecore_feed(packed, plan) as feed, pytest.raises(ConfigError) as e:
        next(feed)
    assert str(e.value).startswith(
        "batch 0: SparseCore preprocessing needs per_feature batches; this one is packed"
    )
    assert "layout='per_feature'" in str(e.value) and "tfinput.layout.unpack" in str(e.value)


def test_stacking_given_limits_logs_no_default_limits_warning(small_schema, caplog):
    """jax-tpu-embedding warns that a stack of several tables gets default limits; the
    plan gives it the largest limits of the stack's tables, so the warning (and only
    it) is dropped."""
    with caplog.at_level(logging.INFO, logger="absl"):
        plan = _plan(small_schema, "auto", limits={"user": (64, 32), "items": (48, 40)})
        assert "Stacking multiple tables together" not in caplog.text
        logging.getLogger("absl").warning("Stacking multiple tables together: after")
    assert "Stacking multiple tables together: after" in caplog.text  # only while stacking
    stacked = plan.feature_specs["user_id"].table_spec.stacked_table_spec
    assert sorted({f.table_spec.name for f in plan.feature_specs.values()
                   if f.table_spec.stacked_table_spec.stack_name == stacked.stack_name}) == [
        "items", "user"]  # fmt: skip
    assert (stacked.max_ids_per_partition, stacked.max_unique_ids_per_partition) == (64, 40)


def test_closing_early_stops_the_feeder(small_schema, batches):
    plan = _plan(small_schema, "none")
    endless = (batches[i % len(batches)] for i in range(10**9))
    feed = sparsecore_feed(endless, plan, workers=2, prefetch=2)
    next(feed)
    feed.close()
    for thread in feed._feeder.threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in feed._feeder.threads)


def _feed_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("tfinput-sparsecore")]


def _wait_for_no_feed_threads() -> list[str]:
    """The feeds' threads still running after at most 30 s."""
    deadline = time.monotonic() + 30
    while _feed_threads() and time.monotonic() < deadline:
        time.sleep(0.1)
    return _feed_threads()


def _rss_mib() -> float:
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_feeds_that_are_not_closed_stop_when_collected(small_tfrecord, small_schema):
    """A feed left without `close` (dropped after ``next``, or a ``for`` loop left with
    ``break``) stops its feeder and workers and frees its batches once collected: 20
    such feeds over an endless dataset bring the threads and memory back."""
    plan = _plan(small_schema, "none")
    config = PipelineConfig(batch_size=BATCH, deterministic=True)
    # Built once: each feed iterates it afresh (its own tf.data iterator, feeder and
    # workers); the dataset object is the test's, alive throughout.
    endless = tfinput.tfrecord(small_tfrecord, small_schema).build(config).repeat()

    def abandon(i: int) -> None:
        feed = sparsecore_feed(endless, plan, workers=2)
        if i % 2:
            assert next(feed) is not None
        else:
            for _ in feed:
                break

    for i in range(2):  # warm-up: TensorFlow's and jax-tpu-embedding's own first use
        abandon(i)
    gc.collect()
    assert _wait_for_no_feed_threads() == []
    threads, rss = threading.active_count(), _rss_mib()
    for i in range(20):
        abandon(i)
    gc.collect()
    assert _wait_for_no_feed_threads() == []
    assert threading.active_count() <= threads
    # Each of these feeds held about 6 MiB when it was never stopped (120 MiB for 20).
    assert _rss_mib() - rss < 60, f"{_rss_mib() - rss:.0f} MiB more after 20 feeds"
    # Leaving a loop over the feed itself stops it: its last reference is gone.
    for _ in sparsecore_feed(endless, plan, workers=2):
        assert _feed_threads()
        break
    assert _wait_for_no_feed_threads() == []


def test_a_closed_feed_ends_and_a_feed_in_use_keeps_running(small_schema, batches):
    plan = _plan(small_schema, "none")
    endless = (batches[i % len(batches)] for i in range(10**9))
    feed = sparsecore_feed(endless, plan, workers=1, prefetch=1)
    for _ in feed:
        break
    gc.collect()
    assert _feed_threads(), "still referenced: a loop can go on"
    assert next(feed) is not None
    feed.close()
    with pytest.raises(StopIteration):
        next(feed)
    assert _wait_for_no_feed_threads() == []


def test_the_example_runs_on_cpu():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[4] / "examples" / "sparsecore_feed.py"
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "fed 7 batches of 1024" in proc.stdout and "dropped ids: 0" in proc.stdout
    assert "COO buffers" in proc.stdout


def test_a_feed_over_an_input_iterator_saves_where_training_stopped(small_tfrecord, small_schema):
    # The workers run ahead of the training loop; the state is the position after the
    # last batch the loop took, and a restored feed numbers its batches from there, so
    # its buffers are bit for bit those of an uninterrupted feed.
    plan = _plan(small_schema, "none")
    config = PipelineConfig(
        batch_size=BATCH, deterministic=True, shuffle_buffer=200, shuffle_seed=8
    )
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    with sparsecore_feed(pipeline.iterator(config), plan, workers=2, prefetch=3) as feed:
        whole = list(feed)
    assert len(whole) == 15  # 1000 rows in batches of 64, the last one partial dropped
    first = pipeline.iterator(config)
    with sparsecore_feed(first, plan, workers=2, prefetch=3) as feed:
        taken = [next(feed) for _ in range(5)]
        deadline = time.monotonic() + 30
        while first.position < 5 + 3 and time.monotonic() < deadline:
            time.sleep(0.01)  # the feeder has read ahead of the loop
        assert first.position > feed.position == 5
        state = feed.get_state()
    second = pipeline.iterator(config)
    second.set_state(state)
    with sparsecore_feed(second, plan, workers=3, prefetch=4) as feed:
        rest = list(feed)
    assert feed.position == 15 and len(taken) + len(rest) == len(whole)
    for number, (got, want) in enumerate(zip(taken + rest, whole)):
        ((_, sparse), labels), ((_, want_sparse), want_labels) = got, want
        _assert_same(sparse, want_sparse)
        np.testing.assert_array_equal(labels, want_labels, err_msg=f"batch {number}")


def test_feed_state_needs_an_input_iterator_that_keeps_enough(
    small_tfrecord, small_schema, batches
):
    from tfinput.errors import ResumeError

    plan = _plan(small_schema, "none")
    with sparsecore_feed(batches, plan) as feed:
        next(feed)
        with pytest.raises(ResumeError, match=r"plain iterable.*pipeline.iterator"):
            feed.get_state()
    it = tfinput.tfrecord(small_tfrecord, small_schema).iterator(
        PipelineConfig(batch_size=BATCH), keep=2
    )
    with pytest.raises(ConfigError, match=r"keeps 2 batch.*prefetch 4 \+ 1.*keep >= 5"):
        sparsecore_feed(it, plan, workers=2)


def test_workers_zero_preprocesses_on_the_calling_thread(small_schema, batches):
    # The baseline the tuner compares against: keras-rs's generator pattern.
    plan = _plan(small_schema, "none")
    with sparsecore_feed(batches, plan, workers=0) as feed:
        fed = list(feed)
    assert feed.stats.batches == len(batches) and not any(
        t.name.startswith("tfinput-sparsecore") for t in threading.enumerate()
    )
    for number, ((_, sparse), _) in enumerate(fed):
        _assert_same(sparse, _serial(plan, batches[number][0], number))


def _short_tune(small_tfrecord, small_schema, step, *, n_trials, tmp_path):
    """`tuners.tune` of the shared TFRecord files against ``step``: a few batches per
    window, one confirmation window, no extra advice."""
    from tfinput._src.measurement.target import MeasureOptions
    from tuners import tune
    from tuners._options import ConfirmOptions, StudyOptions, TuneOptions

    return tune(
        tfinput.tfrecord(small_tfrecord, small_schema),
        step=step,
        n_trials=n_trials,
        base=PipelineConfig(batch_size=BATCH),
        options=TuneOptions(
            measurement=MeasureOptions(cpu_count=2, windows=2, window_batches=2, warmup_batches=1),
            study=StudyOptions(lock_path=str(tmp_path / "lock")),
            confirmation=ConfirmOptions(
                confirm_top=1, confirm_windows=1, advise_format=False, breakdown=False
            ),
        ),
    )


def test_tune_searches_the_feed_knobs_and_its_result_counts_the_drops(
    small_tfrecord, small_schema, tmp_path, caplog, batches
):
    from tfinput import steps

    # Limits far below what the data needs: every batch drops ids, counted per table.
    plan = _plan(
        small_schema,
        "none",
        limits={"items": (2, 2), "tokens": (2, 2), "user": (2, 2)},
        allow_id_dropping=True,
    )
    step = sparsecore_step(plan, steps.simulated_step(0.002))
    assert step.feeds_sparsecore and step.owns_loop
    result = _short_tune(small_tfrecord, small_schema, step, n_trials=3, tmp_path=tmp_path)
    assert set(result.space["sparsecore_workers"]) == {0, 1, 2}  # 0: the baselines'
    assert result.space["sparsecore_prefetch"] == [0, 2, 8]
    baseline = result.study.get_trials()[0]
    assert baseline.user_attrs.get("baseline") == "autotune"
    assert baseline.params["sparsecore_workers"] == 0  # on the training thread
    fed = result.step["sparsecore"]
    assert fed["batches"] >= 3 * (1 + 2 * 2)  # every trial's warm-up and windows
    assert sorted(fed["tables"]) == ["items", "tokens", "user"]
    assert fed["dropped_ids"] == sum(t["dropped_ids"] for t in fed["tables"].values()) > 0
    assert all(t["dropped_ids"] > 0 for t in fed["tables"].values())
    assert result.step["feeds_sparsecore"] is True
    before = step.describe()["sparsecore"]["batches"]
    step(batches[0])  # one batch on the calling thread, counted with the rest
    assert step.describe()["sparsecore"]["batches"] == before + 1
    drops = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(drops) == 3, "one line per table, not one per measurement"


def test_worker_processes_give_the_same_buffers_and_errors(small_schema, batches):
    # jax-tpu-embedding serialises concurrent calls in one process; processes scale
    # (benchmarks/RESULTS.md). Their output is the same, and a worker's error still
    # names the batch.
    plan = _plan(small_schema, "auto")
    with sparsecore_feed(batches, plan, workers=2, processes=True) as feed:
        fed = list(feed)
    assert feed.stats.batches == len(batches) and feed.stats.dropped_ids == 0
    for number, (((dense, sparse), labels), (features, want_labels)) in enumerate(
        zip(fed, batches)
    ):
        _assert_same(sparse, _serial(plan, features, number))
        np.testing.assert_array_equal(labels, want_labels)
        np.testing.assert_array_equal(dense["price"], features["dense"]["price"])
    tight = _plan(small_schema, "none", limits={"items": (2, 2), "tokens": (2, 2), "user": (2, 2)})
    with (
        sparsecore_feed(batches, tight, workers=2, processes=True) as feed,
        pytest.raises(DataError, match=r"SparseCore batch 0: table '\w+' has \d+ id"),
    ):
        next(feed)


#: A user's script that starts a feed with worker processes at its top level, without
#: ``if __name__ == "__main__":``: a spawned worker would run it again.
UNGUARDED = """
import os, sys
print("started", os.getpid(), flush=True)
from tfinput import testing
from tfinput.sparsecore import SparseCorePlan, sparsecore_feed

schema = testing.small_schema(row_id=False)
plan = SparseCorePlan.from_schema(schema, batch_size=64, local_device_count=2,
                                  num_sc_per_device=4)
with sparsecore_feed(sys.argv[1:], plan, workers=2, processes=True) as feed:
    print("fed", sum(1 for _ in feed))
"""


def test_worker_processes_from_a_script_without_a_main_guard_are_one_clear_error(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert done.returncode == 1
    assert done.stdout.count("started") == 1  # no worker ran the script again
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith(
            f"ConfigError: sparsecore_feed(processes=True): {script}, line 10, "
            'starts it outside `if __name__ == "__main__":`; each worker process is started '
            "with spawn and imports that script again, which would run this line again in every "
            "worker (and break the pool). Move the code that starts it under `if __name__ == "
            '"__main__":` (or into a function called from there), or use threads '
            "(processes=False)"
        )
    )
    assert "BrokenProcessPool" not in done.stderr


#: Where a script starts worker processes, and whether that is refused.
GUARDS = {
    "top-level": ("check()", True),
    "guarded": ('if __name__ == "__main__":\n    check()', False),
    "guarded-reversed": ('if "__main__" == __name__:\n    check()', False),
    "function-from-guard": (
        'def main():\n    check()\n\nif __name__ == "__main__":\n    main()',
        False,
    ),
    "function-at-top-level": ("def main():\n    check()\n\nmain()", True),
}


@pytest.mark.parametrize(("body", "refused"), GUARDS.values(), ids=GUARDS.keys())
def test_the_main_guard_is_read_from_the_script(tmp_path, body, refused):
    script = tmp_path / "script.py"
    script.write_text(
        "from tfinput._src.applications.sparsecore.workers import check_main_guard\n"
        "def check():\n    check_main_guard('workers')\n\n" + body + "\nprint('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if refused:
        assert done.returncode == 1 and "workers: " in done.stderr.splitlines()[-1]
    else:
        assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


def test_a_worker_process_that_dies_is_an_error_naming_the_batch(small_schema, batches):
    plan = _plan(small_schema, "none")
    others = set(multiprocessing.active_children())
    with sparsecore_feed(batches, plan, workers=1, prefetch=1, processes=True) as feed:
        next(feed)  # the worker process is up
        for child in set(multiprocessing.active_children()) - others:
            os.kill(child.pid, signal.SIGKILL)
        with pytest.raises(DataError, match=r"^sparsecore_feed: a worker process ended abrupt"):
            list(feed)


def test_device_prefetch_takes_the_feed_ahead_of_the_step(small_schema, batches):
    # The transfer of the next preprocessed batch overlaps the step, as for any batches:
    # `tfinput.device_prefetch.to_jax` over the feed.
    import jax

    from tfinput.device_prefetch import to_jax

    plan = _plan(small_schema, "none")
    with sparsecore_feed(batches, plan, workers=1) as feed:
        on_device = list(to_jax(feed, size=2))
    assert len(on_device) == len(batches)
    for number, ((dense, sparse), labels) in enumerate(on_device):
        assert isinstance(labels, jax.Array) and isinstance(dense["price"], jax.Array)
        want = _serial(plan, batches[number][0], number)
        for table, pointers in want.lhs_row_pointers.items():
            got = sparse.lhs_row_pointers[table]
            assert isinstance(got, jax.Array)
            np.testing.assert_array_equal(np.asarray(got), pointers)


def test_device_prefetch_over_the_feed_saves_what_it_holds_as_not_taken(
    small_tfrecord, small_schema
):
    # to_jax(feed) runs up to size + 2 batches ahead of the step; its state hands them
    # back through the feed (get_state(unconsumed=...)), so nothing is lost or repeated.
    from tfinput.device_prefetch import to_jax

    plan = _plan(small_schema, "none")
    config = PipelineConfig(
        batch_size=BATCH, deterministic=True, shuffle_buffer=200, shuffle_seed=8
    )
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)

    def rows(item):
        return np.asarray(item[0][0]["row_id"]).tolist()

    whole = [rows(b) for b in sparsecore_feed(pipeline.iterator(config), plan, workers=1)]
    feed = sparsecore_feed(pipeline.iterator(config, keep=12), plan, workers=1, prefetch=2)
    assert feed.keep == 12 - 3
    with to_jax(feed, size=2) as prefetcher:
        first = [rows(next(prefetcher)) for _ in range(4)]
        state = prefetcher.get_state()
    feed.close()
    again = sparsecore_feed(pipeline.iterator(config, keep=12), plan, workers=1, prefetch=2)
    with to_jax(again, size=2) as prefetcher:
        prefetcher.set_state(state)
        rest = [rows(b) for b in prefetcher]
    assert first + rest == whole


def test_a_jax_profile_names_the_feed_and_transfer_stages_with_their_time(
    capsys, small_tfrecord, tmp_path
):
    # `tfinput profile` of the feed (2 worker threads) with `to_jax` over it and a JAX
    # step: xprof's input-pipeline analyzer, run offline on the JAX trace, counts each
    # stage the feed and the prefetcher mark, and the report names them with their time.
    from tests.helpers import run_cli
    from tfinput.device_prefetch import INPUT_STAGES

    module = tmp_path / "fed.py"
    module.write_text(
        textwrap.dedent(
            f"""
            import jax.numpy as jnp
            import tfinput
            from tfinput import testing
            from tfinput.device_prefetch import to_jax
            from tfinput.sparsecore import SparseCorePlan, sparsecore_feed

            SCHEMA = testing.small_schema()

            def feed(config):
                pipeline = tfinput.tfrecord({[str(f) for f in small_tfrecord]!r}, SCHEMA)
                plan = SparseCorePlan.from_schema(
                    SCHEMA, batch_size=config.batch_size, local_device_count={DEVICES},
                    num_sc_per_device={SC}, stacking="none")
                batches = pipeline.build(config).repeat()
                return to_jax(sparsecore_feed(batches, plan, workers=2), size=2)

            def step():
                def train(state, batch):
                    (dense, _sparse), labels = batch
                    return state + jnp.sum(dense["price"]) + jnp.sum(labels)
                return train, jnp.zeros(())
            """
        )
    )
    config = tmp_path / "config.json"
    PipelineConfig(batch_size=BATCH).to_json(config)
    logdir = tmp_path / "logs"
    code, out, err = run_cli(
        capsys, "profile", "--pipeline", f"{module}:feed", "--config", config,
        "--step", "jax", "--step-fn", f"{module}:step", "--steps", "8", "--warmup", "2",
        "--logdir", logdir,
    )  # fmt: skip
    # xprof's step breakdown of TensorFlow's trace finds no complete step when the steps
    # run no TensorFlow op (the batches come from the feed's queue): the steps come from
    # JAX's trace, its step markers, with the wait in next(); a full report, exit 0.
    assert code == 0, out + err
    text = " ".join(out.split())
    assert "the steps are read from JAX's trace (its step markers)" in text, out
    assert "Per-step breakdown (ms, JAX's trace, its step markers)" in text, out
    assert len(re.findall(r"│ train \d+ │", out)) == 8, out
    assert "Waiting for input n/a" not in text and "Verdict: the input pipeline" in text
    shown = {"read": "Demanded file read", "preprocessing": "Preprocessing", "enqueue": "Enqueue"}
    for name, (_id, category) in INPUT_STAGES.items():
        found = re.search(rf"{name} ([0-9.]+) ms \({shown[category]}\)", text)
        assert found, (name, out)
        # The training loop waits only while the feed is behind: 0.0 ms when it is ahead.
        assert float(found[1]) > 0 or name == "tfinput/sparsecore/wait", (name, out)
    assert "over 8 profiled steps (JAX trace, xprof's input-pipeline analyzer)" in text


def test_a_tensorflow_profile_names_the_feed_and_transfer_stages_too(
    batches, small_schema, tmp_path
):
    # The same stages under TensorFlow's profiler alone (a simulated step: no JAX profile
    # is taken): each carries xprof's stage stats in TensorFlow's trace, and xprof's
    # input-pipeline analyzer, run offline on it, finds every one by name. The feed reads
    # batches held in memory, so no tf.data stage crowds xprof's table (its top 20).
    import profiles
    from profiles._xplane import find_trace
    from profiles._xprof import find_table, table_rows, xprof_tables
    from tfinput.device_prefetch import INPUT_STAGES, to_jax
    from tfinput.steps import simulated_step

    plan = _plan(small_schema, "none")
    with sparsecore_feed(batches * 3, plan, workers=2) as feed, to_jax(feed, size=2) as it:
        result = profiles.capture(it, simulated_step(0.01), logdir=tmp_path, steps=6, warmup=2)
    assert "jax_trace" not in result.metadata  # TensorFlow's trace only
    tools = xprof_tables(find_trace(tmp_path).paths, ("input_pipeline_analyzer",))
    table = find_table(tools["input_pipeline_analyzer"], "input_pipeline_analyzer", "input ops")
    found = {row["opName"]: row for row in table_rows(table)}
    shown = {"read": "Demanded file read", "preprocessing": "Preprocessing", "enqueue": "Enqueue"}
    for name, (_id, category) in INPUT_STAGES.items():
        assert name in found, (name, sorted(found))
        assert found[name]["category"] == shown[category] and found[name]["count"] > 0
    assert {op.name for op in profiles.analyze(tmp_path).host_stages} == set(INPUT_STAGES)


@pytest.mark.parametrize(
    ("device_time_s", "bound"), [(None, True), (0.1, False)], ids=["input-only", "long-step"]
)
def test_the_tuner_says_when_the_feed_bounds_its_winner(
    small_tfrecord, small_schema, device_time_s, bound
):
    # The feed's own times per config (the step made for it), measured through real
    # windows: with no step the training loop only waits for preprocessed batches (the
    # feed is the bound); behind a 100 ms step two workers keep it fed.
    from tfinput import steps
    from tfinput._src.measurement.compare import measure
    from tfinput._src.measurement.target import MeasureOptions
    from tuners._winner_advice import feed_sentence

    plan = _plan(small_schema, "none")
    step = sparsecore_step(plan, None if device_time_s is None else steps.simulated_step(0.1))
    config = PipelineConfig(batch_size=BATCH, sparsecore_workers=2, sparsecore_prefetch=4)
    result = measure(
        tfinput.tfrecord(small_tfrecord, small_schema),
        {"feed": config},
        step=step,
        measurement=MeasureOptions(windows=2, window_batches=6, warmup_batches=2),
    )
    fed = step.prepare(config).describe()["sparsecore_feed"]
    assert fed["batches"] >= 2 * (2 + 6) and fed["preprocess_seconds"] > 0
    said = feed_sentence(step, config, result.results)
    if bound:
        assert said is not None and said.startswith("The SparseCore feed bounds the step"), fed
        assert "with 2 workers taking" in said
    else:
        assert said is None, (said, fed)
    serial = dataclasses.replace(config, sparsecore_workers=0)
    assert feed_sentence(step, serial, result.results) is None  # on the training thread


def test_tune_against_a_jax_step_searches_the_feed_knobs_with_the_tf_data_ones(
    small_tfrecord, small_schema, tmp_path
):
    # A JAX training step on the feed's batches (run batch by batch, the feed doing the
    # prefetching): the tuner searches the feed's workers and prefetch with tf.data's
    # knobs (not device_prefetch: the feed prefetches).
    import jax.numpy as jnp

    from tfinput import steps

    def train(state, batch):
        (dense, _sparse), labels = batch
        return state + jnp.sum(dense["price"]) + jnp.sum(labels)

    inner = steps.jax_step(train, jnp.zeros(()))
    step = sparsecore_step(_plan(small_schema, "none"), inner)
    assert step.kind == "jax" and step.feeds_sparsecore and not step.feeds_device
    result = _short_tune(small_tfrecord, small_schema, step, n_trials=2, tmp_path=tmp_path)
    assert {"sparsecore_workers", "sparsecore_prefetch", "map_parallelism"} <= set(result.space)
    assert "device_prefetch" not in result.space  # the feed prefetches
    assert result.step["kind"] == "jax"
    fed = result.step["sparsecore"]
    assert fed["batches"] >= 2 * (1 + 2 * 2) and fed["dropped_ids"] == 0
    assert len(result.study.get_trials()) >= 2


def test_a_step_that_runs_model_fit_is_refused_naming_it(small_schema):
    # model.fit owns its loop and cannot take the feed's batches; a JAX step can.
    import keras

    from tfinput import steps

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ConfigError, match=r"runs its own loop \(keras_fit\).*jax_step"):
        sparsecore_step(_plan(small_schema, "none"), steps.keras_fit_step(model))


def test_schema_sparsecore_out_npz_is_what_the_fdo_client_loads(
    small_tfrecord, small_schema, schema_file, tmp_path, capsys
):
    out_file = tmp_path / "fdo" / "sub" / "fdo_stats_0_0.npz"  # its folders created
    code, out, err = run_cli(
        capsys, "schema", "sparsecore", *small_tfrecord, "--schema", schema_file,
        "--per-replica-batch-size", "64", "--devices", "2", "--out", out_file,
    )  # fmt: skip
    assert code == 0 and "in jax-tpu-embedding's FDO form" in " ".join(out.split()), err
    loaded = NPZFileFDOClient(out_file.parent).load()
    want = tfinput.sparsecore_stats(
        tfinput.tfrecord(small_tfrecord, small_schema), per_replica_batch_size=64, devices=2
    )
    for s in want.stacks:  # the maxima the data needed, per partition and per SparseCore
        name = s.stack.name
        assert loaded.max_ids_per_partition[name].tolist() == [s.partition_ids.tolist()]
        assert loaded.max_unique_ids_per_partition[name].tolist() == [s.partition_unique.tolist()]
        assert loaded.required_buffer_size_per_sc[name].max() == (
            s.observed.required_buffer_size_per_sc
        )
    plan = SparseCorePlan.from_schema(
        small_schema, batch_size=128, local_device_count=2, num_sc_per_device=4
    ).with_limits(loaded, margin=0.0, shrink=True)
    for f in plan.feature_specs.values():  # the plan takes them (no margin: as measured)
        stacked = f.table_spec.stacked_table_spec
        observed = want.stack(stacked.stack_name).observed
        assert stacked.max_ids_per_partition >= observed.max_ids_per_partition
        assert stacked.max_ids_per_partition - observed.max_ids_per_partition < 8


def test_the_feed_publishes_the_maxima_of_the_batches_taken_in_the_fdo_form(
    small_schema, batches, tmp_path
):
    plan = _plan(small_schema, "none")
    client = NPZFileFDOClient(tmp_path)
    with sparsecore_feed(batches, plan, workers=2, fdo=client) as feed:
        taken = [next(feed) for _ in range(5)]
        feed.publish()  # one host's file, one record: the maxima of the 5 batches
        rest = list(feed)
    assert len(taken) + len(rest) == len(batches)
    files = sorted(tmp_path.glob("fdo_stats_0_*.npz"))
    assert len(files) == 2  # publish(), then close() with the batches taken since
    want = [plan.preprocess(features, number)[1] for number, (features, _) in enumerate(batches)]
    loaded = NPZFileFDOClient(tmp_path).load()  # as every host would: the latest file
    for field in ("max_ids_per_partition", "max_unique_ids_per_partition"):
        for stack, got in getattr(loaded, field).items():
            # One row per record: the batches before publish(), then those after it.
            first = np.max([getattr(s, field)[stack] for s in want[:5]], axis=0)
            then = np.max([getattr(s, field)[stack] for s in want[5:]], axis=0)
            np.testing.assert_array_equal(got, [first, then])
    with pytest.raises(ConfigError, match="the feed has no FDO client"):
        sparsecore_feed(batches, plan).publish()
    with pytest.raises(ConfigError, match="fdo must be a jax-tpu-embedding FDO client"):
        sparsecore_feed(batches, plan, fdo=str(tmp_path))


@pytest.mark.parametrize("workers", [0, 2])
def test_limits_learn_through_the_fdo_client_and_training_goes_on(
    small_tfrecord, small_schema, tmp_path, workers
):
    # Batch 5 needs 18 ids in one partition of table "tokens", more than its limit of 16:
    # the feed refuses it (without dropping ids, and without jax-tpu-embedding's process
    # abort), publishes its statistics with those of the batches before it, and the run
    # goes on from that batch with the limits the client loads: the jitted step compiles
    # once more, for the larger buffers, and every batch is trained on once.
    import jax
    import jax.numpy as jnp

    tight = {"tokens": (16, 10), "user": (8, 8), "items": (16, 10)}
    plan = _plan(small_schema, "none", limits=tight)
    config = PipelineConfig(batch_size=BATCH, deterministic=True)
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    client = NPZFileFDOClient(tmp_path)
    step = jax.jit(lambda sparse: sum(jnp.sum(v) for v in sparse.lhs_embedding_ids.values()))
    iterator = pipeline.iterator(config)
    plans, refused, labels = [plan], [], []
    while True:
        try:
            with sparsecore_feed(iterator, plans[-1], workers=workers, fdo=client) as feed:
                for (_, sparse), y in feed:
                    step(sparse)
                    labels.append(y)
            break
        except LimitsExceeded as e:
            again = pickle.loads(pickle.dumps(e))  # as from a worker process
            assert (again.batch_number, str(again)) == (e.batch_number, str(e))
            refused.append((again.batch_number, again.stats))
            plans.append(plans[-1].with_limits(client.load()))
            iterator.set_state(feed.get_state())  # from the refused batch on
    assert [number for number, _ in refused] == [5]
    ((_, stats),) = refused
    assert int(np.max(stats.max_ids_per_partition["tokens"])) == 18
    limits = {
        f.table_spec.name: f.table_spec.stacked_table_spec for f in plans[-1].feature_specs.values()
    }
    # 18 ids * 1.2, rounded up to 8; the unique ids the first 6 batches needed (8) likewise.
    assert (
        limits["tokens"].max_ids_per_partition,
        limits["tokens"].max_unique_ids_per_partition,
    ) == (
        24,
        16,
    )
    assert all(
        s.max_ids_per_partition >= tight[t][0] and s.suggested_coo_buffer_size_per_device
        for t, s in limits.items()
    )
    assert step._cache_size() == 2  # compiled for the first plan's buffers, then the new
    want = [y for _, y in pipeline.build(config).as_numpy_iterator()]
    assert len(labels) == len(want) == 15
    for got, expected in zip(labels, want, strict=True):
        np.testing.assert_array_equal(np.asarray(got), expected)


def test_with_limits_refuses_statistics_of_another_stacking_and_a_negative_margin(
    small_schema, batches
):
    plan = _plan(small_schema, "none")
    _, stats = _plan(small_schema, "auto").preprocess(batches[0][0], 0)  # stacks of auto
    with pytest.raises(ConfigError, match=r"name stack\(s\) \['items_user'\] the plan does not"):
        plan.with_limits(stats)
    _, own = plan.preprocess(batches[0][0], 0)
    with pytest.raises(ConfigError, match=r"margin must be a finite number >= 0 .*, got -0\.5"):
        plan.with_limits(own, margin=-0.5)
    grown = plan.with_limits(own, margin=0.0)  # the default limits (256) already hold them

    def ids(p):
        return {n: f.table_spec.stacked_table_spec.max_ids_per_partition
                for n, f in p.feature_specs.items()}  # fmt: skip

    assert ids(grown) == ids(plan) and set(ids(plan).values()) == {256}
