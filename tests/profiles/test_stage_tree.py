"""profiles._stage_tree (its advice): which PipelineConfig knobs control a traced tf.data stage, its current
setting and what to change."""

from __future__ import annotations

import pytest

from profiles._stage_tree import advise, base_kind, is_batch_kind

_ADVICE_CASES = {
    "parallel-map-below-cores": (
        "ParallelMapV2",
        {"parallelism": "1"},
        (),
        ("map_parallelism",),
        "parallelism 1",
        "raise map parallelism",
    ),
    "parallel-map-at-cores": (
        "ParallelMapV2",
        {"parallelism": "2", "autotune": "true"},
        (),
        ("map_parallelism", "batch_size"),
        "parallelism 2 autotuned",
        "batch before parsing",
    ),
    "map-and-batch": (
        "MapAndBatch",
        {"parallelism": "1"},
        (),
        ("map_parallelism",),
        "parallelism 1",
        "raise map parallelism",
    ),
    "sequential-map": ("Map", {}, (), ("map_parallelism",), "sequential", "parallelize the map"),
    "autotuned-map-unknown": (
        "ParallelMapV2",
        {"autotune": "true"},
        (),
        ("map_parallelism",),
        "parallelism autotuned",
        "raise map parallelism",
    ),
    "parallel-interleave": (
        "ParallelInterleaveV4",
        {"cycle_length": "1", "parallelism": "1"},
        (),
        ("interleave_cycle_length", "interleave_parallelism"),
        "cycle_length 1, parallelism 1",
        "read more files concurrently",
    ),
    "interleave": (
        "Interleave",
        {"cycle_length": "2"},
        (),
        ("interleave_cycle_length", "interleave_parallelism"),
        "cycle_length 2, parallelism 1",
        "read more files concurrently",
    ),
    "tfrecord-in-interleave": (
        "TFRecord",
        {},
        (("FlatMap", {}), ("ParallelInterleaveV4", {"cycle_length": "1"})),
        ("interleave_cycle_length", "interleave_parallelism"),
        "read by ParallelInterleaveV4 with cycle_length 1, parallelism 1",
        "file reading is the bottleneck",
    ),
    "tfrecord-alone": (
        "TFRecord",
        {},
        (),
        ("interleave_cycle_length", "interleave_parallelism"),
        "files read one at a time",
        "read the files through an interleave",
    ),
    "flat-map-reading": (
        "FlatMap",
        {},
        (),
        ("interleave_cycle_length", "interleave_parallelism"),
        "files read one at a time",
        "read the files through an interleave",
    ),
    "prefetch": (
        "Prefetch",
        {"buffer_limit": "1"},
        (),
        ("prefetch", "private_threadpool_size"),
        "buffer 1",
        "raise prefetch",
    ),
    "batch": (
        "BatchV2",
        {"batch_size": "4096"},
        (),
        ("batch_size",),
        "batch_size 4096",
        "batch before parsing",
    ),
    "padded-batch": (
        "PaddedBatchV2",
        {"batch_size": "8"},
        (),
        ("batch_size",),
        "batch_size 8",
        "batch before parsing",
    ),
    "shuffle": (
        "ShuffleAndRepeat",
        {"buffer_size": "16"},
        (),
        ("shuffle_buffer",),
        "buffer_size 16",
        "lower shuffle_buffer",
    ),
    "cache": ("MemoryCache", {}, (), ("cache",), "", "first pass through the cache"),
    "intra-op": (
        "MaxIntraOpParallelism",
        {},
        (),
        ("max_intra_op_parallelism",),
        "",
        "max_intra_op_parallelism",
    ),
    "private-pool": (
        "PrivateThreadPool",
        {},
        (),
        ("private_threadpool_size",),
        "",
        "private_threadpool_size",
    ),
    "in-memory-source": ("Range", {}, (), (), "", "in-memory source"),
    "no-knob": ("Zip", {}, (), (), "", "no tfinput knob controls Zip"),
}


