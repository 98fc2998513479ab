"""The tuner: search space, baselines, pruning, failures, resume, outputs, CLI."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time

import optuna
import pytest
import tensorflow as tf

import tfinput
from tfinput import steps
from tfinput.cli.demo import demo_pipeline
from tfinput.config import AUTOTUNE, PipelineConfig
from tfinput.errors import ConfigError
from tuners import space as tuners_space
from tuners.objective import measure
from tuners.report import write_outputs
from tuners.space import SearchSpace, parse_assignment
from tuners.study import baseline_configs, tune

# The format advice (a roofline, a conversion, a side-by-side measurement) and the gain
# by knob have their own tests; the other tune() tests leave them out.
FAST = dict(
    windows=2,
    window_batches=2,
    warmup_batches=1,
    confirm_top=1,
    confirm_windows=2,
    advise_format=False,
    breakdown=False,
)


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


def test_a_packed_winner_saves_its_layout_next_to_the_config(pipeline, base, tmp_path):
    def step(batch):  # per-feature batches cost 40 ms more: packed wins clearly
        if not tfinput.layout.is_packed(batch[0]):
            time.sleep(0.04)

    result = tune(
        pipeline,
        step=dataclasses.replace(steps.function_step(step), accepts_packed=True),
        n_trials=3,
        base=base,
        cpu_count=2,
        lock_path=str(tmp_path / "lock"),
        space=SearchSpace(choices={"layout": ("packed",), "prefetch": (1, 2)}),
        **FAST,
    )
    paths = write_outputs(result, tmp_path / "out")
    config = PipelineConfig.from_json(paths["best_config"])
    layout = json.loads(paths["best_config"].read_text())["packed_layout"]
    assert config.layout == "packed"
    assert layout == pipeline.packed_layout().to_dict()
    assert json.loads(paths["result"].read_text())["packed_layout"] == layout
    features, _ = next(iter(pipeline.build(config)))
    views = tfinput.layout.unpack(features, tfinput.layout.PackedLayout.from_dict(layout))
    assert views["ids"]["history"].shape == (50, 5)


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
    from tuners.pruning import NoiseAwarePruner

    study_pruner = NoiseAwarePruner(n_startup_trials=2, n_warmup_steps=0)
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
    # Batches of 800 rows run "out of memory" in the step, by construction (not by
    # timing): those trials fail with the reason and the study continues; only batch
    # 50 completes, so it wins whatever the load on the machine.
    from tfinput.bench import batch_rows

    def step(batch):
        if batch_rows(batch) == 800:
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating 800 rows")

    space = SearchSpace(choices={"batch_size": (50, 800), "map_parallelism": (1, 2)})
    result = tune(
        pipeline,
        step=step,
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
        sampler=optuna.samplers.RandomSampler(seed=0),
        pruner=optuna.pruners.NopPruner(),
    )
    trials = result.study.get_trials()
    fails = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    completed = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert fails and completed and result.best_config.batch_size == 50
    for t in fails:
        assert t.params["batch_size"] == 800
        assert "out of memory" in t.user_attrs["error"]
    assert all(t.params["batch_size"] == 50 for t in completed)
    assert len(trials) == 6, "failed trials count towards n_trials"


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
        "--no-format-advice",
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
    assert len(data["verdicts"]) == 2 and data["input_wait_source"] == "measured"
    assert data["format_advice"] is None  # --no-format-advice
    assert isinstance(data["breakdown"], list) and data["beats_autotune"] in (True, False)
    assert PipelineConfig.from_json(out_dir / "best_config.json").batch_size == 50
    assert (out_dir / "report.html").exists()


def test_cli_opt_out_flags():
    from tfinput.cli import build_parser

    args = build_parser().parse_args(["tune", "--demo", "--no-breakdown", "--no-format-advice"])
    assert args.no_breakdown and args.no_format_advice
    args = build_parser().parse_args(["tune", "--demo"])
    assert not args.no_breakdown and not args.no_format_advice


def test_demo_pipeline_is_generated_once(tmp_path):
    p1 = demo_pipeline(tmp_path, rows=3000)
    stamp = (tmp_path / "demo-criteo-like-3000-v1" / "_COMPLETE").stat().st_mtime
    p2 = demo_pipeline(tmp_path, rows=3000)
    assert p1.source.files() == p2.source.files() and len(p1.source.files()) == 8
    assert (tmp_path / "demo-criteo-like-3000-v1" / "_COMPLETE").stat().st_mtime == stamp


# ------------------------------------------- deterministic fakes (no timing)
class FakeClock:
    """Wall and CPU clock that only the fake step moves: every measurement is exact."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class FakeWorkload:
    """A pipeline ``config -> batches`` and a step, on a `FakeClock`.

    Each batch costs ``batch_size / rate(config)`` seconds of fake time, times a
    deterministic window-to-window wobble of up to ``wobble`` (the measured noise).
    The step can be made to raise: always, only on some configs, or only during the
    confirmation (armed by the ``confirm`` progress event).
    """

    def __init__(self, rate, *, wobble=0.05, fail=None):
        self.clock = FakeClock()
        self.rate = rate
        self.wobble = wobble
        self.fail = fail or (lambda batch: None)
        self.confirming = False
        self.steps = 0

    def __call__(self, config):
        def batches():
            i = 0
            while True:
                factor = 1.0 + self.wobble * [0.0, 1.0, -1.0, 0.5, -0.5][(i // 2) % 5]
                cost = config.batch_size / self.rate(config) * factor
                yield {"cost": cost, "config": config, "rows": config.batch_size}
                i += 1

        return batches()

    def step(self, batch):
        self.steps += 1
        self.fail(batch)
        self.clock.t += batch["cost"]

    def progress(self, event, info):
        if event == "confirm":
            self.confirming = True

    def tune(self, **kwargs):
        options = dict(
            step=self.step,
            base=PipelineConfig(batch_size=100, drop_remainder=True),
            space=SearchSpace(choices={"map_parallelism": (1, 2, 3, 4)}),
            cpu_count=2,
            windows=4,
            window_batches=2,
            warmup_batches=1,
            confirm_top=2,
            confirm_windows=2,
            clock=self.clock,
            cpu_clock=lambda: 0.0,
            progress=self.progress,
            sampler=optuna.samplers.RandomSampler(seed=0),
        )
        options.update(kwargs)
        return tune(self, **options)


def _rate_by_parallelism(config):
    # map_parallelism 1 is a clear loser; every other value is a near-tie.
    return {1: 80_000.0, 2: 250_000.0, 3: 255_000.0, 4: 256_000.0}.get(
        config.map_parallelism, 252_000.0
    )


class Runaway(BaseException):
    """Raised by a test step that ran far more often than the test allows (the study
    would otherwise never end); not caught by Optuna's ``catch=(Exception,)``."""


def _always_raise(limit=500):
    calls = []

    def fail(batch):
        calls.append(1)
        if len(calls) > limit:
            raise Runaway("the study did not stop")
        raise RuntimeError("device lost: the accelerator went away")

    return fail


@pytest.mark.parametrize(
    "storage", [None, "study.db", "study.log"], ids=["memory", "sqlite", "journal"]
)
def test_a_step_that_always_raises_ends_the_study_with_its_error(tmp_path, storage):
    from tuners.study import MAX_CONSECUTIVE_FAILURES, TrialsFailedError

    work = FakeWorkload(_rate_by_parallelism, fail=_always_raise())
    kwargs = {"lock_path": str(tmp_path / "lock"), "n_trials": 20}
    if storage:
        kwargs.update(storage=str(tmp_path / storage), study_name="always-fails")
    with pytest.raises(TrialsFailedError, match="device lost") as raised:
        work.tune(**kwargs)
    trials = raised.value.study.get_trials()
    assert len(trials) == MAX_CONSECUTIVE_FAILURES
    assert all(t.state == optuna.trial.TrialState.FAIL for t in trials)
    assert all("device lost" in t.user_attrs["error"] for t in trials)


def test_failed_trials_count_towards_n_trials_with_a_storage(tmp_path):
    def oom(batch):
        if batch["config"].map_parallelism == 3:
            raise MemoryError

    work = FakeWorkload(_rate_by_parallelism, fail=oom)
    result = work.tune(
        n_trials=8,
        storage=str(tmp_path / "s.db"),
        study_name="counted",
        lock_path=str(tmp_path / "lock"),
    )
    trials = result.study.get_trials()
    assert len(trials) == 8 and result.trials.get("fail")
    assert all(t.params["map_parallelism"] == 3 for t in trials if t.user_attrs.get("error"))


def test_too_many_failures_in_a_row_stop_the_search_with_a_warning(tmp_path):
    # Only the baselines (autotune, heuristic) work; every searched config fails.
    def fail(batch):
        if batch["config"].map_parallelism in (1, 2, 3, 4):
            raise RuntimeError("kernel not supported")

    work = FakeWorkload(_rate_by_parallelism, fail=fail)
    result = work.tune(
        n_trials=30,
        max_consecutive_failures=3,
        base=PipelineConfig(batch_size=100, drop_remainder=True),
        lock_path=str(tmp_path / "lock"),
        cpu_count=6,  # heuristic map_parallelism outside 1-4
    )
    assert len(result.study.get_trials()) < 30
    assert any(
        "3 failed trials in a row" in w and "kernel not supported" in w for w in result.warnings
    )
    assert result.confirmed  # the baselines were confirmed


def test_one_transient_error_in_the_confirmation_is_retried(tmp_path):
    failed = []

    def once_in_confirmation(batch):
        if work.confirming and not failed:
            failed.append(1)
            raise RuntimeError("transient: connection reset")

    work = FakeWorkload(_rate_by_parallelism, fail=once_in_confirmation)
    result = work.tune(n_trials=6, lock_path=str(tmp_path / "lock"))
    assert failed and result.confirmed and result.confirmation_error is None
    assert any("confirmation attempt 1 of 2 failed" in w for w in result.warnings)
    assert result.best_config.map_parallelism != 1


def test_a_failed_confirmation_reports_the_search_result(tmp_path):
    def in_confirmation(batch):
        if work.confirming:
            raise RuntimeError("device lost in confirmation")

    work = FakeWorkload(_rate_by_parallelism, fail=in_confirmation)
    result = work.tune(n_trials=6, lock_path=str(tmp_path / "lock"))
    assert result.confirmed == () and "device lost" in result.confirmation_error
    best = max(
        (t for t in result.study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE),
        key=lambda t: t.value,
    )
    assert result.best_config == PipelineConfig.from_dict(best.user_attrs["config"])
    paths = write_outputs(result, tmp_path / "out")
    data = json.loads(paths["result"].read_text())
    assert "device lost" in data["confirmation_error"] and data["ratio_vs_autotune"] is None
    assert PipelineConfig.from_json(paths["best_config"]) == result.best_config
    assert "not confirmed" in paths["report"].read_text()


def test_cli_a_step_that_always_raises_exits_with_its_error_and_writes_result_json(
    cli_args, capsys, tmp_path
):
    module = tmp_path / "broken_step.py"
    module.write_text("def step(batch):\n    raise RuntimeError('device lost: broken step')\n")
    out_dir = tmp_path / "out"
    code, _, err = _run(
        [
            "tune",
            *cli_args,
            "--n-trials",
            "3",
            "--step",
            "function",
            "--step-fn",
            f"{module}:step",
            "--out",
            str(out_dir),
        ],
        capsys,
    )
    assert code == 2 and "device lost: broken step" in err and "Traceback" not in err
    data = json.loads((out_dir / "result.json").read_text())
    assert len(data["trials_detail"]) == 3 and data["best_config"] is None
    assert all(t["state"] == "fail" for t in data["trials_detail"])


# ----------------------------------------------------------- no plotly
def test_report_without_plotly(cli_args, capsys, tmp_path, monkeypatch):
    for name in [m for m in list(sys.modules) if m.split(".")[0] == "plotly"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "plotly", None)
    out_dir = tmp_path / "out"
    code, _, err = _run(
        ["tune", *cli_args, "--n-trials", "3", "--out", str(out_dir)],
        capsys,
    )
    assert code == 0, err
    assert "Traceback" not in err and "pip install 'tfinput[plots]'" in err
    for name in ("best_config.json", "result.json", "report.html"):
        assert (out_dir / name).exists(), name
    html = (out_dir / "report.html").read_text()
    assert "pip install 'tfinput[plots]'" in html and "Best config" in html
    assert "Confirmed throughput" in html


# -------------------------------------------------------------- pruning
def _finished(study, rates, state=optuna.trial.TrialState.COMPLETE):
    reported = rates[:-1]  # `measure` reports every window but the last
    study.add_trial(
        optuna.trial.create_trial(
            state=state,
            value=None
            if state == optuna.trial.TrialState.PRUNED
            else sorted(rates)[len(rates) // 2],
            intermediate_values=dict(enumerate(reported)),
            user_attrs={"window_rates": list(rates)},
        )
    )


def _should_prune(study, rates):
    trial = study.ask()
    for i, r in enumerate(rates):
        trial.report(r, i)
    return trial.should_prune()


@pytest.fixture
def noisy_study():
    """Ten finished trials from 200k to 260k examples/s, windows +-8% (a busy host)."""
    from tuners.pruning import NoiseAwarePruner

    study = optuna.create_study(
        direction="maximize", pruner=NoiseAwarePruner(n_startup_trials=4, n_warmup_steps=1)
    )
    for k in range(10):
        m = 200_000 + k * 6_000
        _finished(study, [m, m * 1.08, m * 0.92, m * 1.04, m])
    return study


@pytest.mark.parametrize(
    "rates, pruned",
    [
        ([80_000, 81_000], True),  # a clear loser
        ([150_000, 160_000], True),  # below the bottom quarter by more than the noise
        ([256_000, 254_000], False),  # near the top
        ([205_000, 200_000], False),  # in the bottom quarter, but within the noise
        ([80_000], False),  # warm-up: one window is never enough
    ],
    ids=["clear-loser", "loser-beyond-noise", "near-top", "near-tie-in-noise", "warm-up"],
)
def test_pruner_prunes_clear_losers_and_keeps_near_ties(noisy_study, rates, pruned):
    assert _should_prune(noisy_study, rates) is pruned


def test_pruner_margin_follows_the_measured_spread():
    from tuners.pruning import NoiseAwarePruner

    def study_with(noise):
        study = optuna.create_study(direction="maximize", pruner=NoiseAwarePruner())
        for k in range(8):
            m = 200_000 + k * 5_000
            _finished(study, [m * (1 - noise), m * (1 + noise), m])
        return study

    quiet, noisy = study_with(0.01), study_with(0.15)
    # 190k is 10% under the bottom quarter (~211k): a loser on a quiet host; 23% under
    # it on a noisy one (~240k), yet a possible near-tie there (windows vary by 30%).
    assert _should_prune(quiet, [180_000, 190_000]) is True
    assert _should_prune(noisy, [180_000, 190_000]) is False
    _, margin = noisy.pruner.threshold(noisy, 1)
    assert margin == pytest.approx(0.30, rel=0.01)


def _pruned_in_a_noisy_study(pruner):
    """31 trials, true rates spread evenly from 100k to 260k examples/s in a fixed
    shuffled order, windows +-10%: how many does ``pruner`` prune?"""
    import random

    rates = [100_000 + k * (160_000 / 30) for k in range(31)]
    random.Random(0).shuffle(rates)
    study = optuna.create_study(direction="maximize", pruner=pruner)
    pruned = 0
    for k, m in enumerate(rates):
        noise = [1.0, 1.1, 0.9, 1.05, 0.95][k % 5]
        if _should_prune(study, [m * noise, m / noise]):
            pruned += 1
            study.tell(study.trials[-1].number, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(study.trials[-1].number, m)
    return pruned


def test_pruner_prunes_at_most_the_bottom_quarter_of_a_noisy_study():
    from tuners.pruning import NoiseAwarePruner

    # Optuna's PercentilePruner(25.0) keeps the *top* quarter when maximizing: the
    # rule the tuner used to have pruned most of such a study (22 of 31 in one).
    assert _pruned_in_a_noisy_study(optuna.pruners.PercentilePruner(25.0, 4, 1)) > 31 // 2
    pruned = _pruned_in_a_noisy_study(NoiseAwarePruner())
    assert 1 <= pruned <= 31 // 4


def test_default_pruner_keeps_near_ties_and_prunes_the_clear_loser(tmp_path):
    work = FakeWorkload(_rate_by_parallelism, wobble=0.05)
    result = work.tune(
        n_trials=16,
        current=PipelineConfig(batch_size=100, drop_remainder=True, map_parallelism=2),
        lock_path=str(tmp_path / "lock"),
    )
    trials = result.study.get_trials()
    started = trials[4:]  # after the pruner's startup trials
    losers = [t for t in started if t.params["map_parallelism"] == 1]
    near_ties = [t for t in trials if t.params["map_parallelism"] != 1]
    assert losers, "the sampler should try the slow value after the startup trials"
    assert all(t.state == optuna.trial.TrialState.PRUNED for t in losers)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in near_ties)
    assert result.best_config.map_parallelism == 4
    assert "measured" in result.method["pruning"] or "spread" in result.method["pruning"]


# --------------------------------------------- trials left RUNNING by dead workers
def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("storage", ["study.db", "study.log"], ids=["sqlite", "journal"])
def test_a_trial_left_running_by_a_dead_worker_is_failed_and_retried(tmp_path, storage):
    from tuners.study import make_storage

    work = FakeWorkload(_rate_by_parallelism)
    kwargs = dict(
        storage=str(tmp_path / storage), study_name="restart", lock_path=str(tmp_path / "lock")
    )
    work.tune(n_trials=4, **kwargs)
    # A worker (on this host) was killed mid-trial: its trial stays RUNNING, and the
    # restart comes well within the heartbeat grace period (or there is no heartbeat).
    study = optuna.load_study(study_name="restart", storage=make_storage(kwargs["storage"]))
    study.enqueue_trial({"map_parallelism": 3})
    victim = study.ask()
    choices = study.trials[0].distributions["map_parallelism"].choices
    assert victim.suggest_categorical("map_parallelism", choices) == 3
    victim.set_user_attr("worker", f"{socket.gethostname()}:{_dead_pid()}")
    study.enqueue_trial({"map_parallelism": 4})
    early = study.ask()  # killed before it suggested anything: retried as enqueued
    early.set_user_attr("worker", f"{socket.gethostname()}:{_dead_pid()}")
    alive = study.ask()  # a live process of this host (this one) is left alone
    alive.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
    other = study.ask()  # so is a process of another container with the same host name
    other.set_user_attr("worker", f"{socket.gethostname()}:{_dead_pid()}")
    other.set_user_attr("worker_pid_namespace", "pid:[1]")

    result = work.tune(n_trials=8, **kwargs)
    trials = {t.number: t for t in result.study.get_trials()}
    killed = trials[victim.number]
    assert killed.state == optuna.trial.TrialState.FAIL
    assert "died" in killed.user_attrs["error"]
    retries = [t for t in trials.values() if t.user_attrs.get("retried_from") == victim.number]
    assert len(retries) == 1 and retries[0].state.is_finished()
    assert retries[0].params == {"map_parallelism": 3}
    (early_retry,) = [
        t for t in trials.values() if t.user_attrs.get("retried_from") == early.number
    ]
    assert trials[early.number].state == optuna.trial.TrialState.FAIL
    assert early_retry.params == {"map_parallelism": 4}
    assert trials[alive.number].state == optuna.trial.TrialState.RUNNING
    assert trials[other.number].state == optuna.trial.TrialState.RUNNING
    killed_numbers = (victim.number, early.number)
    counted = [
        t for t in trials.values() if t.state.is_finished() and t.number not in killed_numbers
    ]
    assert len(counted) == 8, "the killed trials do not count; their retries do"


def test_cli_resumes_a_journal_study_whose_worker_was_killed(cli_args, capsys, tmp_path):
    # A real `tfinput tune` worker is killed mid-trial (SIGKILL: no cleanup); the
    # journal storage has no heartbeat, so only the restart can fail and retry it.
    import signal

    journal = str(tmp_path / "study.log")
    study_args = ["--storage", journal, "--study-name", "killed", "--n-trials", "4"]
    with open(tmp_path / "worker.log", "w") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tfinput.cli",
                "tune",
                *cli_args,
                *study_args,
                "--step",
                "simulated",
                "--device-time-ms",
                "500",  # every trial runs for seconds: it is caught RUNNING
                "--out",
                str(tmp_path / "killed"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    from tuners.study import make_storage

    victim = None
    try:
        deadline = time.monotonic() + 180
        while victim is None and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.1)
            try:
                study = optuna.load_study(study_name="killed", storage=make_storage(journal))
            except KeyError:
                continue
            for t in study.get_trials(deepcopy=False):
                if (
                    t.state == optuna.trial.TrialState.RUNNING
                    and t.user_attrs.get("worker", "").endswith(f":{worker.pid}")
                    and "config" in t.user_attrs  # measuring, not still suggesting
                ):
                    victim = t.number
        assert victim is not None, (tmp_path / "worker.log").read_text()
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=60)
    code, _, err = _run(
        [
            "tune",
            *cli_args,
            *study_args,
            "--step",
            "simulated",
            "--device-time-ms",
            "1",
            "--out",
            str(tmp_path / "resumed"),
        ],
        capsys,
    )
    assert code == 0, err
    study = optuna.load_study(study_name="killed", storage=make_storage(journal))
    trials = study.get_trials()
    assert optuna.trial.TrialState.RUNNING not in [t.state for t in trials]
    assert trials[victim].state == optuna.trial.TrialState.FAIL
    assert "died" in trials[victim].user_attrs["error"]
    retries = [t for t in trials if t.user_attrs.get("retried_from") == victim]
    assert len(retries) == 1 and retries[0].state.is_finished()
    assert retries[0].params == trials[victim].params


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
    ],
)
def test_space_feeding_knobs_follow_the_step_and_the_format(pipeline, step, fmt, expected):
    space = SearchSpace.for_pipeline(pipeline.with_multi_hot_format(fmt), cpu_count=2, step=step)
    feeding = {k: v for k, v in space.choices.items() if k in tuners_space.FEEDING}
    assert feeding == expected
    assert space.choices["map_parallelism"] == (AUTOTUNE, 1, 2, 3, 4)  # unchanged


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


