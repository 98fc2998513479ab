"""`tfinput.bench.bound`: the roofline, from measured stages and on real files."""

from __future__ import annotations

import pytest

from tfinput import bench
from tfinput.bench.bound import FULL_DESCRIPTION, pipeline_stages
from tfinput.errors import ConfigError, SourceError


def _stage(name, cpu_rate, *, wall=None, cores=1.0):
    return bench.Stage(
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
    rl = bench.roofline_from_stages(stages, cores=2, files=files)
    assert (rl.limited_by, rl.bound) == (limited_by, bound)
    assert rl.cpu_bound == 2e5  # cores x examples per CPU-second, not the wall rate


def test_roofline_from_stages_needs_all_three_in_order():
    with pytest.raises(ConfigError, match=r"roofline: stages \['parse'\] are missing"):
        bench.roofline_from_stages([_stage("read", 1e6), _stage("full", 1e5)], cores=2, files=2)
    rl = bench.roofline_from_stages(
        [_stage("full", 1e5), _stage("read", 1e6), _stage("parse", 2e5)], cores=4, files=0
    )
    assert [s.name for s in rl.stages] == ["read", "parse", "full"]
    assert rl.read_bound == 1e6  # no file listed still counts one read stream
    assert rl.stage("parse").examples_per_cpu_s == 2e5


def test_cost_per_example_is_the_difference_of_stages():
    # parse measured faster than read (noise): its own cost is clamped at zero.
    rl = bench.roofline_from_stages(
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
        return bench.Window(
            batches=1, examples=examples, seconds=1.0, cpu_seconds=cpu, batch_seconds=(1.0,),
            wait_seconds=0.0,
        )  # fmt: skip

    s = bench.Stage.from_windows("read", "bytes", [window(100, 0.5), window(300, 0.0)])
    assert (s.examples_per_s, s.examples_per_cpu_s) == (200.0, 250.0)  # medians of 100|300, 200|300
    assert s.cores_busy == 0.25 and len(s.windows) == 2
    assert _stage("x", 0.0).us_per_example == float("inf")


@pytest.mark.parametrize("fmt", ["tfrecord", "parquet", "columnar"])
def test_roofline_on_real_files(pipeline_of, fmt):
    rl = bench.roofline(
        pipeline_of(fmt),
        batch_size=256,
        windows=1,
        window_batches=2,
        warmup_batches=1,
        cpu_count=2,
    )
    assert [s.name for s in rl.stages] == ["read", "parse", "full"]
    assert all(s.examples_per_s > 0 and s.windows for s in rl.stages)
    assert rl.files == 4 and rl.cores == 2 and rl.bound == min(rl.cpu_bound, rl.read_bound)
    assert rl.bytes_per_example > 0
    assert rl.stage("full").description == FULL_DESCRIPTION


def test_pipeline_stages_adds_the_full_pipeline_to_the_source_stages(pipeline_of):
    stages = pipeline_stages(pipeline_of("tfrecord"), 100)
    assert list(stages.factories) == ["read", "parse", "full"]
    assert stages.files == 4 and stages.descriptions["full"] == FULL_DESCRIPTION
    features, labels = next(iter(stages.factories["full"]()))
    assert features["dense"]["price"].shape == (100,) and labels.shape[0] == 100


def test_roofline_refuses_a_wrapped_dataset(pipeline_of):
    with pytest.raises(SourceError, match="roofline: supported for tfrecord, parquet and colu"):
        bench.roofline(pipeline_of("wrapped"), batch_size=10, windows=1, window_batches=1)
