"""The tuner: search space, baselines, pruning, failures, resume, outputs, CLI."""

from __future__ import annotations

import json
import time

import optuna
import pytest
import tensorflow as tf

import tfinput
from tfinput import steps
from tfinput._demo import demo_pipeline
from tfinput.config import AUTOTUNE, PipelineConfig
from tfinput.errors import ConfigError
from tuners.objective import measure
from tuners.report import write_outputs
from tuners.space import SearchSpace, parse_assignment
from tuners.study import baseline_configs, tune

FAST = dict(windows=2, window_batches=2, warmup_batches=1, confirm_top=1, confirm_windows=2)


@pytest.fixture
def pipeline(small_tfrecord):
    from tfinput import testing

    return tfinput.tfrecord(small_tfrecord, testing.small_schema())


@pytest.fixture
def base():
    return PipelineConfig(batch_size=50)


# ----------------------------------------------------------------- space
def test_default_space_follows_the_cpu_count():
    space = SearchSpace.default(cpu_count=2, files=8)
    assert space.choices["map_parallelism"] == (AUTOTUNE, 1, 2, 3, 4)
    assert space.choices["interleave_cycle_length"] == (AUTOTUNE, 1, 2, 4, 8)
    assert "cache" not in space.choices and "batch_size" not in space.choices
    big = SearchSpace.default(cpu_count=16, files=4)
    assert max(big.choices["map_parallelism"]) == 32
    assert max(big.choices["interleave_cycle_length"]) == 4  # never more than the files
    with_cache = SearchSpace.default(cpu_count=2, data_bytes=10**6, ram_bytes=10**9)
    assert with_cache.choices["cache"] == (False, True)
    with_batch = SearchSpace.default(cpu_count=2, batch_size=4096, tune_batch_size=True)
    assert with_batch.choices["batch_size"] == (2048, 4096, 8192, 16384)


def test_space_for_pipeline_searches_cache_when_the_data_fit(pipeline):
    space = SearchSpace.for_pipeline(pipeline, cpu_count=2)
    assert space.choices["cache"] == (False, True)  # a few hundred KB
    assert space.choices["interleave_cycle_length"] == (AUTOTUNE, 1, 2, 4)  # 4 files


def test_fix_and_narrow():
    space = SearchSpace.default(cpu_count=2).fix(prefetch=2).narrow(map_parallelism=[2, 3])
    assert space.choices["prefetch"] == (2,) and "prefetch" not in space.searched
    assert space.searched["map_parallelism"] == (2, 3)


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


# ------------------------------------------------------------- objective
def test_measure_windows_and_early_stop(pipeline, base):
    m = measure(pipeline, base, steps.input_only(), windows=3, window_batches=2, warmup_batches=1)
    assert len(m.rates) == 3 and m.median > 0 and not m.stopped_early
    assert set(m.to_attrs()) >= {"median_examples_per_s", "cv", "window_rates"}
    stopped = measure(
        pipeline, base, windows=3, window_batches=2, warmup_batches=1, report=lambda i, rate: True
    )
    assert stopped.stopped_early and len(stopped.rates) == 1


def test_measure_with_an_injected_clock(pipeline, base):
    ticks = iter(range(10_000))
    m = measure(
        pipeline,
        base,
        windows=2,
        window_batches=3,
        warmup_batches=1,
        clock=lambda: float(next(ticks)),
        cpu_clock=lambda: 0.0,
    )
    # each batch takes two ticks (fetch, then step end): 3 batches x 50 examples / 6 s
    assert m.rates == (25.0, 25.0)


# ------------------------------------------------------------------- tune
def test_baselines_come_first_and_result_is_confirmed(pipeline, base, tmp_path):
    current = base.replace(map_parallelism=2, prefetch=1)
    result = tune(
        pipeline,
        n_trials=5,
        base=base,
        current=current,
        cpu_count=2,
        seed=1,
        lock_path=str(tmp_path / "lock"),
        **FAST,
    )
    trials = result.study.get_trials()
    assert [t.user_attrs.get("baseline") for t in trials[:3]] == [
        "autotune",
        "heuristic",
        "current",
    ]
    assert PipelineConfig.from_dict(trials[2].user_attrs["config"]) == current
    names = {c.name for c in result.confirmed}
    assert {"autotune", "current"} <= names
    assert result.confirmed[0].median == max(c.median for c in result.confirmed)
    auto = next(c for c in result.confirmed if c.name == "autotune")
    assert auto.ratio == 1.0
    assert result.fingerprint["cpu_count"] == 2 and result.fingerprint["tensorflow"]
    assert sum(result.trials.values()) == 5


