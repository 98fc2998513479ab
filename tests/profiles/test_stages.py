"""profiles._stages (with the private _trace_events and _stage_tree modules): tf.data stage
self times and the bottleneck, from iterator events.

Hand-built traces check the arithmetic exactly (times in microseconds); captured traces
of pipelines with a deliberately slow stage check that the analysis names that stage.
"""

from __future__ import annotations

import pytest

from profiles import _stages as stages
from profiles._testing import cached_capture
from profiles._trace_events import fold_path
from profiles._xplane import find_trace, load_xspace, xspace_class

# ------------------------------------------------------------------ trace builder


def it(path, start, end, iid, parent=None, **params):
    stats = {"id": iid, "name": params.pop("name", f"{path.rsplit('::', 1)[-1]}Dataset:{iid}")}
    if parent is not None:
        stats["parent_id"] = parent
    stats.update(params)
    return ("Iterator::" + path, start, end, stats)


def ev(name, start, end, **stats):
    return (name, start, end, stats)


def make_space(*threads):
    """An XSpace with one /host:CPU plane; each thread is a list of (name, start_us,
    end_us, stats) events."""
    space = xspace_class()()
    plane = space.planes.add(id=1, name="/host:CPU")
    events: dict[str, int] = {}
    stats: dict[str, int] = {}

    def md(table, ids, name):
        if name not in ids:
            ids[name] = len(ids) + 1
            table[ids[name]].id = ids[name]
            table[ids[name]].name = name
        return ids[name]

    for n, thread in enumerate(threads):
        line = plane.lines.add(id=n + 1, name=f"thread-{n}", timestamp_ns=1_000)
        for name, start, end, event_stats in thread:
            e = line.events.add(
                metadata_id=md(plane.event_metadata, events, name),
                offset_ps=int(start * 1e6),
                duration_ps=int((end - start) * 1e6),
            )
            for key, value in event_stats.items():
                s = e.stats.add(metadata_id=md(plane.stat_metadata, stats, key))
                if isinstance(value, str):
                    s.ref_value = md(plane.stat_metadata, stats, value)
                else:
                    s.int64_value = value
    space.planes.add(id=2, name="Task Environment")
    return space


def only_pipeline(space):
    (pipeline,) = stages.rebuild_stages(space, host="test")
    return pipeline


# ------------------------------------------------------------- exact arithmetic


def test_synchronous_chain_splits_wait_by_nesting():
    space = make_space(
        [
            it("Root", 0, 100, 1),
            it("Root::Map", 5, 95, 2, parent=1),
            it("Root::Map::Range", 10, 20, 3, parent=2),
        ]
    )
    p = only_pipeline(space)
    assert p.root_calls == 1 and p.input_ms == pytest.approx(0.1)
    got = {s.kind: (round(s.self_ms * 1e3, 3), round(s.self_fraction, 3)) for s in p.stages}
    assert got == {"Root": (10, 0.1), "Map": (80, 0.8), "Range": (10, 0.1)}
    # Range took less of the wait (10 us) than Map itself (80 us): the path stops at Map.
    assert p.critical_path == ("Iterator::Root", "Iterator::Root::Map")
    assert p.bottleneck.display_name == "Map"
    assert p.bottleneck.knobs == ("map_parallelism",)
    assert p.bottleneck.summary.startswith("Map: self time 80%, sequential: parallelize the map")


def prefetched_map(*, produced, parallelism, untraced_call_first=False, **prefetch):
    """The pipeline of a root call 100..200 us waiting on a prefetch (``prefetch``: its
    traced settings), fed by a map on another thread that produced element 7 over
    ``produced`` (start, end); ``untraced_call_first`` adds an earlier root call whose
    element was produced before the trace began."""
    first_call = [
        it("Root", 0, 90, 1),
        it("Root::Prefetch", 1, 89, 2, parent=1, **prefetch),
        ev("PrefetchConsume", 88, 89, element_id=6),
    ]
    start, end = produced
    space = make_space(
        [
            *(first_call if untraced_call_first else []),
            it("Root", 100, 200, 1),
            it("Root::Prefetch", 102, 198, 2, parent=1, **prefetch),
            ev("PrefetchConsume", 197, 198, element_id=7),
        ],
        [
            ev("PrefetchProduce", start, end, element_id=7),
            it(
                "Root::Prefetch::ParallelMapV2",
                start + 1,
                end - 1,
                3,
                parent=2,
                parallelism=parallelism,
            ),
        ],
    )
    return only_pipeline(space)


def test_async_producer_is_charged_only_while_the_consumer_waits():
    p = prefetched_map(produced=(80, 190), parallelism=1, buffer_limit=1)
    by_kind = {s.kind: s for s in p.stages}
    # The map ran 81..189; the consumer waited 102..198: 87 us of the wait are the map's.
    assert by_kind["ParallelMapV2"].self_ms == pytest.approx(0.087)
    assert by_kind["ParallelMapV2"].busy_ms == pytest.approx(0.108)
    assert by_kind["Prefetch"].self_ms == pytest.approx(0.009)
    assert by_kind["Root"].self_ms == pytest.approx(0.004)
    assert p.bottleneck.stage == "Iterator::Root::Prefetch::ParallelMapV2"
    assert p.bottleneck.summary == (
        "ParallelMapV2: self time 87%, parallelism 1: raise map parallelism (map_parallelism)"
    )


