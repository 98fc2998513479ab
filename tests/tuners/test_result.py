"""`tuners._result`: what `tune` returns and records (`TuneResult` as JSON, the
fingerprint of the machine, how every number was measured, whether the best config
resumes exactly after a restart)."""

from __future__ import annotations

import collections
import json
import sys

import optuna
import pytest

from tests.tuners.conftest import BEST, tune_result
from tfinput import steps
from tfinput._src.measurement.windows import WindowPlan
from tfinput.config import PipelineConfig
from tuners._method import describe_method, describe_pruner, describe_step, fingerprint
from tuners._objective import NoiseAwarePruner
from tuners._result import TrialsFailedError, resume_record


def test_fingerprint_records_the_keras_backend_and_jax():
    fp = fingerprint(2)
    assert fp["keras_backend"] in ("tensorflow", "jax", "torch", "numpy")
    if "jax" in sys.modules:
        assert fp["jax"] == sys.modules["jax"].__version__
    else:
        assert fp["jax"] is None


def test_fingerprint_lists_jax_devices_but_not_the_cpu():
    # A Keras-on-JAX or JAX step trains on JAX's devices, which TensorFlow (often the CPU
    # build beside a CUDA JAX) does not list.
    jax = pytest.importorskip("jax")
    fp = fingerprint(2)
    listed = fp["accelerators"] or []
    expected = [f"jax:{d.platform}:{d.device_kind}" for d in jax.devices() if d.platform != "cpu"]
    assert [a for a in listed if a.startswith("jax:")] == expected


def test_tune_result_to_dict_and_record():
    result = tune_result(input_wait=0.123456, step_bound=33333.333, input_bound=True)
    assert result.ratio_vs_autotune == 1.5
    data = result.to_dict()
    assert data["format"] == "tfinput.tune/1" and data["best_name"] == "trial 3"
    assert PipelineConfig.from_dict(data["best_config"]) == BEST
    assert data["ratio_vs_autotune"] == 1.5
    assert [c["name"] for c in data["confirmed"]] == ["trial 3", "autotune"]
    assert data["input_wait"] == 0.1235 and data["step_bound_examples_per_s"] == 33333.3
    assert data["format_advice"] is None and data["breakdown"] == []
    record = result.record()
    assert record["confirmed"]["name"] == "trial 3" and record["input_bound"] is True
    assert set(record) == {
        "fingerprint",
        "method",
        "step",
        "confirmed",
        "confirmation_error",
        "beats_autotune",
        "input_bound",
        "verdicts",
        "packed_layout",
        "resume",
    }
    assert record["resume"] == data["resume"] == resume_record(BEST)


def test_an_unconfirmed_result_has_no_ratio():
    result = tune_result(confirmed=(), confirmation_error="device lost")
    assert result.ratio_vs_autotune is None
    data = result.to_dict()
    assert data["ratio_vs_autotune"] is None and data["confirmed"] == []
    assert data["confirmation_error"] == "device lost"
    assert data["input_wait"] is None and data["step_bound_examples_per_s"] is None
    assert result.record()["confirmed"] is None


def test_describe_method_names_the_plan_the_pruner_and_the_sampler():
    study = optuna.create_study(
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=0),
        pruner=NoiseAwarePruner(),
    )
    plan = WindowPlan(warmup_batches=2, windows=3, window_batches=4)
    method = describe_method(plan, confirm_top=2, confirm_windows=5, study=study)
    assert method["trial"].startswith("fresh iterator, 2 warm-up batches excluded, 3 windows of 4")
    assert method["pruning"] == NoiseAwarePruner().describe()
    assert method["sampler"] == "RandomSampler"
    assert "top 2 configs" in method["confirmation"] and "5 windows each" in method["confirmation"]
    assert "input-bound when every round waited at least 3%" in method["input wait"]


def test_describe_pruner_and_step_fall_back_to_names():
    assert describe_pruner(optuna.pruners.NopPruner()) == "NopPruner"
    assert describe_step(steps.input_only()) == {"kind": "input_only", "name": "input only"}

    def my_step(batch):
        return None

    assert describe_step(my_step) == {"name": "my_step"}


def test_trials_failed_error_keeps_the_study():
    study = optuna.create_study()
    error = TrialsFailedError("no trial completed", study=study)
    assert str(error) == "no trial completed" and error.study is study


# ------------------------------------------------------------- resumption
@pytest.mark.parametrize(
    ("knobs", "exact", "reason", "note"),
    [
        ({}, True, None, None),
        ({"deterministic": True, "map_parallelism": 2}, True, None, None),
        ({"deterministic": False}, False, "--fix deterministic=true", None),
        ({"cache": True}, True, None, "without --tune-cache"),
    ],
    ids=["default", "deterministic", "nondeterministic", "cache"],
)
def test_resume_record_says_whether_and_why(knobs, exact, reason, note):
    record = resume_record(PipelineConfig(**knobs))
    assert record["exact"] is exact
    assert record["verify"] == "tfinput check DATA --resume --config best_config.json"
    if reason is None:
        assert record["reasons"] == []
    else:
        (text,) = record["reasons"]
        assert text.startswith("deterministic=False: the input position saves and restores")
        assert reason in text
    if note is None:
        assert record["notes"] == []
    else:
        (text,) = record["notes"]
        assert text.startswith("cache=true: the saved input state holds the cached records")
        assert note in text


def _resumed(pipeline, config, after=3):
    """Row ids of an epoch: before the save, then the uninterrupted rest and the rest
    after a restore into a fresh iterator (packed batches unpacked)."""
    from tfinput.layout import is_packed, unpack

    def row_ids(batches):
        out = []
        for features, _ in batches:
            if is_packed(features):
                features = unpack(features, pipeline.packed_layout())
            out += features["dense"]["row_id"].numpy().tolist()
        return out

    it = pipeline.iterator(config)
    first = row_ids(next(it) for _ in range(after))
    state = it.get_state()
    rest = row_ids(it)
    restored = pipeline.iterator(config)
    restored.set_state(state)
    return first, rest, row_ids(restored)


def test_a_nondeterministic_pipeline_resumes_without_loss_or_repeat(pipeline):
    # The claim behind resume_record's "not exact": order may change, content may not.
    config = PipelineConfig(
        batch_size=50,
        deterministic=False,
        map_parallelism=2,
        interleave_parallelism=2,
        interleave_cycle_length=4,
        shuffle_buffer=300,
        shuffle_seed=1,
    )
    first, rest, again = _resumed(pipeline, config)
    assert collections.Counter(again) == collections.Counter(rest)
    assert sorted(first + again) == list(range(1000))  # each row once


def test_the_tuned_config_records_whether_it_resumes_and_it_holds(tuned, tmp_path):
    pipeline, _, result = tuned
    path = tmp_path / "best_config.json"
    result.best_config.to_json(path, **result.record())
    saved = json.loads(path.read_text())
    assert saved["resume"] == resume_record(result.best_config)
    assert PipelineConfig.from_json(path) == result.best_config
    config = result.best_config.replace(shuffle_buffer=300, shuffle_seed=1)
    first, rest, again = _resumed(pipeline, config)
    if saved["resume"]["exact"]:
        assert again == rest
    else:
        assert collections.Counter(again) == collections.Counter(rest)
    assert len(first + again) == len(set(first + again))
