"""SparseCore statistics: checked against a brute-force count that follows the rule
literally (slice by slice, partition by partition, with Python sets)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import tfinput
from tfinput import datagen
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError
from tfinput.schema import Categorical, Label, MultiHot, Schema, Table
from tfinput.sparsecore import (
    KERAS_RS_DEFAULT_LIMIT,
    Limits,
    plan_stacks,
    sparsecore_stats,
)

#: Small tables so that ids repeat within rows, within slices and across features; a
#: shared table ("b": a single id and a multi-hot list); a table wider than int32 keys
#: allow once stacked ("huge").
SCHEMA = Schema(
    tables=(
        Table(name="a", vocabulary_size=50, dim=8),
        Table(name="b", vocabulary_size=1000, dim=8),
        Table(name="m", vocabulary_size=30, dim=16, combiner="sum"),
        Table(name="huge", vocabulary_size=2**31 - 1, dim=8),
    ),
    features=(
        Categorical(name="u", table="a"),
        Categorical(name="v", table="a"),
        Categorical(name="w", table="b"),
        Categorical(name="z", table="huge"),
        MultiHot(name="x", table="m", max_len=6),
        MultiHot(name="y", table="b", max_len=4),
    ),
    labels=(Label(name="label"),),
)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("sparsecore")
    datagen.generate_files(out, schema=SCHEMA, rows=480, files=2, format="tfrecord", seed=7)
    return sorted(str(p) for p in Path(out).glob("*.tfrecord"))


def _batches(files: list[str], batch: int) -> list[dict]:
    ds = tfinput.tfrecord(files, SCHEMA).build(PipelineConfig(batch_size=batch))
    return [features for features, _ in ds.as_numpy_iterator()]


def _reference(batches, stacks, *, devices, per_core, per_replica):
    """Per stack, per batch: (max ids, max unique ids, max buffer) per partition, counted
    one SparseCore slice at a time with sets (the rule in tfinput/sparsecore.py). The
    batches are dense: a list's padding has weight 0 and is not fed, in any format (the
    data's real ids all have weights above 0)."""
    S = devices * per_core
    rows_per_slice = per_replica // per_core
    out = {}
    for stack in stacks:
        per_batch = []
        for features in batches:
            best = [0, 0, 0]
            for sl in range(S):
                entries, columns = set(), [set() for _ in range(S)]
                index = 0
                for table, shift, offset in zip(stack.tables, stack.shifts, stack.offsets):
                    members = sorted(
                        (f for f in SCHEMA.categorical if f.table == table), key=lambda f: f.name
                    )
                    for f in members:
                        ids = features["ids"][f.name]
                        for r in range(sl * rows_per_slice, (sl + 1) * rows_per_slice):
                            if ids.ndim == 1:
                                fed = [int(ids[r])]
                            else:
                                weights = features["weights"][f.name][r]
                                fed = [int(i) for i, w in zip(ids[r], weights) if w != 0]
                            for i in fed:
                                col = (i + shift) % S + (i - i % S) + offset
                                entries.add((index, r, col))
                                columns[col % S].add(col)
                        index += 1
                ids_per_partition = [0] * S
                for _, _, col in entries:
                    ids_per_partition[col % S] += 1
                buffer = 1 + sum(-(-n // 8) * 8 for n in ids_per_partition)
                best = [
                    max(best[0], max(ids_per_partition)),
                    max(best[1], max(len(c) for c in columns)),
                    max(best[2], buffer),
                ]
            per_batch.append(best)
        out[stack.name] = np.array(per_batch)
    return out


CASES = [
    # devices, SparseCores per device, per-replica batch, stacking, multi-hot format
    (1, 4, 32, "none", "dense"),
    (2, 4, 16, "auto", "dense"),
    (4, 2, 8, [["a", "b", "huge"]], "sparse"),
    (2, 2, 40, "auto", "ragged"),
    (8, 1, 6, [["b", "a"]], "dense"),
]


@pytest.mark.parametrize("devices,per_core,per_replica,stacking,fmt", CASES)
def test_counts_equal_brute_force(files, devices, per_core, per_replica, stacking, fmt):
    pipeline = tfinput.tfrecord(files, SCHEMA).with_multi_hot_format(fmt)
    stats = sparsecore_stats(
        pipeline,
        per_replica_batch_size=per_replica,
        devices=devices,
        sparsecores_per_device=per_core,
        stacking=stacking,
    )
    batch = per_replica * devices
    stacks = plan_stacks(
        SCHEMA,
        global_batch_size=batch,
        devices=devices,
        sparsecores_per_device=per_core,
        stacking=stacking,
    )
    want = _reference(
        _batches(files, batch),
        stacks,
        devices=devices,
        per_core=per_core,
        per_replica=per_replica,
    )
    assert stats.batches == 480 // batch and stats.complete
    assert [s.stack for s in stats.stacks] == list(stacks)
    for s in stats.stacks:
        got = np.stack([s.ids, s.unique, s.buffer], axis=1)
        np.testing.assert_array_equal(got, want[s.stack.name], err_msg=s.stack.name)
        assert s.partition_ids.shape == (devices * per_core,)
        assert s.partition_ids.max() == s.ids.max()
        assert s.partition_unique.max() == s.unique.max()


def test_every_format_counts_the_real_ids_and_no_padding(files):
    # Lists of 0-5 ids padded to 6: the dense format's padding (id 0, weight 0) is not
    # fed (the feed leaves entries of weight 0 out), so it counts as the others do.
    def observed(fmt: str) -> Limits:
        pipeline = tfinput.tfrecord(files, SCHEMA).with_multi_hot_format(fmt)
        stats = sparsecore_stats(pipeline, per_replica_batch_size=64, stacking="none")
        assert stats.multi_hot_format == fmt
        return stats.stack("m").observed

    dense, sparse, ragged = observed("dense"), observed("sparse"), observed("ragged")
    assert dense == sparse == ragged
    assert dense.max_ids_per_partition > 0


def test_shared_table_rows_of_each_feature_count_separately(tmp_path):
    # Two features on one table with the same id in every row: per slice, the ids are
    # one per feature row (no merging across features), the unique ids just one.
    schema = Schema(
        tables=(Table(name="t", vocabulary_size=10, dim=4),),
        features=(Categorical(name="p", table="t"), Categorical(name="q", table="t")),
    )
    import tensorflow as tf

    ids = {"p": tf.fill([32], 3), "q": tf.fill([32], 3)}
    ds = tf.data.Dataset.from_tensors(({"ids": ids}, tf.zeros([32]))).repeat(3)
    stats = sparsecore_stats(
        ds, schema=schema, per_replica_batch_size=16, devices=2, sparsecores_per_device=2
    )
    (s,) = stats.stacks
    assert list(s.ids) == [2 * 8] * 3  # 8 rows per slice, two features
    assert list(s.unique) == [1] * 3
    assert s.buffer[0] == 1 + 16  # one partition holds 16 ids (a multiple of 8)
    assert list(s.partition_ids) == [0, 0, 0, 16]  # id 3 lives in partition 3 of 4


def test_limits_margin_overflow_and_configs(files):
    pipeline = tfinput.tfrecord(files, SCHEMA)
    stats = sparsecore_stats(pipeline, per_replica_batch_size=32, devices=2, margin=0.5)
    for s in stats.stacks:
        observed, suggested = s.observed, s.limits(0.5)
        assert suggested.max_ids_per_partition >= observed.max_ids_per_partition * 1.5
        assert suggested.max_ids_per_partition % 8 == 0
        assert suggested.required_buffer_size_per_sc >= observed.required_buffer_size_per_sc
        # Exactly the observed maxima: nothing overflows; one less: the batches at the max.
        assert s.overflow(observed).over_any == 0
        tight = s.overflow(
            Limits(
                observed.max_ids_per_partition - 1,
                observed.max_unique_ids_per_partition,
                0,
            )
        )
        assert tight.over_ids == int((s.ids == observed.max_ids_per_partition).sum()) > 0
        assert tight.worst_ids == 1 and tight.over_unique == 0
        assert "batches overflow" in str(tight)
    table_limits = stats.table_limits()
    assert set(table_limits) == {t.name for t in SCHEMA.tables}
    for s in stats.stacks:  # stacked tables share their stack's limits
        assert len({table_limits[t] for t in s.stack.tables}) == 1
    # By name: a table's limit applies to its stack.
    (report,) = stats.overflows({"m": 1})
    assert report.stack == "m" and report.over_any == stats.batches
    with pytest.raises(ConfigError, match="unknown stacks or tables"):
        stats.overflows({"nope": 1})
    assert all(o.over_any == 0 for o in stats.overflows(KERAS_RS_DEFAULT_LIMIT))
    payload = stats.to_dict()
    assert payload["examples"] == stats.batches * 64 and payload["complete"] is True
    assert payload["stacks"][0]["suggested"]["max_ids_per_partition"] > 0

    assert stats.coo_buffer_bytes(8192) == 8192 * 4 * 8 * 12
    import tensorflow as tf

    if not hasattr(tf.tpu.experimental.embedding, "SparseCoreEmbeddingConfig"):
        with pytest.raises(ConfigError, match=r"needs TensorFlow 2\.18"):
            stats.tf_config()
        return
    tf_config = stats.tf_config(allow_id_dropping=False)
    limits = stats.limits()
    assert tf_config.max_ids_per_table == {n: v.max_ids_per_partition for n, v in limits.items()}
    assert tf_config.disable_table_stacking is False  # auto stacked a, b and huge together


def test_apply_writes_keras_rs_table_configs(files):
    keras_rs = pytest.importorskip("keras_rs", reason="keras-rs needs Python >= 3.11")
    stats = sparsecore_stats(tfinput.tfrecord(files, SCHEMA), per_replica_batch_size=64)
    tables = {
        t.name: keras_rs.layers.TableConfig(
            name=t.name, vocabulary_size=t.vocabulary_size, embedding_dim=t.dim
        )
        for t in SCHEMA.tables
    }
    applied = stats.apply(tables)
    for name, cfg in applied.items():
        assert (cfg.max_ids_per_partition, cfg.max_unique_ids_per_partition) == (
            stats.table_limits()[name]
        )
        assert tables[name].max_ids_per_partition == KERAS_RS_DEFAULT_LIMIT  # copies
    configs, features = tfinput.keras_rs_configs(SCHEMA, per_replica_batch_size=64, limits=stats)
    for name, cfg in configs.items():
        assert (cfg.max_ids_per_partition, cfg.max_unique_ids_per_partition) == (
            stats.table_limits()[name]
        )
    assert features["y"].table is configs["b"]  # the shared table carries its stack's limits


def test_sample_says_what_it_can_miss(files):
    stats = sparsecore_stats(
        tfinput.tfrecord(files, SCHEMA), per_replica_batch_size=16, max_batches=5
    )
    assert stats.batches == 5 and not stats.complete
    assert "1/(n+1)" in stats.sampling_note and "16.67%" in stats.sampling_note
    full = sparsecore_stats(
        tfinput.tfrecord(files, SCHEMA), per_replica_batch_size=16, max_batches=30
    )
    assert full.batches == 30 and full.complete  # exactly the data's 30 batches
    assert "exact" in full.sampling_note


def test_plan_stacks_follows_keras_rs_auto_stacking():
    stacks = plan_stacks(SCHEMA, global_batch_size=64, devices=2, sparsecores_per_device=4)
    by_name = {s.name: s for s in stacks}
    # mean tables of width 8 stack together, in the order of their first feature's name
    # (u, v -> a; w -> b; z -> huge); the sum table stays alone.
    assert by_name["a_b_huge"].tables == ("a", "b", "huge")
    assert by_name["a_b_huge"].shifts == (0, 4, 0)  # rotated by 4 SparseCores, mod 8
    assert by_name["a_b_huge"].offsets == (0, 64, 64 + 1024)  # vocabularies padded to 8 * 8
    assert by_name["m"].tables == ("m",)
    # A big batch exceeds the 2 MiB activation limit: the group is split.
    big = plan_stacks(SCHEMA, global_batch_size=2**17, devices=1, sparsecores_per_device=1)
    assert sorted(s.tables for s in big) == [("a",), ("b",), ("huge",), ("m",)]
    alone = plan_stacks(SCHEMA, global_batch_size=64, devices=1, stacking="none")
    assert all(len(s.tables) == 1 and s.shifts == (0,) for s in alone)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"per_replica_batch_size": 16, "devices": 3}, "power of two"),
        ({"per_replica_batch_size": 10}, "multiple of 4"),
        ({"per_replica_batch_size": 0}, "positive int"),
        ({"per_replica_batch_size": 16, "margin": -1}, "margin"),
        ({"per_replica_batch_size": 16, "margin": float("nan")}, "margin: expected a finite"),
        ({"per_replica_batch_size": 16, "margin": float("inf")}, "margin: expected a finite"),
        ({"per_replica_batch_size": 16, "stacking": [["a", "nope"]]}, "no table 'nope'"),
        ({"per_replica_batch_size": 16, "stacking": [["a", "m"]]}, "different combiners"),
        ({"per_replica_batch_size": 16, "stacking": [["a"], ["a", "b"]]}, "more than one"),
        ({"per_replica_batch_size": 16, "stacking": "some"}, "stacking"),
        ({"per_replica_batch_size": 4096}, "no full batch"),
    ],
)
def test_bad_arguments(files, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        sparsecore_stats(tfinput.tfrecord(files, SCHEMA), **kwargs)


def test_dataset_needs_schema(files):
    ds = tfinput.tfrecord(files, SCHEMA).build(PipelineConfig(batch_size=16))
    with pytest.raises(ConfigError, match="schema="):
        sparsecore_stats(ds, per_replica_batch_size=16)
    stats = sparsecore_stats(ds, schema=SCHEMA, per_replica_batch_size=16)
    direct = sparsecore_stats(tfinput.tfrecord(files, SCHEMA), per_replica_batch_size=16)
    assert [dataclasses.asdict(s.observed) for s in stats.stacks] == [
        dataclasses.asdict(s.observed) for s in direct.stacks
    ]
