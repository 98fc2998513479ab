"""`tfinput._src.core.files`: outputs staged and committed whole, output paths checked
before any work; input paths, globs and directories into files; empty files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfinput._src.core import _input_files, files
from tfinput._src.core.files import (
    INCOMPLETE,
    StagedDir,
    check_writable,
    create_parents,
    resolve_paths,
)
from tfinput.errors import ConfigError, DataError, OutputError, SourceError


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


def test_missing_folders_above_a_file_output_pass_and_are_created_when_it_is_written(tmp_path):
    target = tmp_path / "new" / "deeper" / "s.json"
    check_writable(target, what="-o", directory=False)
    assert list(tmp_path.iterdir()) == []  # the check leaves nothing
    create_parents(target)
    assert target.parent.is_dir() and list(target.parent.iterdir()) == []
    create_parents(target)  # again: nothing to do


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


@pytest.mark.parametrize("named", ["glob", "file-list", "one-file"])
def test_files_of_a_folder_holding_the_marker_are_refused_however_named(tmp_path, named):
    out = tmp_path / "out"
    out.mkdir()
    for i in range(2):
        (out / f"part-{i}.rec").write_bytes(b"x")
    (out / INCOMPLETE).write_text("")
    paths = {
        "glob": str(out / "*.rec"),
        "file-list": [str(out / "part-0.rec"), str(out / "part-1.rec")],
        "one-file": str(out / "part-1.rec"),
    }[named]
    with pytest.raises(SourceError, match=r"out is an unfinished output: \.tfinput-incomplete"):
        resolve_paths(paths)


def test_a_staging_folder_and_its_files_are_refused(tmp_path):
    beside = tmp_path / ".out.tfinput-staging-123-abcd"
    inside = tmp_path / "out" / ".tfinput-staging-123-abcd"
    for staging in (beside, inside):
        staging.mkdir(parents=True)
        (staging / "part-0").write_bytes(b"x")
        for paths in (str(staging), str(staging / "part-0"), str(staging / "*")):
            with pytest.raises(SourceError) as e:
                resolve_paths(paths)
            assert str(e.value).endswith(
                f"is part of an unfinished output: it is in {staging}, where a run writing "
                f"{tmp_path / 'out'} stages its files (the run was stopped or is still "
                "writing); read the output once the run has finished, or run it again"
            )


def test_a_file_that_changed_since_its_version_is_named(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"x" * 2000)
    version = _input_files.file_version(str(path))
    _input_files.check_unchanged(str(path), version)  # the same version: nothing to say
    path.write_bytes(b"x" * 1000)
    with pytest.raises(DataError) as e:
        _input_files.check_unchanged(str(path), version)
    assert str(e.value).startswith(
        f"{path}: the file changed while it was read: 2,000 bytes when the pipeline was "
        "built, 1,000 bytes now (rewritten, cut or appended to during the epoch;"
    )
    path.unlink()
    with pytest.raises(DataError, match=r"2,000 bytes when the pipeline was built, it cannot"):
        _input_files.check_unchanged(str(path), version)
    _input_files.check_unchanged(
        "gs://bucket/data.bin", _input_files.file_version("gs://bucket/data.bin")
    )


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


def test_a_full_disk_inside_a_staged_output_is_one_error_and_leaves_nothing(small_disk):
    out = small_disk / "out"
    with (
        pytest.raises(OutputError) as error,
        StagedDir(out, what="datagen: output") as stage,
        open(stage.path / "part-0", "wb") as f,
    ):
        while True:  # until the disk is full: OSError ENOSPC
            f.write(b"\0" * 2**20)
            f.flush()
    assert str(error.value).startswith(
        f"datagen: output {out}: no space left on device: the output needs more than the "
    )
    assert error.value.__cause__ is None and error.value.__suppress_context__
    assert os.listdir(small_disk) == []


@pytest.fixture
def tree(tmp_path):
    """b.rec, a.rec, empty.rec (0 bytes), plus what a directory listing leaves out."""
    for name in ("b.rec", "a.rec", ".hidden", "_SUCCESS", "schema.json"):
        (tmp_path / name).write_bytes(b"data")
    (tmp_path / "empty.rec").write_bytes(b"")
    (tmp_path / "_nested").mkdir()  # _-prefixed, like Spark's _temporary: left out
    (tmp_path / "_nested" / "c.rec").write_bytes(b"data")
    return tmp_path


def test_as_paths():
    assert files.as_paths("a.rec") == ("a.rec",)
    assert files.as_paths(Path("d") / "a.rec") == (str(Path("d") / "a.rec"),)
    assert files.as_paths([Path("a"), "b"]) == ("a", "b")
    with pytest.raises(SourceError, match="no input paths given"):
        files.as_paths([])


def test_a_directory_lists_its_data_files_sorted(tree):
    got = files.resolve_paths(tree)
    assert got == [str(tree / n) for n in ("a.rec", "b.rec", "empty.rec")]


def test_globs_files_and_lists_are_expanded_once_each(tree):
    got = files.resolve_paths(
        [str(tree / "*.rec"), tree / "a.rec", str(tree / "_nested" / "c.rec")]
    )
    assert got == [str(tree / n) for n in ("a.rec", "b.rec", "empty.rec", "_nested/c.rec")]


def _make_entry(directory: Path, kind: str) -> Path:
    path = directory / f"part-{kind}.rec"
    if kind == "broken-link":  # a shard on a volume that is not mounted
        path.symlink_to(directory / "unmounted" / "part-3.rec")
    elif kind == "folder":  # a partitioned layout: date=.../part-0.rec
        path.mkdir()
        (path / "part-0.rec").write_bytes(b"data")
    elif kind == "pipe":
        os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        ("broken-link", "a symbolic link to '{d}/unmounted/part-3.rec', which does not exist"),
        ("folder", "a folder (files inside folders of an input folder are not read)"),
        ("pipe", "not a regular file (a pipe, socket or device)"),
    ],
)
def test_a_directory_entry_that_is_not_a_readable_file_is_an_error(tree, kind, problem):
    """Left out, its data would be lost without a word; given by path it would be a
    clear error, so found in a folder it is one too, naming the entry."""
    entry = _make_entry(tree, kind)
    with pytest.raises(SourceError) as e:
        files.resolve_paths(tree)
    assert str(e.value).startswith(f"{entry}: {problem.format(d=tree)}. ")
    assert "name the files to read (a list or a glob)" in str(e.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_in_a_directory_is_an_error(tree):
    (tree / "a.rec").chmod(0)
    with pytest.raises(SourceError, match=r"a\.rec: not readable \(permission denied\)"):
        files.resolve_paths(tree)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("missing.rec", "TFRecord file '{d}/missing.rec' does not exist"),
        ("*.parquet", "TFRecord pattern '{d}/*.parquet' matches no files"),
        ("sub", "TFRecord pattern '{d}/sub' matches no files"),
    ],
    ids=["missing-file", "glob-matches-nothing", "directory-without-files"],
)
def test_resolve_names_the_path_that_gives_no_file(tmp_path, path, message):
    (tmp_path / "sub").mkdir()
    with pytest.raises(SourceError) as e:
        files.resolve_paths([str(tmp_path / path)], what="TFRecord")
    assert str(e.value) == message.format(d=tmp_path)


@pytest.mark.parametrize("given", ["name", "glob"])
def test_a_fifo_given_by_name_or_matched_by_a_glob_is_refused(tmp_path, given):
    """A FIFO would block the first read until a writer comes (and a reader that reads
    a file twice would see other data): refused at once, naming the path and what it is."""
    (tmp_path / "a.rec").write_bytes(b"data")
    fifo = tmp_path / "stream.rec"
    os.mkfifo(fifo)
    paths = [str(fifo)] if given == "name" else [str(tmp_path / "*.rec")]
    with pytest.raises(SourceError) as e:
        files.resolve_paths(paths, what="TFRecord")
    assert str(e.value) == (
        f"TFRecord file {str(fifo)!r} is a FIFO (named pipe), not a regular file: inputs are "
        "opened more than once (checks, counts, reads), which a stream cannot give; write "
        "the data to a file and name that"
    )
    with pytest.raises(SourceError, match="is a character device, not a regular file"):
        files.resolve_paths(["/dev/null"])


def test_resolve_an_empty_list():
    with pytest.raises(SourceError, match="no Parquet files given"):
        files.resolve_paths([], what="Parquet")


def test_empty_files_are_skipped_and_logged(tree, caplog):
    listed = files.resolve_paths(tree)
    kept, empty = _input_files.drop_empty_files(listed, "skip")
    assert kept == [str(tree / "a.rec"), str(tree / "b.rec")]
    assert empty == [str(tree / "empty.rec")]
    assert f"skipped 1 empty file(s) (0 bytes or 0 rows): {tree / 'empty.rec'}" in caplog.text


def test_empty_files_refused_by_policy_or_when_nothing_is_left(tree):
    listed = files.resolve_paths(tree)
    with pytest.raises(SourceError) as e:
        _input_files.drop_empty_files(listed, "error")
    assert str(e.value).startswith(
        f"1 empty file(s) (0 bytes or 0 rows), first {str(tree / 'empty.rec')!r}; "
    )
    assert "empty_files='skip'" in str(e.value)
    with pytest.raises(
        SourceError,
        match=r"all 1 input file\(s\) are empty \(0 bytes or 0 rows\), first '.*empty.rec'",
    ):
        _input_files.drop_empty_files([str(tree / "empty.rec")], "skip")


def test_empty_files_policy():
    _input_files.check_empty_files_policy("skip")
    _input_files.check_empty_files_policy("error")
    with pytest.raises(SourceError, match="empty_files: expected 'skip' or 'error', got 'ignore'"):
        _input_files.check_empty_files_policy("ignore")
