"""Outputs on a full disk (a 5 MiB file system of the test's own): ``tfinput convert``
(to every format) and ``tfinput datagen`` (both formats) end in one line naming the
output and the lack of space, and leave nothing at the output, no staging folder
either; with ``--overwrite`` the previous output stays whole. The file writers differ
(TensorFlow's TFRecord writer raises ``ResourceExhaustedError``, pyarrow an
``OSError``); the staged output they write into turns either into the same error."""

from __future__ import annotations

import hashlib
import os

import pytest

from tests.helpers import fill, run_cli
from tfinput import testing
from tfinput.datagen import generate_files

#: Bytes left free on the small disk: less than any of these outputs needs.
LEAVE = 64 * 1024


@pytest.fixture(scope="module")
def tfrecord_input(tmp_path_factory):
    """2,000 criteo-like rows (1.4 MiB of TFRecord) and their schema.json."""
    folder = tmp_path_factory.mktemp("full-disk-input")
    schema = testing.criteo_like_schema()
    testing.write_tfrecord(folder, schema, rows=2000, files=1, seed=0)
    schema.to_json(folder / "schema.json")
    return folder


def _digest(folder):
    """``{name: sha256}`` of a folder's files."""
    return {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
        for name in sorted(os.listdir(folder))
    }


def _refused(capsys, out, argv, what):
    """Run the command; it must end in one line naming ``out`` and the full disk."""
    code, _, err = run_cli(capsys, *argv)
    assert code == 2, err
    (line,) = err.splitlines()
    assert line.startswith(f"tfinput: error: {what} {out}: no space left on device: ")
    assert "free space or choose an output on a larger disk" in line
    return line


@pytest.mark.parametrize("to", ["tfrecord", "parquet", "columnar"])
def test_convert_on_a_full_disk_is_one_line_and_leaves_nothing(
    small_disk, tfrecord_input, capsys, to
):
    fill(small_disk, leave=LEAVE)
    out = small_disk / "out"
    argv = ["convert", tfrecord_input, "--out", out, "--to", to, "--rows-per-file", "500"]
    _refused(capsys, out, argv, "convert: output")
    assert os.listdir(small_disk) == ["filler"]  # no output, no staging folder


@pytest.mark.parametrize("fmt", ["tfrecord", "parquet"])
def test_datagen_on_a_full_disk_is_one_line_and_leaves_nothing(small_disk, capsys, fmt):
    fill(small_disk, leave=LEAVE)
    out = small_disk / "gen"
    argv = ["datagen", out, "--rows", "2000", "--files", "2", "--format", fmt]
    _refused(capsys, out, argv, "datagen: output")
    assert os.listdir(small_disk) == ["filler"]


def test_a_convert_overwriting_on_a_full_disk_keeps_the_previous_output(
    small_disk, tmp_path, capsys
):
    out = small_disk / "out"
    generate_files(tmp_path / "small", rows=200, files=1, format="parquet")
    code, _, err = run_cli(capsys, "convert", tmp_path / "small", "--out", out, "--to", "parquet")
    assert code == 0, err
    before = _digest(out)
    generate_files(tmp_path / "big", rows=2000, files=1, format="parquet")
    fill(small_disk, leave=LEAVE)
    argv = ["convert", tmp_path / "big", "--out", out, "--to", "tfrecord", "--overwrite"]
    line = _refused(capsys, out, argv, "convert: output")
    assert "what was there before is unchanged" in line
    assert _digest(out) == before
    assert sorted(os.listdir(small_disk)) == ["filler", "out"]