def test_parse_assignment_of_layouts():
    assert parse_assignment("layout=packed,per_feature") == ("layout", ["packed", "per_feature"])
    assert parse_assignment("layout=none") == ("layout", [None])
    with pytest.raises(ConfigError, match=r"knob 'layout': 'columnar' is not one of"):
        parse_assignment("layout=columnar")
    assert parse_assignment("steps_per_execution=1,8") == ("steps_per_execution", [1, 8])


def test_baselines_feed_per_feature_one_step_per_call_without_device_prefetch(base):
    packed = base.replace(layout="packed", steps_per_execution=8, device_prefetch=2)
    for name, config in baseline_configs(packed, cpu_count=2).items():
        assert config.layout == "per_feature", name
        assert config.steps_per_execution == 1 and config.device_prefetch == 0, name
        assert config.batch_size == 50
    step = _step("keras_fit", accepts_packed=True)
    space = SearchSpace.default(cpu_count=2, multi_hot_format="dense", step=step)
    params = space.params(baseline_configs(base, cpu_count=2)["autotune"])
    assert params["layout"] == "per_feature" and params["steps_per_execution"] == 1


# ----------------------------------------------------------------- verdicts
def _stats(name, ratio, low, high, *, stall=0.0):
    from tfinput.bench import ConfigStats

    return ConfigStats(
        name=name,
        config=PipelineConfig(),
        windows=(),
        median=1000.0 * ratio,
        minimum=900.0,
        maximum=1100.0,
        cv=0.05,
        latency_p50_ms=1.0,
        latency_p99_ms=2.0,
        stall=stall,
        cores_busy=1.0,
        utilisation=0.5,
        peak_rss_mb=100.0,
        ratio=ratio,
        ratio_min=low,
        ratio_max=high,
    )


