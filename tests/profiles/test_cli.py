"""profiles._cli (with the private _demo module): `tfinput profile` and `tfinput inspect`,
called in-process through `tfinput.cli.main`."""

from __future__ import annotations

import json
import shutil
import textwrap
import xml.etree.ElementTree as ET

import pytest

from profiles._xplane import find_trace
from tests.helpers import run_cli as run
from tfinput._src.applications.cli.args import PIPELINE_FORMS
from tfinput.config import PipelineConfig

# ------------------------------------------------------------------- inspect


def test_inspect_report(capsys, slow_map_logdir):
    code, out, _ = run(capsys, "inspect", slow_map_logdir)
    assert code == 0
    for text in (
        "Step time",
        "Waiting for input",
        "Host compute",
        "Device compute",
        "n/a (no accelerator: CPU_ONLY)",
        "xprof says",
        "Bottleneck: ParallelMapV2 (parse): self time",
        "parallelism 1: raise map parallelism (map_parallelism)",
        "critical path: Root > Prefetch > ParallelMapV2",
        "Per-step breakdown",
        "warm-up 2, 8 profiled steps",
    ):
        assert text in out, text


def test_inspect_json(capsys, slow_map_logdir):
    code, out, _ = run(capsys, "inspect", slow_map_logdir, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["is_complete"] is True
    assert 0 < data["input_wait"]["minimum"] <= data["input_wait"]["average"]
    assert data["input_wait"]["average"] <= data["input_wait"]["maximum"] <= 1
    assert data["bottleneck"]["display_name"] == "ParallelMapV2 (parse)"
    assert data["bottleneck"]["knobs"] == ["map_parallelism"]
    assert data["device_compute_ms"] is None
    assert data["xprof_conclusion"]


def test_inspect_html_is_self_contained(capsys, slow_map_logdir, tmp_path):
    path = tmp_path / "report" / "profile.html"
    code, out, _ = run(capsys, "inspect", slow_map_logdir, "--html", path)
    assert code == 0 and f"HTML report written to {path}" in out
    page = path.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )
    svgs = [page[i : page.index("</svg>", i) + 6] for i in _find_all(page, "<svg ")]
    assert len(svgs) == 2
    breakdown, stage_bars = (ET.fromstring(s) for s in svgs)
    ns = "{http://www.w3.org/2000/svg}"
    steps = json.loads(run(capsys, "inspect", slow_map_logdir, "--json")[1])["steps"]
    bar_titles = [r.find(f"{ns}title").text for r in breakdown.iter(f"{ns}rect") if len(r)]
    assert {t.split(":")[0] for t in bar_titles} == {s["step"] for s in steps}
    assert any(": Input " in t for t in bar_titles)
    labels = [t.text for t in stage_bars.iter(f"{ns}text")]
    assert "ParallelMapV2 (parse)" in labels


def _find_all(text, needle):
    i = text.find(needle)
    while i != -1:
        yield i
        i = text.find(needle, i + 1)


def test_inspect_compare(capsys, slow_map_logdir, fast_logdir):
    code, out, _ = run(capsys, "inspect", "--compare", slow_map_logdir, fast_logdir)
    assert code == 0
    for text in (
        "before / after",
        "Waiting for input (avg)",
        "Step time (avg)",
        "Bottleneck",
        "Stage #1 (self time)",
        "ParallelMapV2 (parse)",
        " pts",
    ):
        assert text in out, text
    code, out, _ = run(capsys, "inspect", "--compare", slow_map_logdir, fast_logdir, "--json")
    data = json.loads(out)
    assert data["input_wait_change"] < 0
    assert data["before"]["bottleneck"]["display_name"] == "ParallelMapV2 (parse)"


def test_inspect_compare_html(capsys, slow_map_logdir, fast_logdir, tmp_path):
    path = tmp_path / "compare.html"
    code, _, _ = run(capsys, "inspect", "--compare", slow_map_logdir, fast_logdir, "--html", path)
    assert code == 0
    page = path.read_text()
    assert "A (before)" in page and "B (after)" in page and page.count("<svg ") == 4


