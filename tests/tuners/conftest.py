"""Shared by the tuner tests: the tuned pipeline, one real `tune` run, the CLI arguments,
and deterministic fakes (a workload on a fake clock) that need no timing."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import tempfile

import optuna
import pytest

import tfinput
from tfinput.config import PipelineConfig
from tuners._options import TuneOptions
from tuners._space import SearchSpace
from tuners._study import tune
from tuners._trials import is_duplicate

# The format advice (a roofline, a conversion, a side-by-side measurement) and the gain
# by knob have their own tests; the other tune() tests leave them out. One confirmation
# round (a fresh iterator per config and round): the verdict's spread over rounds has
# its own tests (the fake clock's `FAKE_PLAN`, the CLI's ``--confirm-windows 2``).
FAST = {"windows": 2, "window_batches": 2, "warmup_batches": 1, "confirm_top": 1}
FAST.update(confirm_windows=1, advise_format=False, breakdown=False)


def options(**fields):
    """A `TuneOptions` with each of ``fields`` (flat field names, as `FAST` writes them)
    set on the group that has a field of that name."""
    groups = {}
    for group in dataclasses.fields(TuneOptions):
        kind = type(getattr(TuneOptions(), group.name))
        names = {f.name for f in dataclasses.fields(kind)}
        groups[group.name] = kind(**{k: fields.pop(k) for k in list(fields) if k in names})
    assert not fields, f"no TuneOptions field: {sorted(fields)}"
    return TuneOptions(**groups)


#: Trials of `tuned`: its three baselines and one searched config.
TUNED_TRIALS = 4


@pytest.fixture
def pipeline(small_tfrecord, small_schema):
    return tfinput.tfrecord(small_tfrecord, small_schema)


@pytest.fixture
def base():
    return PipelineConfig(batch_size=50)


@pytest.fixture(scope="session")
def tuned(small_tfrecord, small_schema, tmp_path_factory):
    """One real `tune` of the shared TFRecord pipeline (`TUNED_TRIALS`, a current config,
    `FAST` measurements, no format advice, no breakdown): ``(pipeline, current, result)``.
    Tests that only read a tune result share it."""
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    base = PipelineConfig(batch_size=50)
    current = base.replace(map_parallelism=2, prefetch=1)
    result = tune(
        pipeline,
        n_trials=TUNED_TRIALS,
        base=base,
        current=current,
        options=options(
            cpu_count=2, seed=1, lock_path=str(tmp_path_factory.mktemp("tuned") / "lock"), **FAST
        ),
    )
    return pipeline, current, result


@pytest.fixture
def cli_args(small_tfrecord, tmp_path, small_schema, monkeypatch):
    """``tfinput tune`` arguments for the shared TFRecord files with short measurements.

    The command's host lock lives in the temporary directory: this test's own (also for
    the workers it starts), so tuner runs elsewhere on the host never make it wait."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    schema = tmp_path / "schema.json"
    small_schema.to_json(schema)
    return [
        *small_tfrecord,
        *("--schema", schema, "--batch-size", "50", "--windows", "2"),
        *("--window-batches", "2", "--warmup-batches", "1", "--confirm-top", "1"),
        *("--confirm-windows", "2", "--no-format-advice"),
    ]


def tune_seeded(
    pipeline, tmp_path, *, n_trials, step=None, space=None, base=None, current=None, **fields
):
    """`tune` on 2 cores with a seeded random sampler and a one-window confirmation of
    the best config, without the format advice and the gain by knob (as `FAST`);
    ``fields`` (of `TuneOptions`' groups) add the measurement and override the rest."""
    given = dict(
        cpu_count=2,
        confirm_top=1,
        confirm_windows=1,
        advise_format=False,
        breakdown=False,
        sampler=optuna.samplers.RandomSampler(seed=0),
        lock_path=str(tmp_path / "lock"),
    )
    return tune(
        pipeline,
        step=step,
        space=space,
        base=base,
        current=current,
        n_trials=n_trials,
        options=options(**{**given, **fields}),
    )