@pytest.mark.parametrize(
    "confirmed, beats, words",
    [
        ([_stats("trial 7", 1.3, 1.1, 1.5), _stats("autotune", 1.0, 1.0, 1.0)], True, "beats"),
        (
            [_stats("trial 7", 1.06, 0.96, 1.12), _stats("autotune", 1.0, 1.0, 1.0)],
            False,
            "keep autotune: trial 7's gain is within the noise (1.06x autotune, rounds "
            "0.96x-1.12x; the spread includes 1)",
        ),
        (
            [_stats("trial 7", 1.2, 1.0, 1.3), _stats("autotune", 1.0, 1.0, 1.0)],
            False,
            "keep autotune",
        ),
        (
            [_stats("autotune", 1.0, 1.0, 1.0), _stats("trial 2", 0.9, 0.8, 0.95)],
            False,
            "keep autotune: no config beat it",
        ),
        ([], None, "not confirmed"),
    ],
    ids=["spread-above-1", "spread-straddles-1", "spread-touches-1", "autotune-wins", "none"],
)
def test_beats_autotune_only_when_the_paired_spread_excludes_1(confirmed, beats, words):
    from tuners.advice import beats_autotune

    verdict, sentence = beats_autotune(confirmed)
    assert verdict is beats and words in sentence