def test_inspect_without_step_markers_exits_1_with_advice(capsys, unmarked_logdir):
    code, out, _ = run(capsys, "inspect", unmarked_logdir)
    assert code == 1
    assert "no step markers" in out and "step_num=i, _r=1" in out


@pytest.fixture
def broken(request, tmp_path, slow_map_logdir):
    run_dir = tmp_path / "plugins" / "profile" / "run"
    if request.param == "missing":
        return tmp_path / "missing", "does not exist"
    if request.param == "no-trace":
        return tmp_path, "no profiler trace"
    run_dir.mkdir(parents=True)
    good = find_trace(slow_map_logdir).paths[0].read_bytes()
    if request.param == "truncated":
        (run_dir / "h.xplane.pb").write_bytes(good[: len(good) // 3])
        return tmp_path, "truncated or not an XSpace"
    if request.param == "foreign":
        (run_dir / "h.xplane.pb").write_bytes(b"PK\x03\x04 a zip file, not a trace")
        return tmp_path, "cannot be read as a profiler trace"
    raise AssertionError(request.param)


@pytest.mark.parametrize("broken", ["missing", "no-trace", "truncated", "foreign"], indirect=True)
def test_inspect_unusable_input_exits_2_with_message(capsys, broken):
    path, expected = broken
    code, out, err = run(capsys, "inspect", path)
    assert code == 2
    assert out == ""
    assert err.startswith("tfinput inspect: error: ")
    assert expected in err and "tfinput profile --logdir" in err


def test_inspect_several_hosts(capsys, slow_map_logdir, tmp_path):
    run_dir = tmp_path / "plugins" / "profile" / "run"
    run_dir.mkdir(parents=True)
    for host in ("a", "b"):
        shutil.copy(find_trace(slow_map_logdir).paths[0], run_dir / f"{host}.xplane.pb")
    code, out, _ = run(capsys, "inspect", tmp_path)
    assert code == 0
    assert "2 hosts in run plugins/profile/run (a, b)" in out
    assert "Stages on host a" in out and "Stages on host b" in out
    code, out, _ = run(capsys, "inspect", tmp_path, "--host", "b")
    assert code == 0 and "Stages on host a" not in out
    code, _, err = run(capsys, "inspect", tmp_path, "--host", "c")
    assert code == 2 and "no host 'c'" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["inspect"], "give a LOGDIR"),
        (["inspect", "x", "--compare", "a", "b"], "not both"),
        (["inspect", "--compare", "a", "b", "--run", "r"], "--run does not apply"),
        (["inspect", "x", "--top", "0"], "--top must be >= 1"),
        (["profile", "--demo", "--step", "simulated"], "needs --device-time-ms"),
        (["profile", "--demo", "--device-time-ms", "5"], "only applies to --step simulated"),
        (["profile", "--demo", "--model", "m:f"], "only applies to --step keras or keras_fit"),
        (["profile", "--demo", "--step-fn", "m:f"], "only applies to --step function or jax"),
    ],
    ids=[
        "nothing-to-inspect",
        "logdir-and-compare",
        "run-with-compare",
        "bad-top",
        "simulated-without-time",
        "time-without-simulated",
        "model-without-keras",
        "step-fn-without-function",
    ],
)
def test_usage_errors_exit_2(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


# ------------------------------------------------------------------- profile


@pytest.fixture
def pipeline_module(tmp_path):
    path = tmp_path / "my_pipelines.py"
    path.write_text(
        textwrap.dedent(
            """
            import tensorflow as tf

            def make(config=None):
                batch = 8 if config is None else config.batch_size
                return (
                    tf.data.Dataset.range(10**9)
                    .batch(batch, drop_remainder=True)
                    .map(lambda x: (tf.cast(x, tf.float32)[:, None], tf.cast(x % 2, tf.float32)))
                    .prefetch(2)
                )

            def no_config():
                return make()

            def make_pipeline(config):  # the README's shape: the config is required
                return make(config)

            def two_arguments(config, other):
                return make(config)

            def short():
                return tf.data.Dataset.range(3).batch(1)

            def not_a_dataset():
                return [1, 2, 3]

            class Pipeline:
                def build(self, config):
                    return make(config)

            PIPELINE = Pipeline()

            def jax_step():
                import jax.numpy as jnp

                return (lambda state, batch: state + jnp.sum(batch[0])), jnp.float32(0)

            def model():
                import keras

                m = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
                m.compile(optimizer="sgd", loss="mse")
                return m
            """
        )
    )
    return path


@pytest.mark.parametrize(
    ("spec", "extra", "kind"),
    [
        ("make", ["--step", "simulated", "--device-time-ms", "2"], "simulated"),
        ("no_config", [], "input_only"),
        ("PIPELINE", [], "input_only"),
        ("make", ["--step", "keras", "--model", "{module}:model"], "keras"),
        ("make", ["--step", "keras"], "keras"),
        ("make", ["--step", "keras_fit", "--model", "{module}:model"], "keras_fit"),
        ("make", ["--step", "keras_fit"], "keras_fit"),
        ("make", ["--step", "jax", "--step-fn", "{module}:jax_step"], "jax"),
    ],
    ids=[
        "factory-simulated",
        "zero-arg-factory",
        "object-with-build",
        "keras-model",
        "keras-default",
        "keras-fit-model",
        "keras-fit-default",
        "jax-step",
    ],
)
def test_profile_pipeline(capsys, tmp_path, pipeline_module, spec, extra, kind):
    logdir = tmp_path / "logs"
    extra = [a.format(module=pipeline_module) for a in extra]
    code, out, err = run(
        capsys,
        "profile",
        "--pipeline",
        f"{pipeline_module}:{spec}",
        "--logdir",
        logdir,
        "--steps",
        "4",
        "--warmup",
        "1",
        "--json",
        *extra,
    )
    assert code == 0, err
    assert f"profile written to {logdir}" in err
    data = json.loads(out)
    assert data["capture"]["step"]["kind"] == kind
    assert data["capture"]["config"] == {"steps": 4, "warmup": 1, "step_name": "train"}
    assert data["is_complete"]
    if kind == "simulated":
        assert data["simulated_device_ms"] == pytest.approx(2.0)
    assert list(logdir.glob("plugins/profile/*/*.xplane.pb"))
    if kind == "jax":  # JAX's own trace, kept in the run: its XLA executions per step
        assert list(logdir.glob("plugins/profile/*/jax/plugins/profile/*/*.xplane.pb"))
        jax = data["jax_device"]
        assert jax["platform"] == "cpu" and len(jax["steps"]) == 4
        for s in jax["steps"]:
            assert 0 < s["compute_ms"] <= s["step_ms"] and 0 <= s["transfer_ms"] <= s["step_ms"]
    else:
        assert data["jax_device"] is None


def _profile_without_analysis(capsys, tmp_path, *argv):
    """``tfinput profile ARGV`` for 3 steps (warm-up 1) into ``tmp_path/logs``, without the
    analysis: the ``tfinput_capture.json`` it wrote."""
    logdir = tmp_path / "logs"
    code, _, err = run(
        capsys,
        "profile",
        *argv,
        "--logdir",
        logdir,
        "--steps",
        "3",
        "--warmup",
        "1",
        "--no-analyze",
    )
    assert code == 0, err
    (meta,) = logdir.glob("plugins/profile/*/tfinput_capture.json")
    return json.loads(meta.read_text())


def test_profile_passes_the_config(capsys, tmp_path, pipeline_module, monkeypatch):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"config": {"batch_size": 16}}))
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = _profile_without_analysis(
        capsys, tmp_path, "--pipeline", "my_pipelines:make", "--config", config
    )
    assert "shape=(16, 1)" in saved["pipeline"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no-colon", "expected MODULE:FUNCTION"),
        ("surely_not_a_module_xyz:make", "cannot import 'surely_not_a_module_xyz'"),
        ("{module}:missing", "has no attribute 'missing'"),
        ("{module}:not_a_dataset", "or an iterator of batches, got list"),
        ("{module}:short", "ran out after"),
    ],
    ids=["no-colon", "no-module", "no-attribute", "not-a-dataset", "runs-out"],
)
def test_profile_bad_pipeline_exits_2(capsys, tmp_path, pipeline_module, spec, message):
    code, _, err = run(
        capsys,
        "profile",
        "--pipeline",
        spec.format(module=pipeline_module),
        "--logdir",
        tmp_path,
        "--steps",
        "5",
        "--warmup",
        "1",
    )
    assert code == 2
    assert message in err and err.startswith("tfinput profile: error: ")


