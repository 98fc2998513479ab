"""`tfinput._src.core.columnar.format`: stored columns, record keys and checksums; the
manifest, its JSON form, how it is found, and what building a pipeline checks against it."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest

import tfinput
from tests.helpers import run_cli
from tfinput import testing
from tfinput._src.core.columnar.format import (
    Column,
    chunk_digest,
    merge_manifests,
    payload_check,
    payload_keys,
    storage_columns,
)
from tfinput._src.core.columnar.writer import verify_files
from tfinput.columnar_records import FORMAT, FileEntry, Manifest, is_columnar, read_manifest
from tfinput.config import PipelineConfig
from tfinput.errors import DataError, SchemaError, SourceError


def test_storage_columns_of_the_small_schema(small_schema):
    columns = storage_columns(small_schema)
    assert [c.name for c in columns] == list(dict.fromkeys(small_schema.columns()))
    described = {c.name: c.describe() for c in columns}
    assert described["embedding"] == "fixed float32[3]"
    assert described["history"] == "list int64"
    assert described["tags"] == "list string"
    assert described["label"] == "fixed float32"


def test_column_keys_and_json_form():
    vec = Column(name="v", layout="fixed", dtype="float32", width=4)
    lst = Column(name="h", layout="list", dtype="int64")
    assert (vec.keys, lst.keys) == (("v",), ("h", "h@lengths"))
    assert vec.to_dict() == {"name": "v", "layout": "fixed", "dtype": "float32", "width": 4}
    assert lst.to_dict() == {"name": "h", "layout": "list", "dtype": "int64"}
    assert payload_keys([vec, lst]) == ["v", "h", "h@lengths"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(layout="ragged", dtype="int64"), "column 'c': layout must be 'fixed' or 'list'"),
        (dict(layout="fixed", dtype="int32"), "column 'c': dtype must be float32, int64 or"),
    ],
    ids=["layout", "dtype"],
)
def test_column_validation(kwargs, message):
    with pytest.raises(SchemaError, match=message):
        Column(name="c", **kwargs)


def test_reserved_column_names_are_rejected():
    schema = tfinput.Schema.of([tfinput.Dense(name="@rows")], labels=["label"])
    with pytest.raises(SchemaError, match="column name '@rows' is reserved"):
        storage_columns(schema)


def test_one_column_read_with_two_layouts_is_refused():
    # Two shapes: the schema itself refuses it.
    with pytest.raises(SchemaError, match="column 'x' is read as one value by feature 'a' and"):
        tfinput.Schema.of(
            [tfinput.Dense(name="a", column="x"), tfinput.Dense(name="b", column="x", length=2)],
            labels=["label"],
        )
    # One value each, stored two ways (float and id): the columnar layout refuses it.
    schema = tfinput.Schema.of(
        [tfinput.Dense(name="a", column="x"), tfinput.Categorical(name="b", column="x", table="t")],
        tables=[tfinput.Table(name="t", vocabulary_size=10, dim=4)],
        labels=["label"],
    )
    with pytest.raises(SchemaError, match="column 'x' is read by feature 'a' as fixed float32 and"):
        storage_columns(schema)


def test_checksums_are_eight_bytes_per_value_and_change_with_the_data():
    check = payload_check([b"abc", b"", b"xyz"])
    assert len(check) == 24 and check[:8] != check[16:]
    assert payload_check([b"abc", b"", b"xyz"]) == check
    digest = chunk_digest(check)
    assert len(digest) == 16 and int(digest, 16) >= 0
    assert chunk_digest(payload_check([b"abd", b"", b"xyz"])) != digest


def test_manifest_records_layout_chunks_and_checksums(small_columnar, small_schema):
    m = read_manifest(small_columnar[0])
    assert m.to_dict()["format"] == FORMAT and m.chunk_rows == 100 and m.rows == 1000
    assert [f.rows for f in m.files] == [300, 300, 300, 100]
    assert [f.chunks for f in m.files] == [3, 3, 3, 1]
    assert all(len(d) == 16 for f in m.files for d in f.digests)
    assert all(os.path.getsize(p) == f.bytes for p, f in zip(m.paths, m.files))
    assert {c.name: c.describe() for c in m.columns}["embedding"] == "fixed float32[3]"
    assert {c.name: c.describe() for c in m.columns}["tags"] == "list string"
    assert verify_files(small_columnar) == []


def test_the_manifest_is_found_from_the_directory_the_json_or_a_data_file(small_columnar):
    directory = os.path.dirname(small_columnar[0])
    m = read_manifest(directory)
    assert m.path == os.path.join(directory, "manifest.json") and m.directory == directory
    assert read_manifest(m.path) == m == read_manifest(small_columnar[2])
    assert m.paths == small_columnar
    assert m.entry(small_columnar[1]) == m.files[1] and m.entry("other.tfcol") is None
    assert m.column("history").layout == "list" and m.column("nope") is None
    assert m.schema == testing.small_schema()


def test_json_round_trip(small_columnar):
    m = read_manifest(small_columnar[0])
    again = Manifest.from_dict(json.loads(json.dumps(m.to_dict())), path=m.path)
    assert again == m


def test_chunks_of_a_file_entry(small_schema):
    entry = FileEntry(name="f.tfcol", rows=250, bytes=900, offsets=(0, 400, 800), digests=("",) * 3)
    m = Manifest(
        path="d/manifest.json", chunk_rows=100, schema=small_schema, columns=(), files=(entry,)
    )
    assert entry.chunks == 3
    assert [entry.chunk_at(b) for b in (0, 399, 400, 850)] == [0, 0, 1, 2]
    assert [m.chunk_rows_range(entry, c) for c in range(3)] == [(0, 99), (100, 199), (200, 249)]
    assert m.rows == 250 and m.paths == [os.path.join("d", "f.tfcol")]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("format"), r"format 'no format field' is not supported"),
        (lambda d: d.pop("files"), r"malformed manifest \(KeyError: 'files'\)"),
        (
            lambda d: d["files"][0]["digests"].pop(),
            r"malformed manifest: file 'part-00000-of-00004.tfcol' has 300 rows, 3 offsets "
            r"and 2 digests for chunks of 100 rows",
        ),
    ],
    ids=["no-format", "no-files", "digest-missing"],
)
def test_malformed_manifests_are_source_errors(small_columnar, change, message):
    data = read_manifest(small_columnar[0]).to_dict()
    change(data)
    with pytest.raises(SourceError, match=rf"^m\.json: {message}"):
        Manifest.from_dict(data, path="m.json")


def test_is_columnar(tmp_path, copy, small_parquet):
    assert is_columnar(copy) and is_columnar(copy / "manifest.json")
    assert not is_columnar(small_parquet[0]) and not is_columnar(tmp_path)
    data = json.loads((copy / "manifest.json").read_text())
    data["format"] = "tfinput.columnar/9"
    (copy / "manifest.json").write_text(json.dumps(data))
    assert is_columnar(copy)  # another version: still columnar (reading it says why not)
    with pytest.raises(SourceError, match=r"format 'tfinput\.columnar/9' is not supported"):
        read_manifest(copy)


@pytest.mark.parametrize(
    ("damage", "error", "message"),
    [
        ("version", SourceError, r"format 'tfinput.columnar/2' is not supported; this "),
        (
            "missing-file",
            SourceError,
            r"part-00001-of-00004.tfcol: listed in the manifest .* missing",
        ),
        ("unlisted-file", SourceError, r"extra.tfcol: not listed in the manifest"),
        ("bigger-file", DataError, r"the file was rewritten or appended to after its manifest"),
        ("no-manifest", SourceError, r"no columnar manifest"),
    ],
    ids=["version", "missing-file", "unlisted-file", "bigger-file", "no-manifest"],
)
def test_manifest_problems(copy, damage, error, message):
    manifest = copy / "manifest.json"
    paths = [copy]
    if damage == "version":
        data = json.loads(manifest.read_text())
        data["format"] = "tfinput.columnar/2"
        manifest.write_text(json.dumps(data))
    elif damage == "missing-file":
        next(copy.glob("part-00001-*")).unlink()
    elif damage == "unlisted-file":
        shutil.copy(next(copy.glob("part-00001-*")), copy / "extra.tfcol")
        paths = [str(copy / "*.tfcol")]
    elif damage == "bigger-file":
        with open(next(copy.glob("part-00001-*")), "ab") as f:
            f.write(b"\0" * 8)
    else:
        manifest.unlink()
    with pytest.raises(error, match=message):
        tfinput.columnar(paths, testing.small_schema()).build(PipelineConfig(batch_size=200))


def test_bench_cli_finds_a_columnar_directory_by_its_manifest(small_columnar, capsys):
    code, out, _ = run_cli(
        capsys,
        "bench",
        os.path.dirname(small_columnar[0]),
        "--config",
        "naive",
        "--batch-size",
        "200",
        "--windows",
        "1",
        "--window-batches",
        "2",
        "--warmup-batches",
        "1",
        "--roofline",
        "--roofline-windows",
        "1",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert (
        data["results"][0]["name"] == "naive" and data["results"][0]["examples_per_s"]["median"] > 0
    )
    assert data["roofline"]["limited_by"] in ("cpu", "read")


def _shards(tmp_path, small_columnar, n: int) -> list[Manifest]:
    """``n`` copies of the small data set, each in its own directory (as parallel tasks
    write them)."""
    parts = []
    for i in range(n):
        d = tmp_path / "parts" / f"task-{i}"
        shutil.copytree(os.path.dirname(small_columnar[0]), d)
        parts.append(read_manifest(d))
    return parts


def test_merge_manifests_joins_shards_with_their_checksums(tmp_path, small_columnar):
    parts = _shards(tmp_path, small_columnar, 2)
    out = tmp_path / "out" / "manifest.json"
    merged = merge_manifests(parts, out)
    assert read_manifest(out) == merged and merged.rows == 2000
    assert [f.name for f in merged.files] == [f"part-{i:05d}-of-00008.tfcol" for i in range(8)]
    before = [(f.rows, f.bytes, f.offsets, f.digests) for m in parts for f in m.files]
    assert [(f.rows, f.bytes, f.offsets, f.digests) for f in merged.files] == before
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(
        ["manifest.json", *(f.name for f in merged.files)]
    )
    assert not any((tmp_path / "parts").rglob("*.*"))  # files moved, part manifests gone
    assert verify_files(out.parent) == []
    ds = tfinput.columnar(out.parent).build(PipelineConfig(batch_size=200, drop_remainder=False))
    assert sum(int(labels.shape[0]) for _, labels in ds) == 2000


def test_merge_manifests_refuses_shards_of_other_conversions(tmp_path, small_columnar):
    out = tmp_path / "out" / "manifest.json"
    with pytest.raises(SourceError, match=r"no manifests to merge"):
        merge_manifests([], out)
    a, b = _shards(tmp_path, small_columnar, 2)
    other = dataclasses.replace(b, chunk_rows=50)
    with pytest.raises(
        SourceError, match=r"task-1/manifest\.json was written with another chunk_rows"
    ):
        merge_manifests([a, other], out)
    with open(b.paths[-1], "ab") as f:
        f.write(b"\0")
    with pytest.raises(SourceError, match=r"part-00003-of-00004\.tfcol is \d+ bytes, its manifest"):
        merge_manifests([a, b], out)
    assert not out.exists() and all(os.path.exists(p) for p in a.paths)  # nothing moved