@pytest.mark.parametrize(
    "wait, bound, words",
    [
        (0.01, False, "input is not your bottleneck: tuning it will not speed up training"),
        (0.029, False, "input is not your bottleneck"),
        (0.03, True, "waits for input 3%"),
        (0.4, True, "the input pipeline bounds training"),
        (None, None, "could not be measured"),
    ],
)
def test_input_verdict(wait, bound, words):
    from tuners.advice import input_verdict

    verdict, sentence = input_verdict(wait)
    assert verdict is bound and words in sentence
    assert input_verdict(0.5, input_only=True)[0] is None


def _rate_by_map_and_prefetch(config):
    # map_parallelism 4 doubles the rate, prefetch 4 adds half: known contributions.
    rate = 100_000.0
    rate *= 2.0 if config.map_parallelism == 4 else 1.0
    rate *= 1.5 if config.prefetch == 4 else 1.0
    return rate


def test_a_step_much_slower_than_the_input_is_told_input_is_not_the_bottleneck(tmp_path):
    from rich.console import Console

    from tuners.report import print_summary

    # The fake step takes all the (fake) time; fetching a batch takes none.
    work = FakeWorkload(_rate_by_parallelism, wobble=0.0)
    result = work.tune(n_trials=5, lock_path=str(tmp_path / "lock"), breakdown=False)
    assert result.input_wait == 0.0 and result.input_wait_source == "measured"
    assert result.input_bound is False and result.step_bound is None
    assert (
        "input is not your bottleneck: tuning it will not speed up training" in (result.verdicts[1])
    )
    console = Console(record=True, width=200)
    print_summary(result, console)
    text = console.export_text()
    assert "verdict: input is not your bottleneck" in text
    data = result.to_dict()
    assert data["input_bound"] is False and data["verdicts"] == list(result.verdicts)
    assert result.record()["verdicts"] == list(result.verdicts)


