"""`tfinput bench`: measurement logic with a fake clock, presets, JSON, roofline."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pyarrow as pa
import pytest

import tfinput
from tests.helpers import cli_main as _cli
from tfinput import bench, steps, testing
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, DataError


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeCpu:
    """A CPU clock that advances ``busy`` CPU-seconds per wall second of a FakeClock."""

    def __init__(self, clock: FakeClock, busy: float) -> None:
        self.clock, self.busy, self.start = clock, busy, clock.now

    def __call__(self) -> float:
        return (self.clock.now - self.start) * self.busy


def batches(clock: FakeClock, *, rows: int, produce_s: float, count: int | None = None):
    """Batches of ``rows`` examples, each taking ``produce_s`` of the fake clock."""
    i = 0
    while count is None or i < count:
        clock.sleep(produce_s)
        yield {"features": {"x": np.zeros(rows)}, "label": np.zeros(rows)}
        i += 1


def test_measure_window_counts_time_wait_and_latency():
    clock = FakeClock()
    step = steps.simulated_step(0.02, sleep=clock.sleep)
    it = batches(clock, rows=4, produce_s=0.01)
    w = bench.measure_window(
        it, batches=10, step=step, clock=clock, cpu_clock=FakeCpu(clock, 1.5), rss=lambda: 7
    )
    assert (w.batches, w.examples) == (10, 40)
    assert w.seconds == pytest.approx(0.3)
    assert w.examples_per_s == pytest.approx(40 / 0.3)
    assert w.wait_seconds == pytest.approx(0.1)
    assert w.batch_seconds == pytest.approx((0.03,) * 10)
    assert w.cores_busy == pytest.approx(1.5)
    assert w.peak_rss_bytes == 7


def test_measure_window_stops_when_data_ends_and_needs_one_batch():
    clock = FakeClock()
    w = bench.measure_window(
        batches(clock, rows=3, produce_s=0.5, count=2),
        batches=10,
        clock=clock,
        cpu_clock=clock,
        rss=lambda: 0,
    )
    assert (w.batches, w.examples, w.seconds) == (2, 6, pytest.approx(1.0))
    with pytest.raises(DataError, match="no batch"):
        bench.measure_window(iter([]), batches=3, clock=clock, cpu_clock=clock, rss=lambda: 0)


@pytest.mark.parametrize(
    ("batch", "rows"),
    [
        ((({"dense": {}, "ids": {"a": np.zeros((5, 3))}}), np.zeros(5)), 5),
        ({"x/values": np.zeros(2), "y": np.zeros(9)}, 2),
        (pa.record_batch({"a": [1, 2, 3]}), 3),
        ({"dense": {}, "ids": {}}, -1),
    ],
    ids=["pipeline-output", "first-leaf", "record-batch", "no-leaf"],
)
def test_batch_rows(batch, rows):
    assert bench.batch_rows(batch) == rows


def test_run_window_uses_a_fresh_iterator_and_excludes_warmup():
    clock = FakeClock()
    made = []

    def make():
        made.append(1)

        def gen():
            clock.sleep(5.0)  # slow start: opening files, filling buffers
            yield from batches(clock, rows=2, produce_s=0.1)

        return gen()

    for _ in range(2):
        w = bench.run_window(
            make, warmup_batches=1, window_batches=4, clock=clock, cpu_clock=clock, rss=lambda: 0
        )
        assert w.seconds == pytest.approx(0.4)  # the 5 s start-up is not in the window
    assert len(made) == 2
    with pytest.raises(DataError, match="ended after 2 warm-up"):
        bench.run_window(
            lambda: batches(clock, rows=1, produce_s=0, count=2),
            warmup_batches=3,
            window_batches=1,
            clock=clock,
        )


def _fake_target(clock: FakeClock, order: list[str], per_batch: dict[int, float]):
    """config -> batches whose production time depends on map_parallelism."""

    def factory(config: PipelineConfig):
        order.append(config.map_parallelism)
        return batches(clock, rows=config.batch_size, produce_s=per_batch[config.map_parallelism])

    return factory


def test_measure_interleaves_configs_and_computes_ratios():
    clock = FakeClock()
    order: list[int] = []
    configs = {
        "slow": PipelineConfig.naive(batch_size=10),
        "fast": PipelineConfig.naive(batch_size=10, map_parallelism=2),
    }
    seen = []
    result = bench.measure(
        _fake_target(clock, order, {1: 0.02, 2: 0.01}),
        configs,
        windows=3,
        window_batches=5,
        warmup_batches=2,
        clock=clock,
        cpu_clock=FakeCpu(clock, 1.0),
        rss=lambda: 2**20,
        cpu_count=4,
        progress=lambda done, total, w: seen.append((done, total, w.name, w.round)),
    )
    assert order == [1, 2, 1, 2, 1, 2]  # A B A B A B
    assert [s[2:] for s in seen] == [
        ("slow", 0),
        ("fast", 0),
        ("slow", 1),
        ("fast", 1),
        ("slow", 2),
        ("fast", 2),
    ]
    assert seen[-1][:2] == (6, 6)
    slow, fast = result.result("slow"), result.result("fast")
    assert result.baseline == "slow" and result.best is fast
    assert slow.median == pytest.approx(500.0) and fast.median == pytest.approx(1000.0)
    assert fast.ratio == pytest.approx(2.0) and fast.ratio_min == pytest.approx(2.0)
    assert slow.cv == pytest.approx(0.0) and fast.latency_p99_ms == pytest.approx(10.0)
    assert fast.utilisation == pytest.approx(0.25) and fast.peak_rss_mb == pytest.approx(1.0)
    assert [len(r.windows) for r in result.results] == [3, 3]


def test_summarize_spread_and_paired_ratios():
    def win(name, r, rate):
        return bench.Window(
            name=name,
            round=r,
            batches=1,
            examples=int(rate),
            seconds=1.0,
            cpu_seconds=0.5,
            batch_seconds=(1.0,),
            wait_seconds=0.25,
        )

    windows = {
        "base": [win("base", 0, 100), win("base", 1, 200), win("base", 2, 100)],
        "new": [win("new", 0, 150), win("new", 1, 200), win("new", 2, 300)],
    }
    stats = {s.name: s for s in bench.summarize(windows, baseline="base", cpu_count=2, bound=400)}
    new = stats["new"]
    assert (new.median, new.minimum, new.maximum) == (200, 150, 300)
    assert new.cv == pytest.approx(np.std([150, 200, 300], ddof=1) / np.mean([150, 200, 300]))
    assert (new.ratio, new.ratio_min, new.ratio_max) == (1.5, 1.0, 3.0)  # per round
    assert new.roofline_fraction == 0.5 and new.stall == 0.25 and new.utilisation == 0.25
    with pytest.raises(ConfigError, match="baseline 'other'"):
        bench.summarize(windows, baseline="other")


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


def test_measure_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="no configs"):
        bench.measure(lambda c: [], {})
    with pytest.raises(ConfigError, match="windows must be"):
        bench.measure(lambda c: [], {"a": PipelineConfig()}, windows=0)
    with pytest.raises(ConfigError, match="baseline 'b'"):
        bench.measure(lambda c: [], {"a": PipelineConfig()}, baseline="b")


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
    result = bench.measure(
        _fake_target(clock, [], {1: 0.05}),
        {"naive": PipelineConfig.naive(batch_size=10)},
        windows=2,
        window_batches=3,
        warmup_batches=1,
        clock=clock,
        cpu_clock=FakeCpu(clock, 1.0),
        rss=lambda: 0,
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


@pytest.mark.parametrize(
    ("files", "read", "limited_by", "bound"),
    [(8, 1e6, "cpu", 2e5), (1, 1.5e5, "read", 1.5e5)],
    ids=["cpu-bound", "read-bound-single-file"],
)
def test_roofline_model(files, read, limited_by, bound):
    stages = [
        bench.Stage(
            name="read", description="", examples_per_s=read, examples_per_cpu_s=read, cores_busy=1
        ),
        bench.Stage(
            name="parse",
            description="",
            examples_per_s=1.2e5,
            examples_per_cpu_s=1.2e5,
            cores_busy=1,
        ),
        bench.Stage(
            name="full",
            description="",
            examples_per_s=1.2e5,
            examples_per_cpu_s=1e5,
            cores_busy=1.2,
        ),
    ]
    rl = bench.roofline_from_stages(stages, cores=2, files=files)
    assert (rl.limited_by, rl.bound) == (limited_by, bound)
    assert rl.cpu_bound == 2e5  # cores x examples per CPU-second, not the wall rate


# ------------------------------------------------------- real tiny pipelines
@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    from tfinput import datagen

    root = tmp_path_factory.mktemp("bench")
    schema = testing.criteo_like_schema(n_dense=3, n_categorical=3, n_multi_hot=1)
    out = {}
    for fmt in ("tfrecord", "parquet"):
        out[fmt] = datagen.generate_files(root / fmt, schema=schema, rows=2048, files=2, format=fmt)
    return out


@pytest.mark.parametrize("fmt", ["tfrecord", "parquet"])
def test_roofline_on_real_files(tiny_data, fmt):
    data = tiny_data[fmt]
    reader = tfinput.tfrecord if fmt == "tfrecord" else tfinput.parquet
    rl = bench.roofline(
        reader(data.paths, data.schema),
        batch_size=256,
        windows=1,
        window_batches=2,
        warmup_batches=1,
        cpu_count=2,
    )
    assert [s.name for s in rl.stages] == ["read", "parse", "full"]
    assert all(s.examples_per_s > 0 and s.windows for s in rl.stages)
    assert rl.files == 2 and rl.cores == 2 and rl.bound == min(rl.cpu_bound, rl.read_bound)
    assert rl.bytes_per_example > 0


def test_cli_bench_json_on_real_files(tiny_data, tmp_path, capsys):
    saved = tmp_path / "mine.json"
    PipelineConfig(map_parallelism=2, prefetch=1).to_json(saved)
    data_dir = str(tiny_data["tfrecord"].paths[0]).rsplit("/", 1)[0]
    code = _cli(
        [
            "bench",
            data_dir,
            "--config",
            "naive",
            "--config",
            str(saved),
            "--batch-size",
            "256",
            "--windows",
            "1",
            "--window-batches",
            "2",
            "--warmup-batches",
            "1",
            "--json",
            "--roofline",
            "--roofline-windows",
            "1",
            "--out",
            str(tmp_path / "r.json"),
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in data["results"]] == ["naive", "mine"]
    assert data["results"][1]["config"]["batch_size"] == 256
    assert data["roofline"]["limited_by"] in ("cpu", "read")
    assert json.loads((tmp_path / "r.json").read_text()) == data


def test_cli_bench_table(tiny_data, capsys):
    code = _cli(
        [
            "bench",
            *tiny_data["parquet"].paths,
            "--config",
            "naive",
            "--batch-size",
            "512",
            "--windows",
            "1",
            "--window-batches",
            "1",
            "--warmup-batches",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "naive" in out and "examples/s" in out and "best: naive" in out


def test_cli_bench_errors_exit_2(tmp_path, capsys):
    (tmp_path / "x.tfrecord").write_bytes(b"")
    assert _cli(["bench", str(tmp_path / "x.tfrecord")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tfinput: error: no --schema given") and err.count("\n") == 1


def test_measure_window_sync_is_timed_in_the_window():
    """An asynchronous step blocks in ``sync`` before the window's end is taken."""
    clock = FakeClock()
    it = batches(clock, rows=4, produce_s=0.01)
    w = bench.measure_window(
        it, batches=3, clock=clock, cpu_clock=FakeCpu(clock, 1.0), sync=lambda: clock.sleep(0.5)
    )
    assert w.seconds == pytest.approx(0.53)
    assert w.batch_seconds[-1] == pytest.approx(0.51)
    assert w.wait_seconds == pytest.approx(0.03)


