"""`tfinput.bench`, the front of ``tfinput bench``: the configs it compares (presets and
saved files, as the command line names them) and the `BenchResult` it writes
(the ``tfinput.bench/1`` JSON)."""

from __future__ import annotations

import json

import pytest

from tests.tfinput.measurement.conftest import (
    FakeClock,
    fake_measure,
    fake_target,
)
from tfinput import bench
from tfinput._src.measurement.target import MeasureOptions
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError


def test_preset_and_saved_configs(tmp_path):
    presets = bench.preset_configs(["naive", "heuristic", "autotune"], cpu_count=3, batch_size=64)
    assert presets["naive"].map_parallelism == 1 and presets["naive"].prefetch == 0
    assert presets["heuristic"].map_parallelism == 3
    assert presets["autotune"] == PipelineConfig(batch_size=64)
    saved = tmp_path / "tuned.json"
    PipelineConfig(map_parallelism=3, prefetch=2).to_json(saved, hardware={"cpus": 2})
    configs = bench.load_configs(
        ["naive", str(saved), f"other={saved}"], cpu_count=2, batch_size=128
    )
    assert list(configs) == ["naive", "tuned", "other"]
    assert configs["tuned"].map_parallelism == 3 and configs["tuned"].batch_size == 128
    with pytest.raises(ConfigError, match="neither a preset"):
        bench.load_configs(["fastest"])
    with pytest.raises(ConfigError, match="given twice"):
        bench.load_configs(["naive", "naive"])


def test_load_configs_keeps_a_saved_batch_size_and_names_a_preset_file(tmp_path):
    saved = tmp_path / "mine.json"
    PipelineConfig(batch_size=32).to_json(saved)
    configs = bench.load_configs([f"naive={saved}", str(saved)])
    assert list(configs) == ["naive", "mine"]  # NAME=FILE is a file even when NAME is a preset
    assert configs["naive"] == configs["mine"] == PipelineConfig(batch_size=32)
    with pytest.raises(ConfigError, match=r"'missing\.json' is neither a preset \['naive'"):
        bench.load_configs(["missing.json"])


RESULT_KEYS = {
    "name",
    "config",
    "examples_per_s",
    "latency_ms",
    "stall_fraction",
    "cpu",
    "peak_rss_mb",
    "vs_baseline",
    "roofline_fraction",
    "windows",
}


def test_json_output_schema():
    clock = FakeClock()
    stages = [
        bench.Stage(name=n, description=n, examples_per_s=r, examples_per_cpu_s=r, cores_busy=1)
        for n, r in (("read", 1e6), ("parse", 2e5), ("full", 1e5))
    ]
    rl = bench.roofline_from_stages(stages, cores=2, files=8, bytes_per_example=700.0)
    result = fake_measure(
        fake_target(clock, [], {1: 0.05}),
        {"naive": PipelineConfig.naive(batch_size=10)},
        clock,
        plan=(2, 3, 1),
        cpu_count=2,
        roofline_result=rl,
    )
    data = json.loads(result.to_json())
    assert data["format"] == "tfinput.bench/1"
    assert {
        "windows",
        "window_batches",
        "warmup_batches",
        "order",
        "iterator",
        "step",
        "pipeline",
    } <= set(data["method"])
    assert {"cpu_model", "cpu_count", "tensorflow", "python", "load_average"} <= set(
        data["machine"]
    )
    assert data["machine"]["cpu_count"] == 2 and data["method"]["step"]["kind"] == "input_only"
    (entry,) = data["results"]
    assert set(entry) == RESULT_KEYS
    assert entry["config"] == PipelineConfig.naive(batch_size=10).to_dict()
    assert entry["examples_per_s"]["median"] == pytest.approx(200.0)
    assert entry["roofline_fraction"] == pytest.approx(0.001)
    assert entry["windows"][0]["round"] == 0 and len(entry["windows"]) == 2
    roof = data["roofline"]
    assert roof["bound_examples_per_s"] == 2e5 and roof["limited_by"] == "cpu"
    assert roof["cost_us_per_example"] == {
        "read": 1.0,
        "parse": 4.0,
        "transform": 5.0,
        "total": 10.0,
    }


def test_bench_result_writes_its_json_and_names_unknown_configs(tmp_path):
    clock = FakeClock()
    one = MeasureOptions(
        windows=1, window_batches=1, warmup_batches=0, clock=clock, cpu_clock=clock, rss=lambda: 0
    )
    configs = {"a": PipelineConfig.naive(batch_size=2)}
    result = bench.measure(fake_target(clock, [], {1: 0.1}), configs, measurement=one)
    text = result.to_json(tmp_path / "r.json")
    assert (tmp_path / "r.json").read_text() == text + "\n"
    data = json.loads(text)
    assert data["roofline"] is None and data["method"]["pipeline"] is None  # a plain callable
    assert data["method"]["step_per_config"] is None
    with pytest.raises(ConfigError, match=r"no config 'b'; configs: \['a'\]"):
        result.result("b")