class LoopOwningWorkload:
    """Input that costs ``input_s`` of fake time per batch and a step that costs
    ``device_s`` and owns the loop (as ``model.fit``): its windows hide the input wait."""

    def __init__(self, *, input_s, device_s):
        self.clock = FakeClock()
        self.input_s, self.device_s = input_s, device_s

    def __call__(self, config):
        def batches():
            while True:
                self.clock.t += self.input_s
                yield {"rows": config.batch_size}

        return batches()

    def run(self, batch):
        self.clock.t += self.device_s

    def owner(self, source, *, batch_size, warmup_batches, windows, window_batches, **kw):
        import dataclasses

        from tfinput import bench

        it = iter(source)
        clocks = {"clock": self.clock, "cpu_clock": lambda: 0.0}
        bench.measure_window(it, batches=warmup_batches, step=self.run, **clocks)
        return [
            dataclasses.replace(
                bench.measure_window(
                    it, batches=window_batches, step=self.run, batch_size=batch_size, **clocks
                ),
                wait_seconds=None,
                round=i,
            )
            for i in range(windows)
        ]


def test_the_input_wait_of_a_loop_owning_step_comes_from_the_step_bound(tmp_path):
    work = LoopOwningWorkload(input_s=0.001, device_s=0.003)
    step = steps.Step(kind="function", name="fit-like", fn=work.run, run_windows=work.owner)
    result = tune(
        work,
        step=step,
        n_trials=2,
        base=PipelineConfig(batch_size=100, drop_remainder=True),
        space=SearchSpace(choices={"prefetch": (1, 2)}),
        cpu_count=2,
        clock=work.clock,
        cpu_clock=lambda: 0.0,
        lock_path=str(tmp_path / "lock"),
        **FAST,
    )
    assert result.confirmed[0].stall is None
    # fed: 100 rows / 4 ms = 25,000/s; the step alone: 100 rows / 3 ms = 33,333/s
    assert result.step_bound == pytest.approx(100 / 0.003)
    assert result.input_wait == pytest.approx(0.25)
    assert result.input_wait_source == "step bound" and result.input_bound is True
    data = result.to_dict()
    assert data["step_bound_examples_per_s"] == pytest.approx(33333.3)