def test_profile_config_with_zero_arg_factory(capsys, tmp_path, pipeline_module):
    config = tmp_path / "c.json"
    config.write_text("{}")
    code, _, err = run(
        capsys,
        "profile",
        "--pipeline",
        f"{pipeline_module}:no_config",
        "--config",
        config,
        "--logdir",
        tmp_path,
    )
    assert code == 2 and "takes no argument" in err


def test_profile_without_config_calls_a_config_function_with_the_default(
    capsys, tmp_path, pipeline_module, monkeypatch
):
    """``make_pipeline(config)`` without ``--config`` gets the default config, as
    ``tune`` gives it (the signature decides), instead of being called with nothing."""
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = _profile_without_analysis(capsys, tmp_path, "--pipeline", "my_pipelines:make_pipeline")
    assert f"shape=({PipelineConfig().batch_size}, 1)" in saved["pipeline"]


def test_profile_refuses_a_function_it_cannot_call_in_one_line(capsys, tmp_path, pipeline_module):
    code, _, err = run(
        capsys, "profile", "--pipeline", f"{pipeline_module}:two_arguments", "--logdir", tmp_path
    )
    assert code == 2, err
    assert err.strip().splitlines() == [
        f"tfinput profile: error: --pipeline {pipeline_module}:two_arguments: "
        "two_arguments(config, other) needs arguments tfinput cannot give; expected "
        f"{PIPELINE_FORMS}"
    ]