def test_element_produced_ahead_is_off_the_critical_path():
    p = prefetched_map(produced=(20, 60), parallelism=4, buffer_limit=2)
    mapped = p.stage("ParallelMapV2")
    assert mapped.calls == 1 and mapped.critical_calls == 0 and mapped.self_ms == 0
    assert mapped.busy_ms == pytest.approx(0.038)
    assert p.bottleneck.display_name == "Prefetch"
    assert set(p.bottleneck.knobs) == {"prefetch", "private_threadpool_size"}


def test_call_waiting_on_untraced_production_is_skipped():
    p = prefetched_map(produced=(80, 190), parallelism=1, untraced_call_first=True)
    assert (p.root_calls, p.skipped_root_calls) == (1, 1)
    assert p.stage("Prefetch").self_ms == pytest.approx(0.009)
    assert p.stage("Prefetch").calls == 2


def test_interleave_elements_fold_into_one_stage_controlled_by_the_interleave():
    interleave = dict(cycle_length=1, parallelism=1, name="ParallelInterleaveDatasetV4:2")
    space = make_space(
        [
            it("Root", 0, 100, 1),
            it("Root::ParallelInterleaveV4", 2, 98, 2, parent=1, **interleave),
            ev("ParallelInterleaveConsume", 97, 98, element_id=5),
            it("Root", 100, 200, 1),
            it("Root::ParallelInterleaveV4", 102, 198, 2, parent=1, **interleave),
            ev("ParallelInterleaveConsume", 197, 198, element_id=6),
        ],
        [
            ev("ParallelInterleaveProduce", 1, 96, element_id=5),
            it("Root::ParallelInterleaveV4[0]::TFRecord", 2, 95, 3, parent=2),
            ev("ParallelInterleaveProduce", 100, 196, element_id=6),
            it("Root::ParallelInterleaveV4[1]::TFRecord", 101, 195, 4, parent=2),
        ],
    )
    p = only_pipeline(space)
    reader = p.stage("TFRecord")
    assert reader.path == "Iterator::Root::ParallelInterleaveV4[*]::TFRecord"
    assert reader.calls == 2 and reader.critical_calls == 2 and reader.slow_calls == 2
    assert p.critical_path[-1] == reader.path
    assert p.bottleneck.display_name == "TFRecord"
    assert p.bottleneck.knobs == ("interleave_cycle_length", "interleave_parallelism")
    assert "cycle_length 1, parallelism 1" in p.bottleneck.setting


def test_function_ops_label_an_unnamed_map():
    space = make_space(
        [
            it("Root", 100, 200, 1),
            it("Root::ParallelMapV2", 101, 199, 2, parent=1, parallelism=2),
            ev("ParallelMapConsume", 198, 199, element_id=3),
        ],
        [
            ev("ParallelMapProduce", 90, 110, element_id=3),
            it("Root::ParallelMapV2::Range", 91, 92, 3, parent=2),
            ev("FunctionRun", 93, 94, _p=9, _pt=2),
        ],
        [
            ev("ExecutorState::Process", 95, 190, _c=9, _ct=2),
            ev("ParseExampleV2:ParseExampleV2", 96, 180),
            ev("Cast:Cast", 181, 185),
        ],
    )
    p = only_pipeline(space)
    mapped = p.stage("ParallelMapV2")
    assert mapped.label == "ParseExampleV2"
    assert mapped.display_name == "ParallelMapV2 (ParseExampleV2)"
    assert mapped.function_ms == pytest.approx(0.088)
    assert mapped.function_ops[0] == ("ParseExampleV2", pytest.approx(0.084))
    # The input was read before the wait: the whole wait is the map's.
    assert mapped.self_ms == pytest.approx(0.098)


@pytest.mark.parametrize(
    ("dataset_op", "label"),
    [
        ("parse", "parse"),
        ("fused(parse,BatchDatasetV2:3)", "parse"),
        ("ParallelMapDatasetV2:1", ""),
        ("fused(ParallelMapDatasetV2:2,BatchDatasetV2:3)", ""),
    ],
    ids=["named", "named-fused", "auto", "auto-fused"],
)
def test_label_prefers_the_users_name(dataset_op, label):
    space = make_space(
        [
            it("Root", 0, 100, 1),
            it("Root::ParallelMapV2", 1, 99, 2, parent=1, name=dataset_op, parallelism=1),
        ]
    )
    assert only_pipeline(space).stage("ParallelMapV2").label == label


