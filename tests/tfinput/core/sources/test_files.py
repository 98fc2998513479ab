"""`tfinput._src.core.sources.files`: paths, globs and directories into files; empty files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tfinput._src.core.sources import files
from tfinput.errors import SourceError


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
    kept, empty = files.drop_empty_files(listed, "skip")
    assert kept == [str(tree / "a.rec"), str(tree / "b.rec")]
    assert empty == [str(tree / "empty.rec")]
    assert f"skipped 1 empty file(s) (0 bytes or 0 rows): {tree / 'empty.rec'}" in caplog.text


def test_empty_files_refused_by_policy_or_when_nothing_is_left(tree):
    listed = files.resolve_paths(tree)
    with pytest.raises(SourceError) as e:
        files.drop_empty_files(listed, "error")
    assert str(e.value).startswith(
        f"1 empty file(s) (0 bytes or 0 rows), first {str(tree / 'empty.rec')!r}; "
    )
    assert "empty_files='skip'" in str(e.value)
    with pytest.raises(
        SourceError,
        match=r"all 1 input file\(s\) are empty \(0 bytes or 0 rows\), first '.*empty.rec'",
    ):
        files.drop_empty_files([str(tree / "empty.rec")], "skip")


def test_empty_files_policy():
    files.check_empty_files_policy("skip")
    files.check_empty_files_policy("error")
    with pytest.raises(SourceError, match="empty_files: expected 'skip' or 'error', got 'ignore'"):
        files.check_empty_files_policy("ignore")
