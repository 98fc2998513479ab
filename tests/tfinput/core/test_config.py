"""`tfinput.config`: `PipelineConfig` validation messages, presets, immutability and the
JSON round trip."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tfinput.config import AUTOTUNE, PipelineConfig, knob_names
from tfinput.errors import ConfigError


def test_every_knob_is_present():
    assert knob_names() == [
        "batch_size",
        "drop_remainder",
        "interleave_cycle_length",
        "interleave_block_length",
        "interleave_parallelism",
        "map_parallelism",
        "prefetch",
        "shuffle_buffer",
        "shuffle_seed",
        "read_batch",
        "private_threadpool_size",
        "max_intra_op_parallelism",
        "deterministic",
        "cache",
        "autotune_ram_budget",
        "autotune_min_parallelism",
        "layout",
        "steps_per_execution",
        "device_prefetch",
        "sparsecore_workers",
        "sparsecore_prefetch",
        "service_workers",
        "service_compression",
        "service_max_outstanding_requests",
    ]


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"layout": "columns"},
            r"PipelineConfig.layout: expected one of \['per_feature', 'packed'\]",
        ),
        ({"steps_per_execution": 0}, r"PipelineConfig.steps_per_execution: expected >= 1, got 0"),
        ({"device_prefetch": -1}, r"PipelineConfig.device_prefetch: expected >= 0, got -1"),
        ({"steps_per_execution": 2.0}, r"steps_per_execution: expected an int, got 2.0"),
    ],
    ids=["layout", "steps-per-execution", "device-prefetch", "float"],
)
def test_feeding_knobs_are_validated(changes, message):
    with pytest.raises(ConfigError, match=message):
        PipelineConfig(**changes)


def test_feeding_knobs_round_trip_through_json():
    config = PipelineConfig(layout="packed", steps_per_execution=8, device_prefetch=2)
    assert PipelineConfig.from_json(config.to_json()) == config
    # A config saved before the feeding knobs existed loads with their defaults.
    old = {
        k: v
        for k, v in config.to_dict().items()
        if k not in ("layout", "steps_per_execution", "device_prefetch")
    }
    loaded = PipelineConfig.from_dict(old)
    assert (loaded.layout, loaded.steps_per_execution, loaded.device_prefetch) == (None, 1, 0)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"batch_size": 0}, "batch_size: expected >= 1, got 0"),
        ({"batch_size": AUTOTUNE}, "batch_size: expected >= 1, got -1"),
        ({"map_parallelism": 0}, "map_parallelism: expected >= 1 or AUTOTUNE"),
        ({"prefetch": -3}, "prefetch: expected >= 0 or AUTOTUNE"),
        ({"map_parallelism": 2.5}, "map_parallelism: expected an int or AUTOTUNE, got 2.5"),
        ({"cache": "yes"}, "cache: expected true or false"),
        ({"deterministic": 3}, "deterministic: expected true, false or AUTOTUNE"),
        ({"interleave_cycle_length": True}, "interleave_cycle_length: expected an int"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_validation_names_the_field(changes, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        PipelineConfig(**changes)


def test_json_round_trip_with_autotune(tmp_path):
    config = PipelineConfig(map_parallelism=3, prefetch=AUTOTUNE, deterministic=False, cache=True)
    data = config.to_dict()
    assert data["prefetch"] == "autotune" and data["map_parallelism"] == 3
    assert PipelineConfig.from_dict(json.loads(json.dumps(data))) == config
    path = tmp_path / "c.json"
    config.to_json(path, fingerprint={"cpu_count": 2})
    assert PipelineConfig.from_json(path) == config
    assert json.loads(path.read_text())["fingerprint"] == {"cpu_count": 2}


def test_unknown_knob_in_json():
    with pytest.raises(ConfigError, match=r"unknown knob\(s\) \['parallelism'\]"):
        PipelineConfig.from_dict({"parallelism": 3})


def test_presets():
    naive = PipelineConfig.naive()
    assert naive.map_parallelism == 1 and naive.prefetch == 0
    heuristic = PipelineConfig.heuristic(cpu_count=8)
    assert heuristic.map_parallelism == 8 and heuristic.prefetch == 2
    auto = PipelineConfig.autotune()
    assert auto.map_parallelism == AUTOTUNE and auto.interleave_cycle_length == AUTOTUNE
    assert PipelineConfig.preset("naive", batch_size=64).batch_size == 64
    with pytest.raises(ConfigError, match="unknown preset 'fast'"):
        PipelineConfig.preset("fast")


def test_replace_validates():
    with pytest.raises(ConfigError, match="no knob"):
        PipelineConfig().replace(speed=3)
    assert PipelineConfig().replace(prefetch=4).prefetch == 4


def test_from_json_bad_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        PipelineConfig.from_json(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        PipelineConfig.from_json(bad)


@pytest.mark.parametrize(
    "seed, message",
    [
        (True, "PipelineConfig.shuffle_seed: expected an int or null, got True"),
        ("7", "PipelineConfig.shuffle_seed: expected an int or null, got '7'"),
    ],
    ids=["bool", "string"],
)
def test_shuffle_seed_is_an_int_or_null(seed, message):
    with pytest.raises(ConfigError, match=message):
        PipelineConfig(shuffle_seed=seed)
    assert PipelineConfig(shuffle_seed=None).shuffle_seed is None


def test_config_is_frozen_and_keyword_only():
    config = PipelineConfig(batch_size=32)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.batch_size = 64
    with pytest.raises(TypeError):
        PipelineConfig(32)
    changed = config.replace(batch_size=64)
    assert (config.batch_size, changed.batch_size) == (32, 64)


def test_from_dict_reads_a_saved_tuner_result_and_refuses_non_objects():
    saved = {"config": PipelineConfig(map_parallelism=4).to_dict(), "value": 123.0}
    assert PipelineConfig.from_dict(saved).map_parallelism == 4
    with pytest.raises(ConfigError, match="PipelineConfig: expected a JSON object, got list"):
        PipelineConfig.from_dict([1, 2])


def test_to_json_writes_knobs_under_config_with_autotune_as_a_string():
    text = PipelineConfig(batch_size=16).to_json(note="x")
    data = json.loads(text)
    assert set(data) == {"config", "note"}
    assert data["config"]["batch_size"] == 16 and data["config"]["prefetch"] == "autotune"
    assert list(data["config"]) == knob_names()


def test_service_knobs_are_checked():
    config = PipelineConfig(service_workers=2, service_compression=None)
    assert PipelineConfig.from_json(config.to_json()) == config
    assert config.to_dict()["service_max_outstanding_requests"] == "autotune"
    with pytest.raises(ConfigError, match="service_compression"):
        PipelineConfig(service_compression="snappy")
    with pytest.raises(ConfigError, match="service_workers"):
        PipelineConfig(service_workers=-1)
    with pytest.raises(ConfigError, match="service_max_outstanding_requests"):
        PipelineConfig(service_max_outstanding_requests=0)