# -------------------------------------------------------------- gain by knob
def test_the_gain_is_broken_down_by_knob_group(tmp_path):
    work = FakeWorkload(_rate_by_map_and_prefetch, wobble=0.02)
    best = PipelineConfig(batch_size=100, drop_remainder=True, map_parallelism=4, prefetch=4)
    kwargs = dict(
        n_trials=4,
        current=best,
        space=SearchSpace(choices={"map_parallelism": (1, 4), "prefetch": (1, 4)}),
        lock_path=str(tmp_path / "lock"),
    )
    result = work.tune(**kwargs)
    assert result.best_name == "current" and result.beats_autotune is True
    assert "current beats autotune beyond the noise (3.00x autotune" in result.verdicts[0]
    by_group = {c.group: c for c in result.breakdown}
    assert set(by_group) == {"tf.data threading", "buffering"}
    assert by_group["tf.data threading"].knobs == {"map_parallelism": (4, AUTOTUNE)}
    assert by_group["buffering"].knobs == {"prefetch": (4, AUTOTUNE)}
    assert by_group["tf.data threading"].ratio == pytest.approx(2.0, rel=0.05)
    assert by_group["buffering"].ratio == pytest.approx(1.5, rel=0.05)
    assert [c.group for c in result.breakdown] == ["tf.data threading", "buffering"]
    paths = write_outputs(result, tmp_path / "out")
    data = json.loads(paths["result"].read_text())
    assert [b["group"] for b in data["breakdown"]] == ["tf.data threading", "buffering"]
    assert data["breakdown"][0]["knobs"] == {
        "map_parallelism": {"winner": 4, "autotune": "autotune"}
    }
    html = paths["report"].read_text()
    assert "Gain by knob" in html and "Verdict" in html and "beats autotune" in html

    assert work.tune(**kwargs, breakdown=False).breakdown == ()


