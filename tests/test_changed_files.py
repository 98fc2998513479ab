"""A file that changes while an epoch reads it is named, and unfinished outputs are
refused however they are named.

Each source reads real files, a batch is taken, the file is then cut, rewritten or
grown on disk, and the rest of the epoch is drained: through ``build()`` (a plain
tf.data loop: TensorFlow's error, whose message `tfinput.errors.clean_error` reduces
to tfinput's sentence) and through ``iterator()`` (a `DataError`), the message names the
file. The readers hold a small read buffer (``buffer_size``) so that a file of a few
hundred kilobytes is not read whole ahead of the first batch, as a large file is not.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import SEQUENTIAL, run_cli
from tfinput import columnar_records, datagen, service, testing
from tfinput.config import PipelineConfig
from tfinput.errors import DataError, SourceError, clean_error

ROOT = Path(__file__).resolve().parents[1]
CONFIG = PipelineConfig(batch_size=100, drop_remainder=False, shuffle_buffer=0, **SEQUENTIAL)
CHANGED = ": the file changed while it was read: "


@pytest.fixture(scope="module")
def schema():
    return testing.small_schema()


def _batches(pipeline, how: str, config: PipelineConfig = CONFIG):
    """An iterator over an epoch of ``pipeline``: a plain tf.data loop over ``build()``
    or ``iterator()``."""
    return iter(pipeline.build(config)) if how == "build" else pipeline.iterator(config)


def _drain(batches, change) -> int:
    """Read one batch, ``change()`` the files, read the rest: the batches read."""
    next(batches)
    change()
    return 1 + sum(1 for _ in batches)


def _error(pipeline, how: str, change, config: PipelineConfig = CONFIG) -> str:
    """The message the epoch fails with after ``change()``, as the user reads it: a
    `DataError`'s from ``iterator()``, TensorFlow's error's sentence from ``build()``
    (caught here, so that the failed iterator goes with the error's frames)."""
    error = DataError if how == "iterator" else tf.errors.OpError
    try:
        batches = _drain(_batches(pipeline, how, config), change)
    except error as e:
        return str(e) if how == "iterator" else clean_error(e)
    pytest.fail(f"the epoch ended without an error after {batches} batches")


def _with_buffer(pipeline, size: int):
    return dataclasses.replace(
        pipeline, source=dataclasses.replace(pipeline.source, buffer_size=size)
    )


def _record_ends(path: str) -> list[int]:
    """The byte offset after each record of an uncompressed TFRecord file."""
    data = Path(path).read_bytes()
    ends, at = [], 0
    while at < len(data):
        at += 16 + int.from_bytes(data[at : at + 8], "little")
        ends.append(at)
    return ends


# ------------------------------------------------------------------------ TFRecord
@pytest.mark.parametrize("how", ["build", "iterator"])
@pytest.mark.parametrize("cut", ["record-boundary", "10-bytes-into-a-header", "grown"])
def test_a_tfrecord_file_changed_during_the_epoch_is_named(tmp_path, schema, how, cut):
    first, second = testing.write_tfrecord(tmp_path, schema, rows=2000, files=2)
    size = os.path.getsize(second)
    pipeline = _with_buffer(tfinput.tfrecord([first, second], schema), 1024)

    def change():
        if cut == "grown":  # a writer appending to a file being read
            with open(second, "ab") as f:
                f.write(Path(first).read_bytes())
            return
        middle = next(end for end in _record_ends(second) if end >= size // 2)
        os.truncate(second, middle + (10 if cut == "10-bytes-into-a-header" else 0))

    message = _error(pipeline, how, change)
    assert message.startswith(second + CHANGED + f"{size} bytes when the pipeline was built, ")
    assert ("more" if cut == "grown" else "fewer") + " when its records ended" in message


def test_a_file_cut_inside_a_record_during_the_epoch_is_named_as_changed(tmp_path, schema):
    """A cut inside a record's data fails the read at that record (TensorFlow's
    ``truncated record``, also what a read ahead meets when the cut falls where it had
    read a header). ``iterator()`` names the file by its version before the read began
    against now, not as a damaged file."""
    (path,) = testing.write_tfrecord(tmp_path, schema, rows=2000)
    size = os.path.getsize(path)
    at = next(end for end in _record_ends(path) if end >= size // 2) + 20
    pipeline = _with_buffer(tfinput.tfrecord(path, schema), 1024)
    message = _error(pipeline, "iterator", lambda: os.truncate(path, at))
    assert message.startswith(
        f"{path}{CHANGED}{size:,} bytes when the pipeline was built, {at:,} bytes now"
    ), message


@pytest.mark.parametrize("read_batch", [0, 64], ids=["single-records", "mini-batches"])
def test_a_cut_compressed_tfrecord_file_is_named(tmp_path, schema, read_batch):
    (path,) = testing.write_tfrecord(tmp_path, schema, rows=2000, compression="GZIP")
    size = os.path.getsize(path)
    config = dataclasses.replace(CONFIG, read_batch=read_batch)
    pipeline = _with_buffer(tfinput.tfrecord(path, schema), 1024)
    message = _error(pipeline, "iterator", lambda: os.truncate(path, size // 2), config)
    assert message.startswith(f"{path}{CHANGED}{size} bytes when the pipeline was built, fewer")


def test_files_that_stay_whole_read_every_record(tmp_path, schema):
    plain = testing.write_tfrecord(tmp_path, schema, rows=2000, files=2)
    gzip = testing.write_tfrecord(tmp_path, schema, rows=500, compression="GZIP", prefix="gz")
    for files, batches in ((plain, 20), (gzip, 5)):
        for how in ("build", "iterator"):
            pipeline = _with_buffer(tfinput.tfrecord(files, schema), 1024)
            assert _drain(_batches(pipeline, how), lambda: None) == batches


def test_a_tfrecord_file_cut_under_a_tf_data_service_read_is_named(tmp_path, schema):
    """The check is native: a tf.data service worker runs it, and the trainer gets the
    sentence naming the file. The file is cut at a record boundary after the build,
    before the worker reaches it: cut between batches, the worker (which reads ahead)
    may already be past the cut, inside a record, and TensorFlow's reader then fails
    first with a message that names no file ("truncated record at byte N", what
    `Pipeline.iterate` names the file for; docs/data.md)."""
    first, second = testing.write_tfrecord(tmp_path, schema, rows=2000, files=2)
    size = os.path.getsize(second)
    pipeline = _with_buffer(tfinput.tfrecord([first, second], schema), 1024)
    middle = next(end for end in _record_ends(second) if end >= size // 2)
    with service.local_cluster(workers=1) as address:
        read = service.distribute(pipeline.build(CONFIG), address, processing_mode="off")
        os.truncate(second, middle)  # after the build, which knows the file's size
        try:
            sum(1 for _ in read)
        except tf.errors.OpError as e:
            message = clean_error(e)
        else:
            pytest.fail("the epoch ended without an error")
        del read
    assert message.startswith(f"{second}{CHANGED}{size} bytes when the pipeline was built, fewer")


# ------------------------------------------------------------------------- Parquet
@pytest.mark.parametrize("how", ["build", "iterator"])
@pytest.mark.parametrize("change", ["rewritten", "shrunk"])
def test_a_parquet_file_changed_during_the_epoch_is_named(tmp_path, schema, how, change):
    files = testing.write_parquet(tmp_path, schema, rows=2000, files=2, row_group_size=100)
    first, second = (os.path.getsize(f) for f in files)
    pipeline = tfinput.parquet(files, schema)

    def rewrite():
        if change == "rewritten":  # in place, by a writer that opens it for writing
            testing.write_parquet(tmp_path, schema, rows=1800, files=2, row_group_size=70, seed=3)
        else:
            os.truncate(files[1], second // 2)

    message = _error(pipeline, how, rewrite)
    # Rewritten: the first file, being read, is the first to be read again.
    changed, built = (files[0], first) if change == "rewritten" else (files[1], second)
    # The size now is the one the reader found (a rewrite may be under way).
    assert re.match(
        re.escape(f"{changed}{CHANGED}{built:,} bytes when the pipeline was built, ")
        + r"[\d,]+ bytes now \(rewritten, cut or appended to during the epoch; its rows "
        "would not be the file's\\); write files under another name and rename them into "
        "place, then build the pipeline again$",
        message,
    ), message


_ERRORS_ONLY = """
import dataclasses, os, sys
import tfinput
from tfinput import testing
from tfinput.config import PipelineConfig
from tfinput.errors import DataError
schema = testing.small_schema()
cut, at, damaged = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
tfrecord = tfinput.tfrecord(cut, schema)
tfrecord = dataclasses.replace(tfrecord, source=dataclasses.replace(tfrecord.source, buffer_size=1024))
def read(pipeline, change):  # the iterator goes when it returns, not at the exit
    batches = pipeline.iterator(PipelineConfig(batch_size=256))
    try:
        next(batches)
        change()
        for _ in batches:
            pass
    except DataError as e:
        print(f"DataError: {e}")
read(tfrecord, lambda: os.truncate(cut, at))
read(tfinput.parquet(damaged, schema), lambda: None)
"""


def test_a_changed_file_and_a_corrupt_parquet_page_are_one_error_each(tmp_path, schema):
    """From Python, as a user runs it, with the default (parallel, read-ahead) config
    through ``iterator()``: a TFRecord file cut during the epoch, and bytes flipped in a
    data page of a real Parquet file. Each is one `DataError` naming the file (the row
    group for Parquet), and stderr holds TensorFlow's one-line notes at most: no
    traceback of the reader's threads or callbacks."""
    (cut,) = testing.write_tfrecord(tmp_path, schema, rows=2000, prefix="cut")
    at = next(end for end in _record_ends(cut) if end >= os.path.getsize(cut) // 2)
    files = testing.write_parquet(tmp_path, schema, rows=8000, files=2, row_group_size=500)
    column = pq.ParquetFile(files[1]).metadata.row_group(3).column(0)
    data = bytearray(Path(files[1]).read_bytes())
    for i in range(column.data_page_offset + 20, column.data_page_offset + 60):
        data[i] ^= 0xFF
    Path(files[1]).write_bytes(bytes(data))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # TensorFlow's own logging, as a user has it
    out = subprocess.run(
        [sys.executable, "-c", _ERRORS_ONLY, cut, str(at), *files],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    changed, damaged = out.stdout.splitlines()
    assert changed.startswith(f"DataError: {cut}{CHANGED}"), out.stdout
    assert damaged == (
        f"DataError: {files[1]}: row group 3 (rows 1500-1999 of the file) cannot be read: "
        + damaged.split(" cannot be read: ", 1)[1]
    )
    assert damaged.endswith("; the file is damaged there (write it again)"), damaged
    assert "Traceback" not in out.stderr and 'File "' not in out.stderr, out.stderr[-3000:]
    assert len(out.stderr.splitlines()) <= 16, out.stderr[-3000:]


# ------------------------------------------------------------------------ columnar
def _cut_after_first_chunks(path: str, chunks: int) -> None:
    manifest = columnar_records.read_manifest(path)
    os.truncate(path, manifest.entry(path).offsets[chunks])


@pytest.mark.parametrize("how", ["build", "iterator"])
def test_a_columnar_file_cut_during_the_epoch_is_named(tmp_path, schema, how):
    files = testing.write_columnar(tmp_path, schema, rows=4000, files=2, chunk_rows=100)
    size = os.path.getsize(files[1])
    pipeline = _with_buffer(tfinput.columnar(tmp_path, schema), 1024)
    message = _error(pipeline, how, lambda: _cut_after_first_chunks(files[1], 10))
    assert message.startswith(f"{files[1]}{CHANGED}{size} bytes when the pipeline was built, ")
    assert "fewer when its chunks ended" in message


def test_a_columnar_file_cut_under_the_global_shuffle_is_named(tmp_path, schema):
    files = testing.write_columnar(tmp_path, schema, rows=4000, files=2, chunk_rows=100)
    pipeline = tfinput.columnar(tmp_path, schema, shuffle="global")
    config = dataclasses.replace(CONFIG, shuffle_seed=1)
    message = _error(pipeline, "iterator", lambda: _cut_after_first_chunks(files[1], 2), config)
    assert message.startswith(f"{files[1]}: truncated: the manifest's chunk at byte ")
    assert message.endswith("(the file was cut or replaced while it was read)")


# -------------------------------------------------------------- unfinished outputs
@pytest.fixture
def unfinished(tmp_path) -> Path:
    """An output that `tfinput datagen` stopped in while moving its 8 shards into a
    folder that holds a file of the user's own: 4 shards in, the marker there. (The
    5th shard's name is taken by a folder, so that the move fails there: the state a
    run killed at that point leaves.)"""
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "part-00004-of-00008.tfrecord").mkdir()
    with pytest.raises(OSError):
        datagen.generate_files(out, preset="small", rows=800, files=8)
    (out / "part-00004-of-00008.tfrecord").rmdir()
    assert len(list(out.glob("*.tfrecord"))) == 4 and (out / ".tfinput-incomplete").exists()
    return out


@pytest.mark.parametrize("named", ["directory", "glob", "file-list"])
def test_an_unfinished_output_is_refused_however_it_is_named(unfinished, schema, named):
    paths = {
        "directory": str(unfinished),
        "glob": str(unfinished / "*.tfrecord"),
        "file-list": sorted(str(p) for p in unfinished.glob("*.tfrecord")),
    }[named]
    with pytest.raises(SourceError) as e:
        tfinput.tfrecord(paths, schema).build(CONFIG)
    assert str(e.value) == (
        f"{unfinished} is an unfinished output: .tfinput-incomplete is there, so the run "
        "writing it stopped while moving its files in; run it again (convert: with "
        "--overwrite) or delete the directory"
    )


def test_check_refuses_a_glob_of_an_unfinished_output(unfinished, schema, tmp_path, capsys):
    schema.to_json(str(tmp_path / "schema.json"))
    code, out, err = run_cli(
        capsys, "check", unfinished / "*.tfrecord", "--schema", tmp_path / "schema.json"
    )
    assert code == 2, out + err
    assert f"{unfinished} is an unfinished output: .tfinput-incomplete is there" in err


def test_files_of_a_staging_folder_are_refused(tmp_path, schema):
    staging = tmp_path / ".out.tfinput-staging-999999-abcd"
    files = testing.write_tfrecord(staging, schema, rows=100, files=2)
    for paths in (str(staging), str(staging / "*.tfrecord"), files):
        with pytest.raises(SourceError) as e:
            tfinput.tfrecord(paths, schema).build(CONFIG)
        assert f"is part of an unfinished output: it is in {staging}, where a run writing " in (
            str(e.value)
        )
        assert f"{tmp_path / 'out'} stages its files" in str(e.value)


def test_a_columnar_output_holding_the_marker_is_refused(tmp_path, schema):
    testing.write_columnar(tmp_path / "out", schema, rows=300, chunk_rows=100)
    (tmp_path / "out" / ".tfinput-incomplete").write_text("")
    for paths in (tmp_path / "out", tmp_path / "out" / "manifest.json"):
        with pytest.raises(SourceError, match=r"out is an unfinished output: \.tfinput-incomp"):
            tfinput.columnar(paths, schema).build(CONFIG)
