"""What tfinput writes gets the user's umask: every file and folder that its commands
(datagen, schema infer, convert to each format, bench, tune with its study, profile,
schema sparsecore) and a Keras checkpoint write, run under umask 022 and under 077, has
exactly the mode the umask gives (0666 or 0777 less the umask) and none is
world-writable; temporary files (the tuner's host lock, anything left in TMPDIR) get no
more than the umask allows.

The worker (`tests/file_modes_worker.py`) runs both umasks in one process, one after
the other, so that TensorFlow and Keras are imported once."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("file_modes_worker.py")
MASKS = ("022", "077")


def _modes(root: Path) -> dict[str, int]:
    """Every path under ``root`` (itself excluded) -> its permission bits."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            out[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("modes")
    tmp = root / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env["TFINPUT_DATA_DIR"] = str(root / "data-dir")
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(root), *MASKS],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("done"), proc.stderr[-3000:]
    return root


@pytest.mark.parametrize("mask", MASKS)
def test_everything_written_has_the_mode_the_umask_gives(written, mask):
    umask = int(mask, 8)
    modes = _modes(written / f"umask-{mask}")
    # What each command writes is there (a check that the run wrote what it should).
    for expected in (
        "datagen/schema.json",
        "convert-columnar/manifest.json",
        "convert-parquet/schema.json",
        "convert-tfrecord/schema.json",
        "inferred-schema.json",
        "bench.json",
        "study.db",
        "tune/out/result.json",
        "tune/out/report.html",
        "profile",
        "profile-report.html",
        "sparsecore-limits.json",
        "ckpt",
    ):
        assert expected in modes, f"{expected} not written: {sorted(modes)}"
    assert any(p.endswith(".xplane.pb") for p in modes), "no profile trace written"
    assert any(p.startswith("ckpt/ckpt-") for p in modes), "no checkpoint folder written"
    wrong = {}
    for path, mode in modes.items():
        is_dir = (written / f"umask-{mask}" / path).is_dir()
        want = (0o777 if is_dir else 0o666) & ~umask
        if mode != want:
            wrong[path] = f"{mode:o} (umask {mask} gives {want:o})"
    assert not wrong, wrong
    assert not [p for p, m in modes.items() if m & stat.S_IWOTH]


def test_temporary_files_get_no_more_than_the_umask_allows(written):
    left = _modes(written / "tmp")
    assert any(p.startswith("tfinput-tune-") for p in left), left  # the host lock
    # The loosest umask of the run (022) writes nothing group- or world-writable.
    too_open = {p: f"{m:o}" for p, m in left.items() if m & 0o022}
    assert not too_open, too_open
