"""`tuners._space`: the search space (defaults for the machine and the step, narrowing,
errors), ``KNOB=V1,V2`` assignments, and the round trip through Optuna trials."""

from __future__ import annotations

import json
import random

import optuna
import pytest

from tfinput import steps
from tfinput.config import AUTOTUNE
from tfinput.errors import ConfigError
from tuners import _space as tuners_space
from tuners._search import baseline_configs
from tuners._space import SearchSpace, nearest_unmeasured, parse_assignment


def test_default_space_follows_the_cpu_count():
    space = SearchSpace.default(cpu_count=2, files=8)
    assert space.choices["map_parallelism"] == (AUTOTUNE, 1, 2, 3, 4)
    assert space.choices["interleave_cycle_length"] == (AUTOTUNE, 1, 2, 4, 8)
    assert "cache" not in space.choices and "batch_size" not in space.choices
    big = SearchSpace.default(cpu_count=16, files=4)
    assert max(big.choices["map_parallelism"]) == 32
    assert max(big.choices["interleave_cycle_length"]) == 4  # never more than the files
    fits = {"data_bytes": 10**6, "ram_bytes": 10**9}
    assert "cache" not in SearchSpace.default(cpu_count=2, **fits).choices  # opt-in
    with_cache = SearchSpace.default(cpu_count=2, tune_cache=True, **fits)
    assert with_cache.choices["cache"] == (False, True)
    too_big = SearchSpace.default(cpu_count=2, tune_cache=True, data_bytes=10**9, ram_bytes=10**9)
    assert "cache" not in too_big.choices
    with_batch = SearchSpace.default(cpu_count=2, batch_size=4096, tune_batch_size=True)
    assert with_batch.choices["batch_size"] == (2048, 4096, 8192, 16384)


def test_space_for_pipeline_searches_cache_when_asked_and_the_data_fit(pipeline):
    assert "cache" not in SearchSpace.for_pipeline(pipeline, cpu_count=2).choices
    space = SearchSpace.for_pipeline(pipeline, cpu_count=2, tune_cache=True)
    assert space.choices["cache"] == (False, True)  # a few hundred KB
    assert space.choices["interleave_cycle_length"] == (AUTOTUNE, 1, 2, 4)  # 4 files


def test_fix_and_narrow():
    space = SearchSpace.default(cpu_count=2).fix(prefetch=2).narrow(map_parallelism=[2, 3])
    assert space.choices["prefetch"] == (2,) and "prefetch" not in space.searched
    assert space.searched["map_parallelism"] == (2, 3)


def test_size_contains_and_to_dict(base):
    space = SearchSpace(choices={"map_parallelism": (AUTOTUNE, 2, 3), "prefetch": (1, 2)})
    assert space.size() == 6
    assert space.contains(base.replace(map_parallelism=2, prefetch=1))
    assert not space.contains(base.replace(map_parallelism=4, prefetch=1))
    assert space.to_dict() == {"map_parallelism": ["autotune", 2, 3], "prefetch": [1, 2]}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"speed": [1]}, "unknown knob 'speed'"),
        ({"map_parallelism": []}, "knob 'map_parallelism' has an empty range"),
        ({"prefetch": [-5]}, "prefetch: expected >= 0 or AUTOTUNE"),
    ],
    ids=["unknown-knob", "empty-range", "invalid-value"],
)
def test_space_errors(change, message):
    with pytest.raises(ConfigError, match=message):
        SearchSpace.default(cpu_count=2).narrow(**change)


def test_parse_assignment():
    assert parse_assignment("map_parallelism=autotune,2,3") == ("map_parallelism", [AUTOTUNE, 2, 3])
    assert parse_assignment("deterministic=false") == ("deterministic", [False])
    with pytest.raises(ConfigError, match="empty range"):
        parse_assignment("prefetch=")
    with pytest.raises(ConfigError, match="unknown knob 'nope'"):
        parse_assignment("nope=1")


@pytest.mark.parametrize(
    "text, message",
    [
        ("prefetch", "expected knob=value[,value...], got 'prefetch'"),
        ("prefetch=1,two", "knob 'prefetch': 'two' is not an int, true/false or autotune"),
    ],
    ids=["no-equals", "not-an-int"],
)
def test_parse_assignment_errors_name_the_text(text, message):
    with pytest.raises(ConfigError) as raised:
        parse_assignment(text)
    assert str(raised.value) == message