def _owning_step(clock: FakeClock, prepared: list[PipelineConfig]) -> steps.Step:
    """A step that drives the data itself and, like model.fit, cannot see input waits."""

    def run_windows(source, *, batch_size, warmup_batches, windows, window_batches, **kw):
        it = iter(source)
        for _ in range(warmup_batches):
            next(it)
        out = []
        for i in range(windows):
            t0 = clock()
            for _ in range(window_batches):
                next(it)
                clock.sleep(0.02)
            seconds = clock() - t0
            out.append(
                bench.Window(
                    round=i,
                    batches=window_batches,
                    examples=window_batches * batch_size,
                    seconds=seconds,
                    cpu_seconds=seconds,
                    batch_seconds=(seconds / window_batches,) * window_batches,
                    wait_seconds=None,
                )
            )
        return out

    def prepare(config: PipelineConfig) -> steps.Step:
        prepared.append(config)
        return base

    base = steps.Step(kind="function", name="owner", fn=lambda b: None, run_windows=run_windows)
    return steps.Step(kind="function", name="owner", fn=lambda b: None, prepare_fn=prepare)


def test_measure_hands_the_data_to_a_loop_owning_step():
    clock = FakeClock()
    prepared: list[PipelineConfig] = []
    configs = {
        "a": PipelineConfig(batch_size=4, steps_per_execution=1),
        "b": PipelineConfig(batch_size=4, steps_per_execution=2),
    }
    result = bench.measure(
        lambda cfg: batches(clock, rows=4, produce_s=0.01),
        configs,
        step=_owning_step(clock, prepared),
        windows=3,
        window_batches=5,
        warmup_batches=2,
        clock=clock,
        cpu_clock=FakeCpu(clock, 1.0),
        rss=lambda: 0,
    )
    assert prepared == list(configs.values())  # once per config
    for r in result.results:
        assert len(r.windows) == 3 and r.stall is None
        assert [w.examples for w in r.windows] == [20, 20, 20]
        assert r.median == pytest.approx(20 / 0.15)
    data = json.loads(result.to_json())
    assert [r["stall_fraction"] for r in data["results"]] == [None, None]
    assert data["results"][0]["windows"][0]["wait_seconds"] is None


