"""`tfinput._src.core.outputs`: outputs staged and committed whole, output paths checked
before any work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfinput._src.core.outputs import INCOMPLETE, StagedDir, check_writable
from tfinput._src.core.sources.files import resolve_paths
from tfinput.errors import ConfigError, SourceError


def _visible(folder):
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


# ------------------------------------------------------------ check_writable
def test_a_writable_path_passes_and_nothing_is_left(tmp_path):
    check_writable(tmp_path / "new" / "deeper" / "out", what="--out", directory=True)
    check_writable(tmp_path / "result.json", what="--out", directory=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "name, directory, error",
    [
        ("afile/out", True, r"--out .*afile/out: cannot be created: .*afile is a file"),
        ("afile/sub/x.json", False, r"--out .*afile/sub/x.json: cannot be created: .*afile is a"),
        ("afile", True, r"--out .*afile: exists and is not a directory"),
        (".", False, r"--out .*: is a directory; expected a file name"),
    ],
    ids=["under-a-file", "file-under-a-file", "dir-is-a-file", "file-is-a-dir"],
)
def test_an_impossible_path_is_one_error_naming_it(tmp_path, name, directory, error):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match=error):
        check_writable(tmp_path / name, what="--out", directory=directory)


def test_a_folder_that_takes_no_file_is_refused_even_for_root():
    with pytest.raises(
        ConfigError,
        match=r"^--out /proc/tfinput-out: cannot write in /proc: it takes no new files$",
    ):
        check_writable("/proc/tfinput-out", what="--out", directory=True)


# --------------------------------------------------------------- StagedDir
def test_nothing_is_visible_before_the_commit_and_everything_after(tmp_path):
    out = tmp_path / "out"
    with StagedDir(out) as stage:
        (stage.path / "part-0.tfrecord").write_bytes(b"data")
        (stage.path / "schema.json").write_text("{}")
        assert not out.exists() and _visible(tmp_path) == []
        stage.commit()
    assert _visible(out) == ["part-0.tfrecord", "schema.json"]
    assert os.listdir(tmp_path) == ["out"]  # the staging directory is gone


def test_leaving_without_a_commit_deletes_what_was_written(tmp_path):
    with pytest.raises(RuntimeError), StagedDir(tmp_path / "out") as stage:
        (stage.path / "part-0").write_bytes(b"x")
        raise RuntimeError("stopped")
    assert os.listdir(tmp_path) == []


def test_an_older_output_is_replaced_whole(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-old").write_text("old")
    (out / "schema.json").write_text("old")
    with StagedDir(out, replaces=lambda n: n.startswith("part-") or n == "schema.json") as stage:
        (stage.path / "part-new").write_text("new")
        (stage.path / "schema.json").write_text("new")
        assert _visible(out) == ["part-old", "schema.json"]  # the old one, whole, until then
        stage.commit()
    assert _visible(out) == ["part-new", "schema.json"]
    assert (out / "schema.json").read_text() == "new" and os.listdir(tmp_path) == ["out"]


def test_files_of_the_user_s_own_stay_and_no_marker_is_left(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "part-old").write_text("old")
    with StagedDir(out, replaces=lambda n: n.startswith("part-")) as stage:
        (stage.path / "part-new").write_text("new")
        stage.commit()
    assert _visible(out) == ["notes.txt", "part-new"] and not (out / INCOMPLETE).exists()


def test_a_directory_holding_the_marker_is_refused_by_readers(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-00000").write_bytes(b"x")
    (out / INCOMPLETE).write_text("")
    with pytest.raises(SourceError, match=r"out is an unfinished output: \.tfinput-incomplete"):
        resolve_paths(str(out))


def test_a_killed_run_s_staging_is_removed_by_the_next_run(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    stale = tmp_path / f".out.tfinput-staging-{dead}-abcd"
    stale.mkdir()
    (stale / "part-0").write_bytes(b"x")
    with StagedDir(tmp_path / "out") as stage:
        assert not stale.exists()
        stage.commit()
    assert os.listdir(tmp_path) == ["out"]


def test_the_working_directory_is_filled_in_place_not_renamed(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)
    with StagedDir(".") as stage:
        assert stage.inside and stage.path.parent == out
        (stage.path / "part-0").write_bytes(b"x")
        (stage.path / "schema.json").write_text("{}")
        assert _visible(out) == []
        stage.commit()
    assert os.listdir(".") and sorted(os.listdir(out)) == ["part-0", "schema.json"]
    assert Path.cwd() == out and os.listdir(tmp_path) == ["out"]