def test_parse_assignment_of_layouts():
    assert parse_assignment("layout=packed,per_feature") == ("layout", ["packed", "per_feature"])
    assert parse_assignment("layout=none") == ("layout", [None])
    with pytest.raises(ConfigError, match=r"knob 'layout': 'columnar' is not one of"):
        parse_assignment("layout=columnar")
    assert parse_assignment("steps_per_execution=1,8") == ("steps_per_execution", [1, 8])


def test_space_includes_the_baselines(base):
    space = SearchSpace(choices={"map_parallelism": (2, 3), "prefetch": (1,)})
    current = base.replace(map_parallelism=7, prefetch=5)
    wide = space.including(*baseline_configs(base, cpu_count=2, current=current).values())
    assert wide.choices["map_parallelism"] == (2, 3, AUTOTUNE, 7)
    assert wide.choices["prefetch"] == (1,), "fixed knobs stay fixed"


def test_suggest_and_params_round_trip(base):
    space = SearchSpace.default(cpu_count=2, files=4)
    study = optuna.create_study(direction="maximize")
    for name, config in baseline_configs(base, cpu_count=2).items():
        study.enqueue_trial(space.params(config))
        trial = study.ask()
        got = space.suggest(trial, base)
        for knob in space.searched:
            want = getattr(config, knob)
            # AUTOTUNE of these two builds the same pipeline as the value suggested
            if want == AUTOTUNE and knob in ("deterministic", "interleave_block_length"):
                want = {"deterministic": True, "interleave_block_length": 1}[knob]
            assert getattr(got, knob) == want, (name, knob)


def test_none_layouts_are_stored_and_suggested_cleanly(base):
    assert tuners_space.encode(None) == "none" and tuners_space.decode("none") is None
    space = SearchSpace(choices={"layout": (None, "packed"), "prefetch": (1, 2)})
    assert space.to_dict() == {"layout": ["none", "packed"], "prefetch": [1, 2]}
    assert space.params(base) == {"layout": "none"}  # base.layout is None
    study = optuna.create_study(direction="maximize")
    for layout in (None, "packed"):
        study.enqueue_trial(space.params(base.replace(layout=layout, prefetch=2)))
        config = space.suggest(study.ask(), base)
        assert config.layout == layout and config.prefetch == 2
    assert json.loads(json.dumps(study.trials[0].params)) == {"layout": "none", "prefetch": 2}


# ------------------------------------------------ feeding knobs in the space
def _step(kind, **fields):
    return steps.Step(kind=kind, name=kind, fn=lambda batch: None, **fields)


@pytest.mark.parametrize(
    "step, fmt, expected",
    [
        (None, "dense", {"layout": ("per_feature", "packed")}),
        (None, "ragged", {}),
        (_step("simulated", accepts_packed=True), "dense", {"layout": ("per_feature", "packed")}),
        (
            _step("keras_fit", accepts_packed=True),
            "dense",
            {"layout": ("per_feature", "packed"), "steps_per_execution": (1, 8, 32)},
        ),
        (_step("keras_fit"), "dense", {"steps_per_execution": (1, 8, 32)}),
        (_step("keras"), "sparse", {}),
        (_step("jax", feeds_device=True), "ragged", {"device_prefetch": (0, 2)}),
        (
            _step("keras_fit", feeds_device=True, accepts_packed=True),
            "dense",
            {
                "layout": ("per_feature", "packed"),
                "steps_per_execution": (1, 8, 32),
                "device_prefetch": (0, 2),
            },
        ),
        (
            _step("simulated", feeds_sparsecore=True),
            "dense",
            {"sparsecore_workers": (1, 2), "sparsecore_prefetch": (0, 2, 8)},
        ),
    ],
    ids=[
        "input-dense",
        "input-ragged",
        "simulated",
        "keras-fit-ranking",
        "keras-fit-own-model-not-packed",
        "keras-sparse",
        "jax-feeds-device",
        "keras-fit-on-jax",
        "feeds-sparsecore",
    ],
)
def test_space_feeding_knobs_follow_the_step_and_the_format(pipeline, step, fmt, expected):
    space = SearchSpace.for_pipeline(pipeline.with_multi_hot_format(fmt), cpu_count=2, step=step)
    feeding = {k: v for k, v in space.choices.items() if k in tuners_space.FEEDING}
    assert feeding == expected
    assert space.choices["map_parallelism"] == (AUTOTUNE, 1, 2, 3, 4)  # unchanged


