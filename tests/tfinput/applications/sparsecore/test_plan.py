"""`SparseCorePlan`'s limits: `with_limits` and `from_schema` refuse, naming the stack,
its tables and the field, every statistic or limit jax-tpu-embedding would abort the
process on at the next batch (a C++ check) or silently ignore; the refusal comes before
any batch reaches jax-tpu-embedding, and the plan it was asked of is unchanged. What the
plan feeds is checked against jax-tpu-embedding itself in test_feed.py."""

from __future__ import annotations

import numpy as np
import pytest

import tfinput
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError

pytest.importorskip(
    "jax_tpu_embedding",
    reason="jax-tpu-embedding is not installed (pip install 'tfinput[sparsecore]': wheels "
    "for CPython 3.12+ on x86-64 Linux)",
)

from jax_tpu_embedding.sparsecore.lib.nn import embedding

from tfinput.sparsecore import LimitsExceeded, SparseCorePlan

BATCH = 64
DEVICES = 2
SC = 4
#: The stacks of small_schema with stacking="none": one per table.
STACKS = ("items", "tokens", "user")


@pytest.fixture(scope="module")
def plan(small_schema):
    return _plan(small_schema)


@pytest.fixture(scope="module")
def batch(small_tfrecord, small_schema):
    config = PipelineConfig(batch_size=BATCH, deterministic=True)
    ds = tfinput.tfrecord(small_tfrecord, small_schema).build(config)
    features, _ = next(ds.as_numpy_iterator())
    return features


def _plan(schema, **kw):
    return SparseCorePlan.from_schema(
        schema,
        batch_size=BATCH,
        local_device_count=DEVICES,
        num_sc_per_device=SC,
        stacking="none",
        **kw,
    )


def _stats(ids, unique, buffer=None, *, stacks=STACKS):
    """jax-tpu-embedding's statistics with the same counts (as given) for each of
    ``stacks``."""
    kw = {
        "max_ids_per_partition": dict.fromkeys(stacks, ids),
        "max_unique_ids_per_partition": dict.fromkeys(stacks, unique),
    }
    if buffer is not None:
        kw["required_buffer_size_per_sc"] = dict.fromkeys(stacks, buffer)
    return embedding.SparseDenseMatmulInputStats(**kw)


def _limits(plan):
    """``stack -> (max ids, max unique ids, COO buffer per device)``."""
    out = {}
    for f in plan.feature_specs.values():
        s = f.table_spec.stacked_table_spec
        out[s.stack_name] = (
            s.max_ids_per_partition,
            s.max_unique_ids_per_partition,
            s.suggested_coo_buffer_size_per_device,
        )
    return out


ITEMS = r"stack 'items' \(tables items\)"


@pytest.mark.parametrize(
    "stats,kw,match",
    [
        (None, {}, r"expected jax-tpu-embedding's SparseDenseMatmulInputStats .*got NoneType"),
        (
            {"items": (64, 64)},
            {},
            r"expected jax-tpu-embedding's SparseDenseMatmulInputStats .*got dict; limits "
            r"per table go to SparseCorePlan\.from_schema\(limits=.*"
            r"stacks and their tables: items: items; tokens: tokens; user: user",
        ),
        (_stats(8, 8, stacks=()), {}, r"the statistics are empty \(they name no stack\)"),
        (_stats([], []), {}, ITEMS + r": max_ids_per_partition is empty"),
        (
            _stats(0, 0, 0),
            {"shrink": True},
            r"the statistics count no id in any stack \(items, tokens",
        ),
        (_stats(-5, -5), {"shrink": True}, ITEMS + r": max_ids_per_partition: expected coun"),
        (_stats(np.nan, 3), {}, ITEMS + r": max_ids_per_partition: .* got NaN or infinity"),
        (_stats(16, np.inf), {}, ITEMS + r": max_unique_ids_per_partition: .* NaN or infinity"),
        (_stats(16.5, 8), {}, ITEMS + r": max_ids_per_partition: expected whole numbers, got f"),
        (_stats(["16"], [8]), {}, ITEMS + r": max_ids_per_partition: expected whole numbers"),
        (_stats([[1, 2], [3]], 8), {}, ITEMS + r": max_ids_per_partition: expected whole nu"),
        (_stats(2**40, 2**40), {}, ITEMS + r": max_ids_per_partition: 1,099,511,627,776 is be"),
        (_stats(8, 64), {"shrink": True}, ITEMS + r": max_unique_ids_per_partition 64 is abov"),
        (_stats(16, 8, 0), {}, ITEMS + r": required_buffer_size_per_sc 0 cannot hold the 16"),
        (
            embedding.SparseDenseMatmulInputStats(
                max_ids_per_partition={"items": np.asarray(8)}, max_unique_ids_per_partition={}
            ),
            {},
            ITEMS + r" has no max_unique_ids_per_partition in the statistics",
        ),
        (
            _stats(8, 8, stacks=("items_user",)),
            {},
            r"the statistics name stack\(s\) \['items_user'\]",
        ),
        (
            _stats(2**27, 8, stacks=("items",)),
            {},
            r"stack 'items' \(tables items\): max_ids_per_partition 161,061,280 makes a COO "
            r"buffer of 5,153,960,960 entries per device .* beyond jax-tpu-embedding's int32",
        ),
        (_stats(16, 8), {"margin": float("nan")}, r"margin must be a finite number >= 0"),
        (_stats(16, 8), {"margin": float("inf")}, r"margin must be a finite number >= 0"),
        (_stats(16, 8), {"margin": -0.5}, r"margin must be a finite number >= 0 .*got -0\.5"),
        (_stats(16, 8), {"margin": "0.2"}, r"margin must be a number >= 0, got '0\.2'"),
        (_stats(16, 8), {"margin": 1e300}, ITEMS + r": max_ids_per_partition 16 times 1 \+ ma"),
        (_stats(16, 8), {"shrink": "yes"}, r"shrink must be True or False, got 'yes'"),
    ],
    ids=[
        "None",
        "limits per table",
        "no stack",
        "empty counts",
        "all zero",
        "negative",
        "NaN",
        "infinite",
        "fraction",
        "strings",
        "ragged",
        "2^40",
        "unique above ids",
        "buffer 0",
        "one limit",
        "another stacking",
        "buffer beyond int32",
        "margin NaN",
        "margin infinite",
        "margin negative",
        "margin string",
        "margin overflows",
        "shrink string",
    ],
)
def test_with_limits_refuses_what_would_abort_or_change_nothing(plan, batch, stats, kw, match):
    before = _limits(plan)
    with pytest.raises(ConfigError, match=f"^SparseCorePlan.with_limits: {match}"):
        plan.with_limits(stats, **kw)
    assert _limits(plan) == before  # unchanged, and still feeds
    plan.preprocess(batch, batch_number=0)