def test_knob_groups_revert_together():
    from tuners.advice import differing_groups

    auto = baseline_configs(PipelineConfig(batch_size=64), cpu_count=2)["autotune"]
    winner = auto.replace(
        map_parallelism=3,
        interleave_cycle_length=2,
        deterministic=True,  # the same pipeline as autotune's deterministic
        layout="packed",
        steps_per_execution=8,
        batch_size=128,
    )
    groups = differing_groups(winner, auto)
    assert list(groups) == ["tf.data threading", "batch_size", "layout", "steps_per_execution"]
    assert groups["tf.data threading"] == {
        "interleave_cycle_length": (2, AUTOTUNE),
        "map_parallelism": (3, AUTOTUNE),
    }
    assert differing_groups(auto.replace(layout=None), auto) == {}  # None: the pipeline's own


# ------------------------------------------------------------ format advice
def test_format_advice_measures_a_columnar_sample_and_its_command_converts(
    pipeline, small_schema, tmp_path
):
    import shlex

    from tfinput import cli
    from tuners.advice import format_advice

    schema_path = tmp_path / "schema.json"
    small_schema.to_json(schema_path)
    out_dir = tmp_path / "converted"
    advice = format_advice(
        pipeline,
        PipelineConfig(batch_size=50),
        schema_path=str(schema_path),
        out_dir=str(out_dir),
        windows=2,
        window_batches=3,
        warmup_batches=1,
        require_parse_bound=False,
        cpu_count=2,
    )
    assert len(advice.sample_files) == 2 and advice.rows == 500
    assert advice.tf_example_examples_per_s > 0 and advice.columnar_examples_per_s > 0
    assert 0 < advice.ratio_min <= advice.ratio <= advice.ratio_max  # per-round ratios
    assert set(advice.signal["cost_us_per_example"]) == {"read", "parse", "transform", "total"}
    assert not any(os.path.exists(p) for p in [advice.sample_files[0] + "-columnar"])
    args = shlex.split(advice.command)
    assert args[:2] == ["tfinput", "convert"] and args[-2:] == ["--out", str(out_dir)]
    assert "--to" in args and args[args.index("--to") + 1] == "columnar"
    assert "convert with: tfinput convert" in advice.sentence()
    assert cli.main(args[1:]) == 0
    converted = tfinput.columnar(str(out_dir))
    rows = sum(int(b[1].shape[0]) for b in converted.build(PipelineConfig(batch_size=100)))
    assert rows == 1000