def test_outputs_load_into_build(pipeline, base, tmp_path):
    result = tune(
        pipeline, n_trials=3, base=base, cpu_count=2, lock_path=str(tmp_path / "lock"), **FAST
    )
    paths = write_outputs(result, tmp_path / "out")
    config = PipelineConfig.from_json(paths["best_config"])
    assert config == result.best_config
    saved = json.loads(paths["best_config"].read_text())
    assert saved["fingerprint"]["cpu_model"] and "trial" in saved["method"]
    ds = pipeline.build(config)
    assert next(iter(ds))[0]["ids"]["history"].shape == (50, 5)
    html = paths["report"].read_text()
    assert "<html" in html and "plotly" in html.lower() and "Best config" in html
    data = json.loads(paths["result"].read_text())
    assert len(data["trials_detail"]) == 3 and data["format"] == "tfinput.tune/1"


class SlowMapPipeline:
    """A real tf.data pipeline whose map costs 30 ms per batch with map_parallelism 1
    and 0.3 ms otherwise: a known answer for pruning."""

    def build(self, config):
        delay = 0.03 if config.map_parallelism == 1 else 0.0003

        def slow(x):
            return tf.numpy_function(lambda v: (time.sleep(delay), v)[1], [x], tf.int64)

        ds = tf.data.Dataset.range(10**6).batch(config.batch_size, drop_remainder=True)
        return ds.map(slow)


def test_clearly_worse_trials_are_pruned(base, tmp_path):
    space = SearchSpace(choices={"map_parallelism": (1, 2)})
    slow = SlowMapPipeline()
    study_pruner = optuna.pruners.PercentilePruner(25.0, n_startup_trials=2, n_warmup_steps=0)
    result = tune(
        slow,
        n_trials=8,
        base=base,
        space=space,
        cpu_count=2,
        # the user's current config is the slow one: the third trial, after two baselines
        current=base.replace(map_parallelism=1),
        sampler=optuna.samplers.RandomSampler(seed=0),
        pruner=study_pruner,
        windows=4,
        window_batches=3,
        warmup_batches=1,
        confirm_top=1,
        confirm_windows=1,
        lock_path=str(tmp_path / "lock"),
    )
    trials = result.study.get_trials()
    slow_trials = [t for t in trials[2:] if t.params.get("map_parallelism") == 1]
    assert slow_trials, "the sampler should try the slow value at least once"
    assert all(t.state == optuna.trial.TrialState.PRUNED for t in slow_trials)
    assert all(len(t.intermediate_values) < 4 for t in slow_trials)
    assert result.best_config.map_parallelism != 1


def test_failed_trials_are_recorded_and_the_study_goes_on(pipeline, tmp_path):
    # 1000 rows: batch 50 works, batch 400 works, batch 800 leaves too few batches
    # for the warm-up: those trials fail with the reason and the study continues.
    space = SearchSpace(choices={"batch_size": (50, 800), "map_parallelism": (1, 2)})
    result = tune(
        pipeline,
        n_trials=6,
        base=PipelineConfig(batch_size=50, drop_remainder=True),
        space=space,
        cpu_count=2,
        windows=2,
        window_batches=2,
        warmup_batches=2,
        confirm_top=1,
        confirm_windows=1,
        lock_path=str(tmp_path / "lock"),
        pruner=optuna.pruners.NopPruner(),
    )
    ds_repeat_fails = [
        t for t in result.study.get_trials() if t.state == optuna.trial.TrialState.FAIL
    ]
    completed = [
        t for t in result.study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE
    ]
    assert completed and result.best_config.batch_size == 50
    for t in ds_repeat_fails:
        assert t.params["batch_size"] == 800
        assert t.user_attrs.get("error")