@pytest.fixture(scope="module")
def demo_data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("demo-data")  # generated once, by the first test using it


@pytest.mark.slow  # generates the 200,000-row demo data set
def test_profile_demo(capsys, tmp_path, demo_data_dir, monkeypatch):
    monkeypatch.setenv("TFINPUT_DATA_DIR", str(demo_data_dir))  # the demo writes its data here
    config = tmp_path / "demo.json"
    config.write_text(json.dumps({"batch_size": 256, "map_parallelism": 1, "prefetch": 1}))
    code, out, err = run(
        capsys,
        "profile",
        "--demo",
        "--config",
        config,
        "--logdir",
        tmp_path / "logs",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--html",
        tmp_path / "demo.html",
    )
    assert code == 0, err
    # The demo profiles input only: no verdict on training, the pipeline's own stages.
    assert "Verdict: measured input only (no training step)" in out, out
    assert "Bottleneck:" in out and "Stages on host" in out
    assert "parse" in out  # the demo's map is named "parse"
    assert (tmp_path / "demo.html").is_file()
    assert list(demo_data_dir.glob("demo-criteo-like-*/part-*.tfrecord"))


def test_profile_keras_fit_with_the_config_steps_per_execution(capsys, tmp_path, pipeline_module):
    """``--config`` sets model.fit's steps_per_execution; one marker per call."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"batch_size": 8, "steps_per_execution": 2}))
    saved = _profile_without_analysis(
        capsys,
        tmp_path,
        "--pipeline",
        f"{pipeline_module}:make",
        "--config",
        config,
        "--step",
        "keras_fit",
    )
    assert saved["step"]["kind"] == "keras_fit" and saved["step"]["steps_per_execution"] == 2
    assert len(saved["wall_step_ms"]) == 3


# One process for both steps: starting TensorFlow, JAX and Keras costs more than a capture.
_RANKING_STEPS = """
import contextlib, io, json, sys
from tfinput.cli import main

