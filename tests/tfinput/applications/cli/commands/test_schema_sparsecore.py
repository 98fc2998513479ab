"""``tfinput schema sparsecore`` (`tfinput._src.applications.cli.commands.schema`)."""

from __future__ import annotations

import importlib.util
import json

import pytest

import tfinput
from tests.helpers import run_cli
from tfinput.sparsecore import sparsecore_stats


@pytest.fixture
def data(small_tfrecord, schema_file):
    return [*small_tfrecord, "--schema", schema_file]


def test_prints_the_limits_the_library_computes(data, small_tfrecord, small_schema, capsys):
    code, out, _ = run_cli(
        capsys, "schema", "sparsecore", *data, "--per-replica-batch-size", "64", "--devices", "2",
        "--json",
    )  # fmt: skip
    assert code == 0
    got = json.loads(out)
    want = sparsecore_stats(
        tfinput.tfrecord(small_tfrecord, small_schema), per_replica_batch_size=64, devices=2
    )
    assert got["stacks"] == want.to_dict()["stacks"]
    assert got["table_limits"] == {t: list(v) for t, v in want.table_limits().items()}
    tf_config = got["tensorflow_sparse_core_config"]
    assert set(tf_config["max_ids_per_table"]) == {s.stack.name for s in want.stacks}
    if got["keras_rs_table_configs"] is not None:  # keras-rs installed (Python >= 3.11)
        for name, cfg in got["keras_rs_table_configs"].items():
            assert [cfg["max_ids_per_partition"], cfg["max_unique_ids_per_partition"]] == (
                got["table_limits"][name]
            )
    else:
        assert "pip install 'tfinput[keras-rs]'" in got["keras_rs_note"]

    code, out, _ = run_cli(
        capsys, "schema", "sparsecore", *data, "--per-replica-batch-size", "64", "--devices", "2"
    )
    assert code == 0
    assert "SparseCore limits: 2 device(s) x 4 SparseCores" in out
    assert "all 7 batches scanned" in out and "padding" not in out  # not fed, not counted
    first = want.stacks[0]
    assert f"{first.observed.max_ids_per_partition:,}" in out


def test_limits_report_overflows_and_set_the_exit_code(data, tmp_path, capsys):
    args = ["schema", "sparsecore", *data, "--per-replica-batch-size", "64"]
    code, out, _ = run_cli(capsys, *args, "--limits", "1")
    assert code == 1
    assert "batches overflow" in out and "exceed max_ids_per_partition 1" in out
    code, out, _ = run_cli(capsys, *args, "--limits", "100000")
    assert code == 0 and "no batch of 15 exceeds max_ids_per_partition 100000" in out
    limits = tmp_path / "limits.json"
    limits.write_text(json.dumps({"user": [1, 1]}))
    out_file = tmp_path / "runs" / "sc" / "sc.json"  # its folders created
    code, _, _ = run_cli(capsys, *args, "--limits", limits, "--out", out_file)
    assert code == 1
    written = json.loads(out_file.read_text())
    (report,) = [o for o in written["overflows"] if "user" in o["stack"]]
    assert report["over_any"] == 15 and report["limits"]["max_ids_per_partition"] == 1


def test_sample_and_format(data, capsys):
    code, out, _ = run_cli(
        capsys, "schema", "sparsecore", *data, "--per-replica-batch-size", "64",
        "--max-batches", "2", "--multi-hot-format", "sparse", "--config", "naive", "--json",
    )  # fmt: skip
    assert code == 0
    got = json.loads(out)
    assert got["batches"] == 2 and got["complete"] is False
    assert got["multi_hot_format"] == "sparse" and "1/(n+1)" in got["sampling"]


def test_out_npz_is_the_fdo_form_named_as_its_client_loads(data, tmp_path, capsys):
    # What the client loads: tests/tfinput/applications/sparsecore/test_feed.py (the
    # end with jax-tpu-embedding).
    args = ["schema", "sparsecore", *data, "--per-replica-batch-size", "64", "--devices", "2"]
    code, _, err = run_cli(capsys, *args, "--out", tmp_path / "limits.npz")
    assert code == 2 and "loads only files named fdo_stats_<process>_<timestamp>.npz" in err
    assert f"name it e.g. {tmp_path}/fdo_stats_0_0.npz" in err
    if importlib.util.find_spec("jax_tpu_embedding") is None:
        code, _, err = run_cli(capsys, *args, "--out", tmp_path / "fdo_stats_0_0.npz")
        assert code == 2 and "pip install 'tfinput[sparsecore]'" in err


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--stack", "items,nope"], "no table 'nope'"),
        (["--stack", "auto", "--stack", "items,user"], "auto and none stand alone"),
        (["--limits", "not-a-file"], "neither an int nor a JSON file"),
        (["--devices", "3"], "power of two"),
    ],
)
def test_bad_arguments_are_clean_errors(data, capsys, extra, message):
    code, out, err = run_cli(
        capsys, "schema", "sparsecore", *data, "--per-replica-batch-size", "64", *extra
    )
    assert code != 0 and message in out + err
