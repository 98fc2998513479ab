"""Outputs are whole or absent: a conversion and a data generation killed with SIGKILL
at several points (as their staged files appear) leave nothing that a pipeline or
``tfinput check`` takes for data, and the next run to the same output succeeds and
leaves no staging directory behind.

The killed child makes the library call ``tfinput convert`` / ``tfinput datagen`` make
(`tfinput.convert.convert`, `tfinput.datagen.generate_files`), writing Parquet, so that
it does not import TensorFlow: each run then takes seconds, not minutes, on a busy
machine. The staging and the commit are the same for every format.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import tfinput
from tfinput._src.applications.cli.registry import main as cli_main
from tfinput.errors import SourceError
from tfinput.schema import Categorical, Dense, Schema, Table

ROOT = Path(__file__).resolve().parents[1]
#: Bound on a run reaching its kill point.
START_TIMEOUT = 240.0
_CONVERT = (
    "import sys\n"
    "from tfinput.convert import convert\n"
    "from tfinput.schema import Schema\n"
    "convert(sys.argv[1], sys.argv[2], to='parquet', rows_per_file=5000,\n"
    "        schema=Schema.from_json(sys.argv[3]))\n"
)
_DATAGEN = (
    "import sys\n"
    "from tfinput.datagen import generate_files\n"
    "generate_files(sys.argv[1], rows=300_000, files=8, format='parquet', chunk_rows=8192)\n"
)

#: Kill points: ``(id, staged data files to wait for)``; 0 kills as soon as the staging
#: directory appears, ``None`` once ``schema.json`` is staged (just before the commit).
#: A kill after more data files (say 5) leaves the same state as after one: staged files
#: in the hidden staging directory, no output, the same clean-up on the next run.
POINTS = [("staging-created", 0), ("1-file", 1), ("schema-staged", None)]


def _staged(parent: Path, name: str) -> list[Path]:
    return sorted(parent.glob(f".{name}.tfinput-staging-*"))


def _reached(parent: Path, name: str, files: int | None) -> bool:
    staging = _staged(parent, name)
    if not staging:
        return False
    entries = os.listdir(staging[0]) if staging[0].exists() else []
    if files is None:
        return "schema.json" in entries
    return sum(1 for e in entries if e.startswith("part-")) >= files


def _run_and_kill(code: str, args: list[str], out: Path, files: int | None) -> bool:
    """Run ``python -c CODE ARGS`` and SIGKILL it at the kill point; whether it was
    killed (False: it finished first)."""
    log = out.parent / "run.log"
    with open(log, "wb") as f:  # a file, not a pipe: a full pipe would stop the run
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            cwd=ROOT,
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""},
        )
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while time.monotonic() < deadline:
            if _reached(out.parent, out.name, files):
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
                return True
            if proc.poll() is not None:
                assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]
                return False
            time.sleep(0.002)
        pytest.fail(f"{args} did not reach its kill point in {START_TIMEOUT:.0f} s")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    return False


def _assert_absent(out: Path, schema: Path, capsys) -> None:
    """Nothing at ``out`` is data: no directory, ``check`` fails naming it, a pipeline
    refuses it, a glob of its folder finds none of its files."""
    assert not out.exists()
    assert cli_main(["check", str(out), "--schema", str(schema)]) == 2
    assert capsys.readouterr().err == f"tfinput: error: input file {str(out)!r} does not exist\n"
    with pytest.raises(SourceError, match="does not exist"):
        pipeline = tfinput.parquet(str(out), Schema.from_json(str(schema)))
        pipeline.build(tfinput.PipelineConfig(batch_size=8))
    assert not [p for p in glob.glob(str(out.parent / "*")) if "part-" in p]


def _assert_whole(out: Path, rows: int) -> None:
    files = sorted(out.glob("part-*"))
    assert (out / "schema.json").is_file()
    assert sum(pq.ParquetFile(p).metadata.num_rows for p in files) == rows
    assert not list(out.parent.glob(f".{out.name}.tfinput-*"))  # no staging left


@pytest.fixture(scope="module")
def csv_input(tmp_path_factory) -> tuple[Path, Path]:
    """A 200,000-row CSV file and its schema."""
    folder = tmp_path_factory.mktemp("convert-input")
    path = folder / "in.csv"
    with open(path, "w") as f:
        f.write("label,count,city\n")
        f.writelines(f"{i % 2},{i % 97},c{i % 1013}\n" for i in range(200_000))
    schema = folder / "schema.json"
    Schema.of(
        [Dense(name="count"), Categorical(name="city", table="city", dtype="string", default="")],
        tables=[Table(name="city", vocabulary_size=1000, dim=8)],
        labels=["label"],
    ).to_json(str(schema))
    return path, schema


@pytest.mark.slow
@pytest.mark.parametrize("point, files", POINTS, ids=[p for p, _ in POINTS])
def test_a_killed_convert_leaves_no_data(point, files, tmp_path, csv_input, capsys):
    from tfinput.convert import convert

    path, schema = csv_input
    out = tmp_path / "out"
    killed = _run_and_kill(_CONVERT, [str(path), str(out), str(schema)], out, files)
    assert killed or files not in (0, 1)  # the early points are always reached in time
    if killed:
        _assert_absent(out, schema, capsys)
    else:  # finished before the kill point was seen: then whole
        _assert_whole(out, 200_000)
    schema_ = Schema.from_json(str(schema))
    convert(path, out, to="parquet", rows_per_file=5000, schema=schema_, overwrite=True)
    _assert_whole(out, 200_000)  # the next run succeeds, and removes the killed one's staging


@pytest.mark.slow
@pytest.mark.parametrize("point, files", POINTS[:2], ids=[p for p, _ in POINTS[:2]])
def test_a_killed_datagen_leaves_no_data(point, files, tmp_path, capsys):
    from tfinput.datagen import generate_files, preset_schema

    out = tmp_path / "out"
    schema = tmp_path / "schema.json"
    preset_schema("criteo-like").to_json(str(schema))
    killed = _run_and_kill(_DATAGEN, [str(out)], out, files)
    assert killed
    _assert_absent(out, schema, capsys)
    generate_files(out, rows=3000, files=2, format="parquet")
    _assert_whole(out, 3000)


# --------------------------------------------------------------------------- export
def _staged_savedmodel(parent: Path, name: str) -> bool:
    """Whether an export's staging folder holds ``saved_model.pb`` (the SavedModel is
    loadable from there: what a kill left at the output before exports were staged)."""
    return any((s / "saved_model.pb").exists() for s in _staged(parent, name))


@pytest.fixture(scope="module")
def keras_model(tmp_path_factory) -> tuple[Path, Path]:
    """A built ranking model saved as ``.keras``, and its schema's JSON."""
    from tests.helpers import SEQUENTIAL, SMALL_RANKING_MODEL
    from tfinput import testing
    from tfinput.models import ranking_model

    folder = tmp_path_factory.mktemp("export-model")
    schema = testing.small_schema()
    files = testing.write_tfrecord(folder / "data", schema, rows=100)
    config = tfinput.PipelineConfig(batch_size=100, shuffle_buffer=0, **SEQUENTIAL)
    features, _ = next(iter(tfinput.tfrecord(files, schema).build(config)))
    model = ranking_model(schema, jit_compile=False, **SMALL_RANKING_MODEL)
    model(features)
    model.save(folder / "model.keras")
    schema.to_json(str(folder / "schema.json"))
    return folder / "model.keras", folder / "schema.json"