def test_a_stack_with_no_id_gets_the_smallest_limits_and_batches_never_abort(plan, batch):
    # "user" counted nothing (a stack whose batches had no id): its limits become the
    # smallest, 8, not 0 (a limit or buffer of 0 aborts the process at the next batch).
    # Its batches then need more: the plan refuses them with LimitsExceeded.
    stats = embedding.SparseDenseMatmulInputStats(
        max_ids_per_partition={"items": np.asarray([9, 3]), "user": np.asarray([0, 0])},
        max_unique_ids_per_partition={"items": np.asarray([5, 2]), "user": np.asarray([0, 0])},
        required_buffer_size_per_sc={"items": np.asarray([40, 8]), "user": np.asarray([0, 0])},
    )
    small = plan.with_limits(stats, margin=0.0, shrink=True)
    limits = _limits(small)
    assert limits["user"] == (8, 8, 8 * SC)
    assert limits["items"] == (16, 8, 40 * SC)  # rounded up to 8; the buffer as measured
    assert limits["tokens"] == _limits(plan)["tokens"]  # not named: as it was
    with pytest.raises(LimitsExceeded, match="SparseCore batch 0: table "):
        small.preprocess(batch, batch_number=0)


def test_limits_from_sparsecore_stats_fit_what_jax_tpu_embedding_takes(
    small_tfrecord, small_schema, plan, batch
):
    # from_schema(limits=stats) and with_limits(stats) make the same limits and
    # buffers. "user" (one id per row, tables alone) needs a buffer the margin takes
    # past what its limit of 8 can fill: it is capped there (jax-tpu-embedding aborts
    # the process on a larger one, at the first batch).
    stats = tfinput.sparsecore_stats(
        tfinput.tfrecord(small_tfrecord, small_schema),
        per_replica_batch_size=BATCH // DEVICES,
        devices=DEVICES,
        sparsecores_per_device=SC,
        stacking="none",
        config=PipelineConfig(deterministic=True),
    )
    measured = _plan(small_schema, limits=stats)
    learnt = plan.with_limits(stats, margin=stats.margin, shrink=True)
    assert _limits(learnt) == _limits(measured)
    assert stats.stack("user").limits(stats.margin).required_buffer_size_per_sc * SC > 256
    assert _limits(measured)["user"] == (8, 8, 8 * SC * DEVICES * SC)  # 256: the most
    for p in (measured, learnt):
        _, needed = p.preprocess(batch, batch_number=0)
        assert not any(needed.id_drop_counters.values())


@pytest.mark.parametrize(
    "limits,match",
    [
        (
            {"items": (2**40, 2**40)},
            r"stack 'items' \(tables items\): max_ids_per_partition 1,099,511,627,776; "
            r"jax-tpu-embedding takes 1 to 2,147,483,647",
        ),
        (
            {"items": (2**27, 8)},
            r"stack 'items' \(tables items\): max_ids_per_partition 134,217,728 makes a COO "
            r"buffer of 4,294,967,296 entries per device \(the limit rounded up to 8, x 4 "
            r"SparseCores per device x 8 SparseCores\), beyond jax-tpu-embedding's int32 sizes",
        ),
        ({"items": (64, 128)}, r"limits for table 'items': .* with unique <= ids, got \(64, 1"),
        ({"nope": (8, 8)}, r"limits: unknown table\(s\) \['nope'\]; the schema's tables are"),
    ],
    ids=["2^40", "buffer beyond int32", "unique above ids", "unknown table"],
)
def test_from_schema_refuses_limits_jax_tpu_embedding_would_abort_on(small_schema, limits, match):
    with pytest.raises(ConfigError, match=match):
        _plan(small_schema, limits=limits)
