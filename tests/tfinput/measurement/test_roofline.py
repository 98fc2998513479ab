"""`tfinput.bench.roofline`: the roofline, from measured stages and on real files."""

from __future__ import annotations

import pytest

from tfinput._src.measurement import roofline as roof
from tfinput._src.measurement.roofline import FULL_DESCRIPTION, pipeline_stages
from tfinput._src.measurement.target import MeasureOptions
from tfinput._src.measurement.windows import ROOFLINE_PLAN, Window
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, SourceError


def _stage(name, cpu_rate, *, wall=None, cores=1.0):
    return roof.Stage(
        name=name,
        description=name,
        examples_per_s=wall or cpu_rate,
        examples_per_cpu_s=cpu_rate,
        cores_busy=cores,
    )


@pytest.mark.parametrize(
    ("files", "read", "limited_by", "bound"),
    [(8, 1e6, "cpu", 2e5), (1, 1.5e5, "read", 1.5e5)],
    ids=["cpu-bound", "read-bound-single-file"],
)
def test_roofline_model(files, read, limited_by, bound):
    full = _stage("full", 1e5, wall=1.2e5, cores=1.2)
    stages = [_stage("read", read), _stage("parse", 1.2e5), full]
    rl = roof.roofline_from_stages(stages, cores=2, files=files)
    assert (rl.limited_by, rl.bound) == (limited_by, bound)
    assert rl.cpu_bound == 2e5  # cores x examples per CPU-second, not the wall rate


def test_roofline_from_stages_needs_all_three_in_order():
    with pytest.raises(ConfigError, match=r"roofline: stages \['parse'\] are missing"):
        roof.roofline_from_stages([_stage("read", 1e6), _stage("full", 1e5)], cores=2, files=2)
    rl = roof.roofline_from_stages(
        [_stage("full", 1e5), _stage("read", 1e6), _stage("parse", 2e5)], cores=4, files=0
    )
    assert [s.name for s in rl.stages] == ["read", "parse", "full"]
    assert rl.read_bound == 1e6  # no file listed still counts one read stream
    assert rl.stage("parse").examples_per_cpu_s == 2e5


def test_cost_per_example_is_the_difference_of_stages():
    # parse measured faster than read (noise): its own cost is clamped at zero.
    rl = roof.roofline_from_stages(
        [_stage("read", 4e5), _stage("parse", 5e5), _stage("full", 1e5)], cores=1, files=1
    )
    assert rl.cost_us() == pytest.approx(
        {"read": 2.5, "parse": 0.0, "transform": 8.0, "total": 10.0}
    )
    d = rl.to_dict()
    assert d["cost_us_per_example"] == {"read": 2.5, "parse": 0.0, "transform": 8.0, "total": 10.0}
    assert d["bytes_per_example"] is None and d["limited_by"] == "cpu"
    assert [s["us_per_example"] for s in d["stages"]] == [2.5, 2.0, 10.0]


def test_stage_from_windows_takes_medians_and_falls_back_to_the_wall_rate():
    def window(examples, cpu):
        return Window(
            batches=1, examples=examples, seconds=1.0, cpu_seconds=cpu, batch_seconds=(1.0,),
            wait_seconds=0.0,
        )  # fmt: skip

    s = roof.Stage.from_windows("read", "bytes", [window(100, 0.5), window(300, 0.0)])
    assert (s.examples_per_s, s.examples_per_cpu_s) == (200.0, 250.0)  # medians of 100|300, 200|300
    assert s.cores_busy == 0.25 and len(s.windows) == 2
    assert _stage("x", 0.0).us_per_example == float("inf")


def _serial(config, rate, *, elements=4096.0, batch=4096):
    return roof.SerialStage(
        config=config,
        elements_per_batch=elements,
        batch_size=batch,
        examples_per_s=rate,
        examples_per_cpu_s=rate / 2,
    )


def test_prediction_adds_the_serial_stage_to_the_parallel_work():
    stages = [_stage("read", 1e6), _stage("parse", 2e5), _stage("full", 1e5)]
    rl = roof.roofline_from_stages(
        stages,
        cores=16,
        files=1,  # one read stream: 1M
        serial=[_serial("records", 2.5e5), _serial("mini", 8e6, elements=64.0)],
    )
    assert (rl.bound, rl.limited_by) == (1e6, "read")  # the parallel bound: min(1.6M, 1M)
    records = rl.predict("records")
    # 1 / (1 / 1.6M + 1 / 250k) = 216k: the serial stage takes most of each example's time.
    assert records.bound == pytest.approx(1 / (1 / 1.6e6 + 1 / 2.5e5))
    assert (records.limited_by, records.parallel, records.serial) == ("serial", 1.6e6, 2.5e5)
    mini = rl.predict("mini")  # 1 / (1/1.6M + 1/8M) = 1.33M: reading (1M) bounds it.
    assert (mini.bound, mini.limited_by) == (1e6, "read")
    unknown = rl.predict("not probed")  # no serial stage: the parallel bound
    assert (unknown.bound, unknown.limited_by, unknown.serial) == (1e6, "read", None)
    few = roof.roofline_from_stages(stages, cores=2, files=1, serial=[_serial("mini", 8e6)])
    assert few.predict("mini").limited_by == "cpu"  # 200k of parallel work vs an 8M stage
    d = rl.to_dict()
    assert [p["config"] for p in d["predictions"]] == ["records", "mini"]
    assert d["predictions"][0]["limited_by"] == "serial"
    assert d["serial"][0]["us_per_element"] == 4.0  # 4096 elements per 4096 rows at 250k/s
    assert d["serial"][1]["us_per_element"] == 8.0  # 64 per batch at 8M/s: 125k elements/s


