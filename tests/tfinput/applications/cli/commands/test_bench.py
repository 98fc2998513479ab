"""``tfinput bench``: configs side by side on real files, JSON and table output, the
roofline report and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli
from tfinput.config import PipelineConfig

SHORT = ("--windows", "1", "--window-batches", "2", "--warmup-batches", "1")


@pytest.fixture
def data_dir(tmp_path, small_tfrecord, small_schema):
    """The TFRecord fixture files in a directory with their ``schema.json``."""
    d = tmp_path / "data"
    d.mkdir()
    for path in small_tfrecord:
        (d / Path(path).name).symlink_to(path)
    small_schema.to_json(d / "schema.json")
    return d


def test_cli_bench_json_on_real_files(data_dir, tmp_path, capsys):
    saved = tmp_path / "mine.json"
    PipelineConfig(map_parallelism=2, prefetch=1).to_json(saved)
    code, out, _ = run_cli(
        capsys, "bench", data_dir, "--config", "naive", "--config", saved,
        "--batch-size", "256", *SHORT, "--json", "--roofline", "--roofline-windows", "1",
        "--out", tmp_path / "runs" / "bench" / "r.json",  # its folders created
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert [r["name"] for r in data["results"]] == ["naive", "mine"]
    assert data["results"][1]["config"]["batch_size"] == 256
    assert data["roofline"]["limited_by"] in ("cpu", "read")
    (pred,) = data["roofline"]["predictions"]  # naive: sequential read, no serial stage
    assert pred["config"] == "mine" and pred["limited_by"] in ("cpu", "read", "serial")
    mine = data["results"][1]
    assert mine["roofline_fraction"] == pytest.approx(
        mine["examples_per_s"]["median"] / pred["bound_examples_per_s"], abs=1e-3
    )
    assert json.loads((tmp_path / "runs" / "bench" / "r.json").read_text()) == data


def test_cli_bench_table(small_parquet, small_schema, tmp_path, capsys):
    small_schema.to_json(tmp_path / "schema.json")
    code, out, _ = run_cli(
        capsys, "bench", *small_parquet, "--schema", tmp_path / "schema.json",
        "--config", "naive", "--batch-size", "512",
        "--windows", "1", "--window-batches", "1", "--warmup-batches", "1",
    )  # fmt: skip
    assert code == 0 and "naive" in out and "examples/s" in out and "best: naive" in out


def test_cli_bench_table_with_roofline_and_a_simulated_step(data_dir, capsys):
    code, out, _ = run_cli(
        capsys, "bench", data_dir, "--config", "naive", "--config", "autotune",
        "--baseline", "autotune", "--batch-size", "100", *SHORT,
        "--roofline", "--roofline-windows", "1", "--device-time-ms", "1", "--cpu-count", "2",
    )  # fmt: skip
    assert code == 0
    assert "x autotune" in out and "of roofline" in out and " x2, TensorFlow" in out
    assert "roofline: " in out and "-bound (CPU: 2 cores x" in out
    assert "CPU cost per example on one core: read " in out
    # autotune's serial stage and prediction; naive reads sequentially (none).
    assert "autotune: serial stage 2 element(s) per batch x " in out  # 100 rows / 64
    assert "naive: serial stage" not in out


def test_cli_bench_json_records_the_simulated_step(data_dir, capsys):
    code, out, _ = run_cli(
        capsys, "bench", data_dir, "--config", "naive", "--batch-size", "100", *SHORT,
        "--step-ms", "2", "--json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["method"]["step"] == {
        "kind": "simulated",
        "name": "simulated accelerator 2 ms/batch",
        "device_time_s": 0.002,
    }
    assert data["baseline"] == "naive" and data["roofline"] is None


def test_cli_bench_errors_exit_2(tmp_path, capsys):
    (tmp_path / "x.tfrecord").write_bytes(b"")
    code, _, err = run_cli(capsys, "bench", tmp_path / "x.tfrecord")
    assert code == 2
    assert err.startswith("tfinput: error: no --schema given") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--config", "fastest"), "config 'fastest' is neither a preset"),
        (("--config", "naive", "--baseline", "other"), "baseline 'other' is not one of"),
        (("--config", "naive", "--windows", "0"), "windows must be an int >= 1, got 0"),
        (("--target-rate", "1000"), "--target-rate needs --service"),
        (("--service-workers", "2"), "--service-workers needs --service"),
        (("--service", "local:x"), "expected local:N"),
    ],
    ids=["unknown-config", "unknown-baseline", "no-windows", "target", "workers", "local"],
)
def test_cli_bench_bad_options_exit_2_with_one_line(data_dir, capsys, args, message):
    code, _, err = run_cli(capsys, "bench", data_dir, *args)
    assert code == 2
    assert err.startswith("tfinput: error: ") and message in err and err.count("\n") == 1


def test_cli_bench_through_a_local_service_sizes_the_workers(
    small_columnar, small_schema, tmp_path, capsys
):
    """``--service local:1``: autotune read through one tf.data service worker process;
    the per-worker rate and the workers a target rate needs are printed."""
    small_schema.to_json(tmp_path / "schema.json")
    code, out, _ = run_cli(
        capsys, "bench", Path(small_columnar[0]).parent, "--schema", tmp_path / "schema.json",
        "--service", "local:1", "--batch-size", "100", *SHORT, "--target-rate", "1e9",
    )  # fmt: skip
    assert code == 0
    assert "1 worker" in out and "examples/s per worker (1 worker(s))" in out
    assert "1,000,000,000 examples/s needs about" in out