def assert_measured_once(trials):
    """No config measured twice among ``trials``, by the config each recorded, and by
    params (Optuna's) among the searched trials (a baseline is measured as the user has
    it: its knobs outside the space may differ from those of a searched trial with its
    params); every duplicate names a measured trial with its params."""
    measured = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    configs = [json.dumps(t.user_attrs["config"], sort_keys=True) for t in measured]
    searched = [t for t in measured if "baseline" not in t.user_attrs]
    params = [json.dumps(t.params, sort_keys=True) for t in searched]
    assert len(set(params)) == len(params) and len(set(configs)) == len(configs), params
    by_number = {t.number: t for t in trials}
    for t in trials:
        if is_duplicate(t):
            assert by_number[t.user_attrs["duplicate_of"]].params == t.params
            assert "median_examples_per_s" not in t.user_attrs  # not measured


@contextlib.contextmanager
def small_disk(path, size):
    """A real file system of ``size`` (``mount``'s form: ``1m``, ``8m``) mounted at
    ``path`` (a tmpfs): writes past it fail with "No space left on device". Yields
    None where this process may not mount one (not root, no mount privilege)."""
    path.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]
    try:
        subprocess.run(mount, check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        yield None
        return
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


# ------------------------------------------- deterministic fakes (no timing)
class FakeClock:
    """Wall and CPU clock that only the fake step moves: every measurement is exact."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


#: `FakeWorkload.tune`'s measurement: four windows of two batches, the best two confirmed.
FAKE_PLAN = dict(windows=4, window_batches=2, warmup_batches=1, confirm_top=2, confirm_windows=2)


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

    def tune(
        self,
        *,
        n_trials,
        step=None,
        space=None,
        base=None,
        current=None,
        timeout=None,
        progress=None,
        verbose=True,
        **fields,
    ):
        """`tune` of this workload on its clock; ``fields`` (of `TuneOptions`' groups)
        override `FAKE_PLAN` and the rest."""
        given = dict(
            cpu_count=2,
            **FAKE_PLAN,
            clock=self.clock,
            cpu_clock=lambda: 0.0,
            sampler=optuna.samplers.RandomSampler(seed=0),
        )
        return tune(
            self,
            step=step or self.step,
            base=base or PipelineConfig(batch_size=100, drop_remainder=True),
            space=space or SearchSpace(choices={"map_parallelism": (1, 2, 3, 4)}),
            current=current,
            n_trials=n_trials,
            timeout=timeout,
            options=options(**{**given, **fields}),
            progress=progress or self.progress,
            verbose=verbose,
        )


def rate_by_parallelism(config):
    """map_parallelism 1 is a clear loser; every other value is a near-tie."""
    return {1: 80_000.0, 2: 250_000.0, 3: 255_000.0, 4: 256_000.0}.get(
        config.map_parallelism, 252_000.0
    )


def config_stats(name, ratio, low, high, *, stall=0.0, config=None):
    """A confirmed config's `tfinput._src.measurement.compare.ConfigStats`: median ``1000 * ratio``
    examples/s, per-round ratios to autotune from ``low`` to ``high``."""
    from tfinput._src.measurement.compare import ConfigStats

    return ConfigStats(
        name=name,
        config=config or PipelineConfig(),
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


#: The winner of `tune_result`.
BEST = PipelineConfig(batch_size=50, prefetch=4)


def tune_result(**fields):
    """A `TuneResult` built by hand (no study): ``trial 3`` (`BEST`) confirmed at 1.5x
    autotune; ``fields`` override."""
    from tuners._result import TuneResult

    values = dict(
        best_config=BEST,
        best_name="trial 3",
        confirmed=(
            config_stats("trial 3", 1.5, 1.2, 1.8, config=BEST, stall=0.123456),
            config_stats("autotune", 1.0, 1.0, 1.0),
        ),
        study_name="s",
        trials={"complete": 4, "pruned": 1},
        seconds={"search": 10.0, "confirm": 2.0},
        fingerprint={"cpu_count": 2},
        method={"trial": "windows"},
        step={"kind": "input_only", "name": "input only"},
        space={"prefetch": [1, 4]},
    )
    return TuneResult(**{**values, **fields})