@pytest.mark.parametrize(
    ("name", "folded"),
    [
        ("Iterator::Root::Zip[0]::Map", "Iterator::Root::Zip[0]::Map"),
        ("Iterator::Root::FlatMap[3]::TFRecord", "Iterator::Root::FlatMap[*]::TFRecord"),
        (
            "Iterator::Root::ParallelInterleaveV4[12]::FlatMap[0]::TFRecord",
            "Iterator::Root::ParallelInterleaveV4[*]::FlatMap[*]::TFRecord",
        ),
    ],
    ids=["zip-input-kept", "flat-map-element", "nested-interleave"],
)
def test_element_indices_are_folded_but_input_positions_kept(name, folded):
    assert fold_path(name) == folded


def test_trace_without_iterator_events_has_no_pipelines():
    space = make_space([ev("train", 0, 100, step_num=1, _r=1)])
    assert stages.rebuild_stages(space, host="test") == ()


def test_slow_call_threshold_is_configurable():
    space = make_space([it("Root", 0, 100, 1), it("Root::Map", 1, 99, 2, parent=1)])
    (default,) = stages.rebuild_stages(space, host="t")
    (strict,) = stages.rebuild_stages(space, host="t", slow_call_us=200)
    assert default.stage("Map").slow_calls == 1 and strict.stage("Map").slow_calls == 0
    assert default.slow_root_calls == 1 and strict.slow_root_calls == 0


# ------------------------------------------------------ known answers on real traces


@pytest.fixture(scope="module")
def slow_map_stages(slow_map_logdir):
    trace = find_trace(slow_map_logdir)
    x = load_xspace(trace.paths[0])
    return stages.rebuild_stages(x.space, host=x.host)


@pytest.fixture(scope="module")
def small_interleave_stages():
    trace = find_trace(cached_capture("small_interleave"))
    x = load_xspace(trace.paths[0])
    return stages.rebuild_stages(x.space, host=x.host)


def test_slow_map_is_named_with_its_knob(slow_map_stages):
    main = slow_map_stages[0]
    b = main.bottleneck
    assert b.stage == "Iterator::Root::Prefetch::ParallelMapV2"
    assert b.display_name == "ParallelMapV2 (parse)"
    assert b.knobs == ("map_parallelism",)
    assert b.setting == "parallelism 1"
    assert b.significant
    assert b.summary.startswith("ParallelMapV2 (parse): self time ")
    assert b.summary.endswith(", parallelism 1: raise map parallelism (map_parallelism)")
    assert b.self_fraction > 0.5
    assert main.critical_path[-1] == b.stage
    parse = main.stage("ParallelMapV2")
    assert parse.calls >= main.root_calls and parse.slow_calls >= 1
    assert parse.function_ops and parse.function_ops[0][0] == "PyFunc"


def test_small_interleave_is_named_with_its_knob(small_interleave_stages):
    main = small_interleave_stages[0]
    b = main.bottleneck
    # Reading is charged to the TFRecord reader; on a starved CPU, time the interleave's
    # worker spends between reads goes to the interleave itself. Either way the knobs
    # are the interleave's.
    assert b.display_name in ("TFRecord", "ParallelInterleaveV4")
    assert b.knobs == ("interleave_cycle_length", "interleave_parallelism")
    assert "cycle_length 1, parallelism 1" in b.setting
    assert "raise interleave_cycle_length and interleave_parallelism" in b.summary
    by_interleave = sum(
        s.self_fraction for s in main.stages if "interleave_cycle_length" in s.knobs
    )
    assert by_interleave > 0.6
    reader = main.stage("TFRecord")
    assert reader.path.endswith("ParallelInterleaveV4[*]::FlatMap[*]::TFRecord")
    assert reader.calls >= 4 * main.root_calls  # four records per batch


def test_results_are_json_ready(slow_map_stages):
    import json

    data = json.loads(json.dumps(slow_map_stages[0].to_dict()))
    assert data["bottleneck"]["knobs"] == ["map_parallelism"]
    assert {s["kind"] for s in data["stages"]} >= {"Root", "Prefetch", "ParallelMapV2"}


def test_many_cheap_calls_are_reported_as_per_element_cost():
    calls = [it("Root", 0, 2000, 1)]
    for k in range(100):
        calls.append(it("Root::ParallelInterleaveV4", 10 + 19 * k, 25 + 19 * k, 2, parent=1))
    p = only_pipeline(make_space(calls))
    assert p.bottleneck.display_name == "ParallelInterleaveV4"
    assert "the cost is per element (100 calls per batch, 15 µs each)" in p.bottleneck.summary
    assert "one thread handles every element here" in p.bottleneck.summary


def test_stage_results_are_stage_timings_under_one_name():
    """No alias: deprecations start with the first release (docs/api.md)."""
    import profiles

    p = only_pipeline(make_space([it("Root", 0, 100, 1), it("Root::Map", 1, 99, 2, parent=1)]))
    assert all(isinstance(s, profiles.StageTiming) for s in p.stages)
    assert "StageTiming" in profiles.__all__ and not hasattr(profiles, "Stage")
