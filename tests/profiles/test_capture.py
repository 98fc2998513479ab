"""profiles._capture: marked steps of every step kind, a standard profile directory, the
recorded settings, and clear errors for bad configs and pipelines."""

from __future__ import annotations

import json

import pytest

from profiles import CaptureConfig, ProfileError, analyze, capture
from profiles._testing import fast_pipeline
from profiles._xplane import host_planes, load_xspace, stat_value
from tfinput import steps
from tfinput.errors import ConfigError


def _events(path):
    """(line, name, start_ps, end_ps, stats) of every host event in a trace file."""
    space = load_xspace(path).space
    out = []
    for plane in host_planes(space):
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            base = line.timestamp_ns * 1000
            for e in line.events:
                start = base + e.offset_ps
                out.append(
                    (
                        line.id,
                        plane.event_metadata[e.metadata_id].name,
                        start,
                        start + e.duration_ps,
                        {names[s.metadata_id]: stat_value(s, names) for s in e.stats},
                    )
                )
    return out


def _tiny_keras_model():
    import keras

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def _tf_function_step():
    import tensorflow as tf

    @tf.function
    def train_step(batch):
        features, labels = batch
        return tf.reduce_sum(tf.square(features - labels))

    return train_step


STEP_KINDS = {
    "input_only": lambda: steps.input_only(),
    "keras": lambda: steps.keras_step(_tiny_keras_model()),
    "keras_fit": lambda: steps.keras_fit_step(_tiny_keras_model()),
    "function": lambda: steps.function_step(_tf_function_step()),
    "simulated": lambda: steps.simulated_step(0.003),
}


@pytest.fixture(scope="module", params=list(STEP_KINDS), ids=list(STEP_KINDS))
def captured(request, tmp_path_factory):
    logdir = tmp_path_factory.mktemp(f"capture-{request.param}")
    result = capture(
        lambda: fast_pipeline(batch_size=8).map(lambda x, y: (x[:, None], y[:, None])),
        STEP_KINDS[request.param](),
        logdir=logdir,
        steps=5,
        warmup=2,
    )
    return request.param, result


def test_writes_a_standard_profile_directory(captured):
    kind, result = captured
    assert result.run_dir.parent == result.logdir / "plugins" / "profile"
    assert len(result.trace_files) == 1
    assert result.trace_files[0].name.endswith(".xplane.pb")
    assert result.trace_files[0].parent == result.run_dir
    assert result.step["kind"] == kind


def test_trace_opens_in_xprof_as_is(captured):
    from xprof.convert import raw_to_tool_data

    _, result = captured
    paths = [str(p) for p in result.trace_files]
    trace, _ = raw_to_tool_data.xspace_to_tool_data(paths, "trace_viewer", {})
    events = json.loads(trace)["traceEvents"]
    names = {str(e.get("name")) for e in events}
    assert {"train 2", "train 6", "Iterator::Root"} <= names
    overview, _ = raw_to_tool_data.xspace_to_tool_data(paths, "overview_page", {})
    assert json.loads(overview)


def test_each_profiled_step_is_marked_with_next_inside(captured):
    kind, result = captured
    events = _events(result.trace_files[0])
    markers = [e for e in events if e[1] == "train" and e[4].get("_r") == 1]
    assert [m[4]["step_num"] for m in markers] == [2, 3, 4, 5, 6]
    roots = [e for e in events if e[1] == "Iterator::Root"]
    assert len(roots) >= 5
    # model.fit fetches the batch inside its train function, on an executor thread: the
    # marker spans it in time, on another line.
    same_line = kind != "keras_fit"
    for line, _, start, end, _ in roots:
        assert any(
            (m[0] == line or not same_line) and m[2] <= start and end <= m[3] for m in markers
        ), "every next() of the profiled steps happens inside a step marker"


def test_records_how_the_trace_was_taken(captured):
    import tensorflow as tf

    kind, result = captured
    saved = json.loads((result.run_dir / "tfinput_capture.json").read_text())
    assert saved == json.loads(json.dumps(result.metadata))
    assert saved["config"] == {"steps": 5, "warmup": 2, "step_name": "train"}
    assert saved["step"]["kind"] == kind
    assert saved["tensorflow"] == tf.__version__
    assert saved["cpu_count"] >= 1
    assert len(saved["wall_step_ms"]) == 5 == len(result.wall_step_ms)
    assert "element_spec" in saved["pipeline"]