def test_resume_from_a_storage_file(pipeline, base, tmp_path):
    storage = str(tmp_path / "study.db")
    kwargs = dict(
        base=base,
        cpu_count=2,
        storage=storage,
        study_name="resume",
        lock_path=str(tmp_path / "lock"),
        **FAST,
    )
    first = tune(pipeline, n_trials=3, **kwargs)
    assert sum(first.trials.values()) == 3
    second = tune(pipeline, n_trials=5, **kwargs)
    trials = second.study.get_trials()
    assert len(trials) == 5, "two more trials, baselines not enqueued again"
    assert [t.user_attrs.get("baseline") for t in trials].count("autotune") == 1
    journal = tune(
        pipeline,
        n_trials=3,
        **{**kwargs, "storage": str(tmp_path / "j.log"), "study_name": "journal"},
    )
    assert sum(journal.trials.values()) == 3


def test_storage_errors():
    from tuners.study import make_storage

    with pytest.raises(ConfigError, match="expected a postgresql:// or sqlite:/// URL"):
        make_storage("mongodb://x")
    with pytest.raises(ConfigError, match=r"directory .* does not exist"):
        make_storage("/nonexistent/dir/study.db")


# -------------------------------------------------------------------- CLI
def _run(args, capsys):
    code = tuners_cli_main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def tuners_cli_main(args):
    from tfinput import cli

    return cli.main(args)


@pytest.fixture
def cli_args(small_tfrecord, tmp_path, small_schema):
    schema = tmp_path / "schema.json"
    small_schema.to_json(schema)
    return [
        *small_tfrecord,
        "--schema",
        str(schema),
        "--batch-size",
        "50",
        "--windows",
        "2",
        "--window-batches",
        "2",
        "--warmup-batches",
        "1",
        "--confirm-top",
        "1",
        "--confirm-windows",
        "2",
    ]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--narrow", "speed=1,2"], "unknown knob 'speed'"),
        (["--narrow", "map_parallelism="], "empty range"),
        (["--fix", "prefetch=1,2"], "give one value"),
        (["--n-trials", "0"], "--n-trials must be >= 1"),
        (
            ["--storage", "postgresql://nobody@127.0.0.1:1/none", "--study-name", "x"],
            "cannot open storage",
        ),
        (["--storage", "x.db"], "--storage needs --study-name"),
        (["--step", "simulated"], "needs --device-time-ms"),
    ],
    ids=[
        "unknown-knob",
        "empty-range",
        "fix-two-values",
        "zero-trials",
        "unreachable-storage",
        "storage-without-name",
        "simulated-without-time",
    ],
)
def test_cli_bad_arguments(cli_args, capsys, extra, message):
    code, _, err = _run(["tune", *cli_args, *extra], capsys)
    assert code == 2 and message in err and "Traceback" not in err


def test_cli_needs_exactly_one_pipeline(capsys):
    code, _, err = _run(["tune"], capsys)
    assert code == 2 and "give exactly one pipeline" in err


def test_cli_tune_end_to_end(cli_args, capsys, tmp_path):
    out_dir = tmp_path / "out"
    code, out, err = _run(
        [
            "tune",
            *cli_args,
            "--n-trials",
            "3",
            "--step",
            "simulated",
            "--device-time-ms",
            "1",
            "--out",
            str(out_dir),
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["step"]["kind"] == "simulated" and data["confirmed"]
    assert PipelineConfig.from_json(out_dir / "best_config.json").batch_size == 50
    assert (out_dir / "report.html").exists()


def test_demo_pipeline_is_generated_once(tmp_path):
    p1 = demo_pipeline(tmp_path, rows=3000)
    stamp = (tmp_path / "demo-criteo-like-3000-v1" / "_COMPLETE").stat().st_mtime
    p2 = demo_pipeline(tmp_path, rows=3000)
    assert p1.source.files() == p2.source.files() and len(p1.source.files()) == 8
    assert (tmp_path / "demo-criteo-like-3000-v1" / "_COMPLETE").stat().st_mtime == stamp