config, logdir = sys.argv[1:]
results = {}
for step in ("ranking", "ranking_fit"):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([
            "profile", "--demo", "--config", config, "--step", step,
            "--logdir", f"{logdir}/{step}", "--steps", "4", "--warmup", "1", "--json",
        ])
    results[step] = {"code": code, "data": json.loads(out.getvalue())}
print(json.dumps(results))
"""


@pytest.mark.slow
def test_profile_the_ranking_steps_on_the_jax_backend(tmp_path, demo_data_dir):
    """`tfinput profile --step ranking` and `--step ranking_fit` under KERAS_BACKEND=jax: a
    trace with step markers that the analysis reads, the backend recorded, and the device
    compute and transfer per step from JAX's own trace."""
    import os
    import subprocess
    import sys

    pytest.importorskip("jax")
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    env["TFINPUT_DATA_DIR"] = str(demo_data_dir)
    config = tmp_path / "demo.json"
    config.write_text(json.dumps({"batch_size": 256}))
    cmd = [sys.executable, "-c", _RANKING_STEPS, str(config), str(tmp_path / "logs")]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout)
    for step, kind in (("ranking", "keras"), ("ranking_fit", "keras_fit")):
        code, data = results[step]["code"], results[step]["data"]
        assert code in (0, 1), step
        assert data["capture"]["step"]["backend"] == "jax"
        assert data["capture"]["step"]["kind"] == kind
        assert data["steps"], data.get("diagnostics")
        # The step's compute is invisible to TensorFlow's profiler on JAX: a verdict
        # from the measured wait, no stage named when the input does not limit it.
        assert data["verdict"] and data["input_limits"] in (True, False)
        if data["input_limits"] is False:
            assert data["bottleneck"] is None
        # ... and JAX's own trace shows the step's XLA executions and its batch copies.
        jax = data["jax_device"]
        assert jax["platform"] == "cpu" and len(jax["steps"]) == 4, step
        for s in jax["steps"]:
            assert 0 < s["compute_ms"] <= s["step_ms"], (step, s)
            assert 0 < s["transfer_ms"] <= s["step_ms"], (step, s)


# ------------------------------------------------ the built-in model of --step keras


def test_demo_model_takes_any_dense_numeric_features():
    import numpy as np
    import tensorflow as tf

    from profiles._testing import demo_keras_model

    spec = (
        {
            "a": tf.TensorSpec([None], tf.int64),
            "b": tf.TensorSpec([None, 3], tf.float32),
            "c": tf.TensorSpec([None, 2, 2], tf.bool),
        },
        tf.TensorSpec([None], tf.float32),
    )
    model = demo_keras_model(spec)
    batch = {"a": np.arange(5), "b": np.ones((5, 3), np.float32), "c": np.ones((5, 2, 2), bool)}
    assert model.predict_on_batch(batch).shape == (5, 1)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("not-a-pair", "needs a pipeline of (features, labels) batches"),
        ("string-feature", "feature 'id' is TensorSpec(shape=(None,), dtype=tf.string"),
    ],
    ids=["not-a-pair", "string-feature"],
)
def test_demo_model_rejects_what_it_cannot_take(spec, message):
    import tensorflow as tf

    from profiles._testing import demo_keras_model
    from tfinput.errors import ConfigError

    element_spec = {
        "not-a-pair": tf.TensorSpec([None], tf.float32),
        "string-feature": ({"id": tf.TensorSpec([None], tf.string)}, tf.TensorSpec([None])),
    }[spec]
    with pytest.raises(ConfigError) as err:
        demo_keras_model(element_spec)
    assert message in str(err.value) and "--model module:function" in str(err.value)