def test_summarize_keeps_stall_when_every_window_knows_it():
    def window(wait):
        return bench.Window(
            batches=1, examples=1, seconds=1.0, cpu_seconds=1.0, batch_seconds=(1.0,),
            wait_seconds=wait,
        )  # fmt: skip

    known, unknown = bench.summarize({"k": [window(0.25), window(0.75)], "u": [window(None)]})
    assert known.stall == pytest.approx(0.5) and unknown.stall is None


def test_measure_with_keras_fit_interleaves_steps_per_execution(tiny_data):
    from tfinput import models

    data = tiny_data["tfrecord"]
    model = models.ranking_model(data.schema)
    configs = {
        "k1": PipelineConfig(batch_size=32, steps_per_execution=1),
        "k2": PipelineConfig(batch_size=32, steps_per_execution=2),
    }
    result = bench.measure(
        tfinput.tfrecord(data.paths, data.schema),
        configs,
        step=steps.keras_fit_step(model),
        windows=1,
        window_batches=2,
        warmup_batches=1,
    )
    assert [r.name for r in result.results] == ["k1", "k2"]
    for r in result.results:
        assert r.stall is None and r.median > 0
        assert r.windows[0].examples == 64
    assert result.method["step"]["kind"] == "keras_fit"
    per_config = result.method["step_per_config"]
    assert [per_config[n]["steps_per_execution"] for n in ("k1", "k2")] == [1, 2]
    assert result.machine["keras_backend"] == "tensorflow"
    assert model.steps_per_execution == 2


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("windows", 0),
        ("window_batches", 0),
        ("warmup_batches", -1),
        ("windows", True),
        ("window_batches", 2.0),
    ],
    ids=["no-windows", "empty-window", "negative-warmup", "bool", "float"],
)
def test_window_plan_names_the_bad_field(field, value):
    with pytest.raises(ConfigError, match=rf"WindowPlan\.{field}: expected an int"):
        bench.WindowPlan(**{field: value})


def test_window_plan_carries_every_default():
    from profiles import CaptureConfig
    from tuners import objective

    def counts(fn):
        keys = ("warmup_batches", "windows", "window_batches")
        params = inspect.signature(fn).parameters
        return bench.WindowPlan(**{k: params[k].default for k in keys})

    assert counts(bench.measure) == bench.BENCH_PLAN == bench.WindowPlan(warmup_batches=8)
    assert counts(objective.measure) == bench.TUNER_PLAN == bench.WindowPlan()
    assert counts(bench.roofline) == bench.ROOFLINE_PLAN
    assert CaptureConfig().window_plan == bench.CAPTURE_PLAN
    assert bench.TUNER_PLAN.to_dict() == {"warmup_batches": 5, "windows": 5, "window_batches": 20}