def test_analysis_sees_each_step_kind(captured):
    kind, result = captured
    analysis = analyze(result.logdir)
    assert analysis.is_complete, analysis.diagnostics
    # xprof may leave out a step cut by the profiler's start or stop.
    assert 3 <= len(analysis.steps) <= 5
    assert analysis.capture["step"]["kind"] == kind
    if kind == "simulated":
        assert analysis.simulated_device_ms == pytest.approx(3.0)
    else:
        assert analysis.simulated_device_ms is None
    if kind in ("keras", "keras_fit", "function"):
        assert analysis.host_compute_ms > 0


def test_plain_callable_step_is_wrapped(tmp_path):
    seen = []
    result = capture(fast_pipeline(), seen.append, logdir=tmp_path, steps=3, warmup=1)
    assert len(seen) == 4
    assert result.step["kind"] == "function"


def test_config_object_and_overrides(tmp_path):
    config = CaptureConfig(steps=3, warmup=0, step_name="step")
    result = capture(fast_pipeline(), logdir=tmp_path, config=config, steps=4)
    assert result.config == CaptureConfig(steps=4, warmup=0, step_name="step")
    names = {e[1] for e in _events(result.trace_files[0])}
    assert "step" in names and "train" not in names


@pytest.mark.parametrize(
    ("field", "value"),
    [("steps", 0), ("steps", "10"), ("steps", True), ("warmup", -1), ("step_name", "")],
    ids=["zero-steps", "string-steps", "bool-steps", "negative-warmup", "empty-name"],
)
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ConfigError, match=f"CaptureConfig.{field}"):
        CaptureConfig(**{field: value})


def test_unknown_override_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match=r"no field.*'stpes'"):
        capture(fast_pipeline(), logdir=tmp_path, stpes=3)


def test_pipeline_must_be_a_dataset_or_factory(tmp_path):
    with pytest.raises(ConfigError, match=r"tf\.data\.Dataset"):
        capture(42, logdir=tmp_path)


def test_pipeline_running_out_in_warmup(tmp_path):
    import tensorflow as tf

    with pytest.raises(ProfileError, match="ran out after 2 batches during the warm-up"):
        capture(tf.data.Dataset.range(2), logdir=tmp_path, steps=3, warmup=4)


def test_pipeline_running_out_while_profiling_stops_the_profiler(tmp_path):
    import tensorflow as tf

    with pytest.raises(ProfileError, match=r"ran out after 3 batches.*partial trace"):
        capture(tf.data.Dataset.range(3), logdir=tmp_path / "a", steps=5, warmup=1)
    # The profiler was stopped: a new capture works.
    result = capture(fast_pipeline(), logdir=tmp_path / "b", steps=3, warmup=1)
    assert result.trace_files


def test_profiler_already_running(tmp_path):
    import tensorflow as tf

    tf.profiler.experimental.start(str(tmp_path / "other"))
    try:
        with pytest.raises(ProfileError, match="another profiler session"):
            capture(fast_pipeline(), logdir=tmp_path / "mine", steps=3, warmup=0)
    finally:
        tf.profiler.experimental.stop()


def test_keras_fit_capture_marks_each_call_with_steps_per_execution(tmp_path):
    """With steps_per_execution 2 a marker spans one call into the train function (two
    batches; ``steps`` counts calls), and the capture records the limitation of xprof's
    step grouping for such calls."""
    step = steps.keras_fit_step(_tiny_keras_model())
    from tfinput.config import PipelineConfig

    step = step.prepare(PipelineConfig(steps_per_execution=2))
    result = capture(
        lambda: fast_pipeline(batch_size=8).map(lambda x, y: (x[:, None], y[:, None])),
        step,
        logdir=tmp_path,
        steps=5,
        warmup=1,
    )
    markers = [e for e in _events(result.trace_files[0]) if e[1] == "train" and e[4].get("_r") == 1]
    assert [m[4]["step_num"] for m in markers] == [1, 2, 3, 4, 5]
    assert len(result.wall_step_ms) == 5
    assert result.step["steps_per_execution"] == 2
    assert "steps_per_execution 1" in result.metadata["note"]