@pytest.mark.parametrize(
    ("kind", "params", "enclosing", "knobs", "setting", "advice"),
    list(_ADVICE_CASES.values()),
    ids=list(_ADVICE_CASES),
)
def test_advise_names_the_knob(kind, params, enclosing, knobs, setting, advice):
    got_knobs, got_setting, got_advice = advise(kind, params, enclosing=enclosing, cpu_budget=2)
    assert got_knobs == knobs
    assert got_setting == setting
    assert advice in got_advice


@pytest.mark.parametrize(
    ("input_batched", "advice"),
    [(False, "batch before parsing"), (True, "make the map itself cheaper")],
    ids=["per-element-map", "map-over-batches"],
)
def test_map_at_the_core_budget_advice_depends_on_batching(input_batched, advice):
    _, _, text = advise(
        "ParallelMapV2", {"parallelism": "2"}, cpu_budget=2, input_batched=input_batched
    )
    assert advice in text


@pytest.mark.parametrize(
    ("kind", "base"),
    [
        ("ParallelMapV2", "ParallelMap"),
        ("ParallelInterleaveV4", "ParallelInterleave"),
        ("Map", "Map"),
        ("TFRecord", "TFRecord"),
    ],
    ids=["map-v2", "interleave-v4", "unversioned", "no-suffix"],
)
def test_base_kind_drops_only_the_version_suffix(kind, base):
    assert base_kind(kind) == base


@pytest.mark.parametrize(
    ("kind", "batches"),
    [
        ("BatchV2", True),
        ("PaddedBatchV2", True),
        ("ParallelBatch", True),
        ("MapAndBatch", False),
        ("Prefetch", False),
    ],
    ids=["batch", "padded-batch", "parallel-batch", "map-and-batch", "prefetch"],
)
def test_is_batch_kind(kind, batches):
    assert is_batch_kind(kind) is batches


def test_reader_is_controlled_by_the_nearest_interleave_above_it():
    knobs, setting, _ = advise(
        "TFRecord",
        {},
        enclosing=(
            ("FlatMap", {}),
            ("ParallelInterleaveV4", {"cycle_length": "4", "parallelism": "2"}),
            ("InterleaveV2", {"cycle_length": "9"}),
        ),
    )
    assert knobs == ("interleave_cycle_length", "interleave_parallelism")
    assert setting == "read by ParallelInterleaveV4 with cycle_length 4, parallelism 2"


@pytest.mark.parametrize(
    ("cpu_budget", "knobs"),
    [
        (None, ("map_parallelism",)),
        (8, ("map_parallelism",)),
        (4, ("map_parallelism", "batch_size")),
    ],
    ids=["budget-unknown", "below-the-budget", "at-the-budget"],
)
def test_map_advice_depends_on_the_core_budget(cpu_budget, knobs):
    got_knobs, setting, text = advise("ParallelMapV2", {"parallelism": "4"}, cpu_budget=cpu_budget)
    assert got_knobs == knobs
    assert setting == "parallelism 4"
    if cpu_budget == 4:
        assert text.startswith("map already uses 4 threads on 4 cores")
    else:
        assert text == "raise map parallelism (map_parallelism)"


def test_unknown_settings_are_shown_as_question_marks():
    assert advise("Prefetch", {})[1] == "buffer ?"
    assert advise("ParallelInterleaveV4", {"autotune": "true"})[1] == (
        "cycle_length ?, parallelism 1 autotuned"
    )
    assert advise("ParallelMapV2", {})[1] == "parallelism not traced"


def test_the_parquet_reader_map_is_controlled_by_the_interleave_knobs():
    knobs, _, advice = advise("Map", {}, label="parquet_read")
    assert knobs == ("interleave_cycle_length", "interleave_parallelism")
    assert "Parquet reader" in advice and "--to columnar" in advice
    # Any other sequential map keeps the map advice.
    assert advise("Map", {}, label="parse")[0] == ("map_parallelism",)