def test_space_for_pipeline_leaves_out_the_knobs_its_source_ignores(pipeline_of):
    # a wrapped dataset has no files to interleave; pyarrow reads each Parquet file in
    # order, so the block length does nothing: trials spent on them measure noise
    interleave = {"interleave_cycle_length", "interleave_block_length", "interleave_parallelism"}
    wrapped = SearchSpace.for_pipeline(pipeline_of("wrapped"), cpu_count=2)
    assert not interleave & set(wrapped.choices) and "map_parallelism" in wrapped.searched
    parquet = SearchSpace.for_pipeline(pipeline_of("parquet"), cpu_count=2)
    assert "interleave_block_length" not in parquet.choices
    assert "interleave_cycle_length" in parquet.searched
    tfrecord = SearchSpace.for_pipeline(pipeline_of("tfrecord"), cpu_count=2)
    assert interleave <= set(tfrecord.searched)


def test_read_batch_is_searched_for_tfrecord_only(small_tfrecord, small_parquet, small_schema):
    import tfinput

    tfrecord = SearchSpace.for_pipeline(tfinput.tfrecord(small_tfrecord, small_schema))
    assert tfrecord.choices["read_batch"] == (0, 64, 256, 1024)
    parquet = SearchSpace.for_pipeline(tfinput.parquet(small_parquet, small_schema))
    assert "read_batch" not in parquet.choices  # ignored there: no trial wasted on it


# ------------------------------------------------- autotune.min_parallelism
def _has_min_parallelism():
    import tensorflow as tf

    version = tuple(int(p) for p in tf.__version__.split(".")[:2])
    return version >= (2, 20)


def test_min_parallelism_is_searched_where_tensorflow_has_it():
    from tfinput.config import AUTOTUNE
    from tuners._space import TUNABLE, has_min_parallelism

    space = SearchSpace.default(cpu_count=4)
    assert has_min_parallelism() is _has_min_parallelism()
    assert "autotune_min_parallelism" in TUNABLE
    if _has_min_parallelism():  # TensorFlow 2.20 and later
        assert space.choices["autotune_min_parallelism"] == (AUTOTUNE, 2, 4)
    else:  # the oldest supported TensorFlow has no such option
        assert "autotune_min_parallelism" not in space.choices


def test_min_parallelism_reaches_tf_data_options_or_is_ignored_with_a_warning(
    small_tfrecord, small_schema, caplog
):
    import tfinput
    from tfinput.config import PipelineConfig

    config = PipelineConfig(batch_size=50, autotune_min_parallelism=2)
    with caplog.at_level("WARNING", logger="tfinput"):
        ds = tfinput.tfrecord(small_tfrecord, small_schema).build(config)
    if _has_min_parallelism():
        assert ds.options().autotune.min_parallelism == 2
        assert not [r for r in caplog.records if "min_parallelism" in r.getMessage()]
    else:
        (record,) = [r for r in caplog.records if "min_parallelism" in r.getMessage()]
        assert record.getMessage().startswith("tfinput: autotune_min_parallelism=2 ignored:")
    with pytest.raises(ConfigError, match=r"autotune_min_parallelism: expected >= 1"):
        PipelineConfig(autotune_min_parallelism=0)


def test_nearest_unmeasured_changes_the_fewest_knobs_then_says_the_space_is_measured(base):
    space = SearchSpace(choices={"map_parallelism": (1, 2, 3), "prefetch": (1, 2)})
    rng = random.Random(0)
    taken = {(1, 1), (2, 1), (3, 1)}

    def is_taken(params):
        return (params["map_parallelism"], params["prefetch"]) in taken

    proposal = {"map_parallelism": 2, "prefetch": 1}
    found, exhausted = nearest_unmeasured(space, proposal, is_taken, rng)
    assert found == {"map_parallelism": 2, "prefetch": 2} and not exhausted  # one knob
    taken.add((2, 2))
    found, exhausted = nearest_unmeasured(space, proposal, is_taken, rng)
    assert found in ({"map_parallelism": 1, "prefetch": 2}, {"map_parallelism": 3, "prefetch": 2})
    taken.update({(1, 2), (3, 2)})
    assert nearest_unmeasured(space, proposal, is_taken, rng) == (None, True)
    config = space.config({"map_parallelism": 3}, base)
    assert (config.map_parallelism, config.prefetch, config.batch_size) == (3, base.prefetch, 50)