def test_format_advice_only_for_tf_example(small_parquet, small_schema):
    from tuners.advice import format_advice

    parquet = tfinput.parquet(small_parquet, small_schema)
    assert format_advice(parquet, PipelineConfig(batch_size=50)) is None


def test_tune_reports_the_format_advice_unless_opted_out(pipeline, base, tmp_path):
    common = dict(n_trials=2, base=base, cpu_count=2, lock_path=str(tmp_path / "lock"))
    fast = {k: v for k, v in FAST.items() if k != "advise_format"}
    assert fast["breakdown"] is False
    off = tune(pipeline, **common, **fast, advise_format=False)
    assert off.format_advice is None and off.to_dict()["format_advice"] is None
    on = tune(pipeline, **common, **fast, schema_path="schema.json")
    if on.format_advice is None:  # parse was measured not to be the bound here
        assert not any("format advice not measured" in w for w in on.warnings)
    else:
        assert on.format_advice.parse_bound
        assert on.format_advice.sentence() in on.advice
        assert "--schema schema.json" in on.to_dict()["format_advice"]["command"]


def test_fingerprint_records_the_keras_backend_and_jax(pipeline, base, tmp_path):
    from tuners.study import fingerprint

    fp = fingerprint(2)
    assert fp["keras_backend"] in ("tensorflow", "jax", "torch", "numpy")
    if "jax" in sys.modules:
        assert fp["jax"] == sys.modules["jax"].__version__
    else:
        assert fp["jax"] is None