@pytest.mark.slow
def test_a_killed_export_leaves_nothing_and_the_next_export_succeeds(tmp_path, keras_model):
    """``tfinput export`` SIGKILLed once ``saved_model.pb`` is written (before
    ``assets.extra/`` and the commit): nothing at the output, and the next export to it
    writes a whole SavedModel and removes the killed run's staging folder."""
    import tensorflow as tf

    model, schema = keras_model
    out = tmp_path / "served"
    args = [str(out), "--model", str(model), "--schema", str(schema)]
    log = tmp_path / "export.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tfinput.cli", "export", *args],
            cwd=ROOT,
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""},
        )
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while not _staged_savedmodel(tmp_path, "served"):
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "export did not write saved_model.pb in time"
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert not out.exists() and _staged(tmp_path, "served")  # only the hidden staging

    assert cli_main(["export", *args]) == 0
    assert (out / "saved_model.pb").is_file() and (out / "fingerprint.pb").is_file()
    assert sorted(os.listdir(out / "assets.extra")) == [
        "tfinput_schema.json",
        "tfinput_serving.json",
    ]
    assert set(tf.saved_model.load(str(out)).signatures) == {
        "serving_default",
        "serve_raw",
        "transform",
    }
    assert sorted(os.listdir(tmp_path)) == ["export.log", "served"]  # the staging is gone