def test_serial_advice_names_the_stage():
    records = roof.serial_advice(_serial("autotune", 2.5e5))
    assert records.startswith("one thread handles every record of autotune: 4.00 us each")
    assert "read_batch=64" in records and "250,000 examples/s" in records
    mini = roof.serial_advice(_serial("big", 8e6, elements=64.0))
    assert mini.startswith("one thread handles every mini-batch of big (64 per batch")
    assert "larger read_batch" in mini


@pytest.mark.parametrize("fmt", ["tfrecord", "parquet", "columnar"])
def test_roofline_on_real_files(pipeline_of, fmt):
    rl = roof.roofline(
        pipeline_of(fmt),
        batch_size=256,
        measurement=MeasureOptions(windows=1, window_batches=2, warmup_batches=1, cpu_count=2),
    )
    assert [s.name for s in rl.stages] == ["read", "parse", "full"]
    assert all(s.examples_per_s > 0 and s.windows for s in rl.stages)
    assert rl.files == 4 and rl.cores == 2 and rl.bound == min(rl.cpu_bound, rl.read_bound)
    assert rl.bytes_per_example > 0
    assert rl.stage("full").description == FULL_DESCRIPTION
    # Only TFRecord hands records over one by one; the default probes autotune.
    assert [s.config for s in rl.serial] == (["autotune"] if fmt == "tfrecord" else [])


def test_roofline_measures_with_the_roofline_plan_unless_told(pipeline_of):
    rl = roof.roofline(
        pipeline_of("columnar"), batch_size=64, measurement=MeasureOptions(cpu_count=2)
    )
    assert {len(s.windows) for s in rl.stages} == {ROOFLINE_PLAN.windows}
    with pytest.raises(ConfigError, match="roofline: windows must be an int >= 1, got 0"):
        roof.roofline(pipeline_of("columnar"), measurement=MeasureOptions(windows=0))


def test_roofline_probes_the_serial_stage_of_each_config(pipeline_of):
    configs = {
        "records": PipelineConfig.autotune(batch_size=128, read_batch=0),
        "mini": PipelineConfig.autotune(batch_size=128, read_batch=32, shuffle_buffer=256),
        "naive": PipelineConfig.naive(batch_size=128),  # sequential read: no hand-over
    }
    rl = roof.roofline(
        pipeline_of("tfrecord"),
        batch_size=128,
        configs=configs,
        measurement=MeasureOptions(windows=1, window_batches=2, warmup_batches=1),
    )
    by = {s.config: s for s in rl.serial}
    assert set(by) == {"records", "mini"}
    # A 256-record shuffle buffer shrinks mini-batches of 32 to (256 + 256) // 32 = 16.
    assert (by["records"].elements_per_batch, by["mini"].elements_per_batch) == (128.0, 8.0)
    assert all(s.examples_per_s > 0 and len(s.windows) == 1 for s in by.values())
    assert rl.predict("records").bound <= min(rl.bound, by["records"].examples_per_s)
    assert rl.predict("naive").bound == rl.bound


@pytest.mark.parametrize("read_batch", [0, 16])
def test_serial_probe_is_the_consumer_side_over_records_in_memory(pipeline_of, read_batch):
    config = PipelineConfig.autotune(batch_size=100, read_batch=read_batch, shuffle_buffer=50)
    dataset, elements = pipeline_of("tfrecord").serial_probe(config)
    # The 50-record buffer (with its 256-record window) shrinks 16 to (50 + 256) // 32 = 9.
    assert elements == (100 / 9 if read_batch else 100.0)
    batches = list(dataset.take(30))  # endless: more rows than the 1000 on disk
    assert len(batches) == 30 and all(b.shape == (100,) for b in batches)
    assert batches[0].dtype.name == "string" and len(batches[0].numpy()[0]) > 0


@pytest.mark.parametrize("kind", ["parquet", "columnar", "wrapped"])
def test_no_serial_probe_where_elements_are_batches(pipeline_of, kind):
    assert pipeline_of(kind).serial_probe(PipelineConfig.autotune(batch_size=100)) is None


def test_pipeline_stages_adds_the_full_pipeline_to_the_source_stages(pipeline_of):
    stages = pipeline_stages(pipeline_of("tfrecord"), 100)
    assert list(stages.factories) == ["read", "parse", "full"]
    assert stages.files == 4 and stages.descriptions["full"] == FULL_DESCRIPTION
    features, labels = next(iter(stages.factories["full"]()))
    assert features["dense"]["price"].shape == (100,) and labels.shape[0] == 100


def test_roofline_refuses_a_wrapped_dataset(pipeline_of):
    with pytest.raises(SourceError, match="roofline: supported for tfrecord, parquet and colu"):
        roof.roofline(
            pipeline_of("wrapped"),
            batch_size=10,
            measurement=MeasureOptions(windows=1, window_batches=1),
        )
