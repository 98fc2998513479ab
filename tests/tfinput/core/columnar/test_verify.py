"""`tfinput._src.core.columnar.verify`: `verify_files`, every chunk checked offline against
its manifest."""

from __future__ import annotations

import json
import os

import pytest

import tfinput
from tfinput._src.core.columnar.verify import ChunkProblem, verify_files
from tfinput.columnar_records import read_manifest
from tfinput.config import PipelineConfig
from tfinput.errors import DataError


def test_an_intact_data_set_has_no_problem(small_columnar):
    assert verify_files(small_columnar) == []
    assert verify_files(os.path.dirname(small_columnar[0])) == []


def test_chunk_problem_names_file_and_chunk():
    problem = ChunkProblem(path="d/part-0.tfcol", chunk=2, reason="column 'x' is corrupt")
    assert str(problem) == "d/part-0.tfcol: chunk 2: column 'x' is corrupt"


def test_truncated_file_names_the_first_incomplete_chunk(copy):
    target = sorted(copy.glob("*.tfcol"))[2]
    entry = read_manifest(copy).entry(str(target))
    with open(target, "r+b") as f:
        f.truncate(entry.offsets[1] + 10)
    with pytest.raises(DataError) as e:
        tfinput.columnar(copy).build(PipelineConfig(batch_size=200))
    assert str(e.value).startswith(f"{target}: truncated: {entry.offsets[1] + 10:,} bytes")
    assert "chunk 1 (rows 100-199" in str(e.value) and "1 later chunk(s)" in str(e.value)
    assert [p.chunk for p in verify_files(copy)] == [1]


def test_a_digest_changed_in_the_manifest_is_reported(copy):
    manifest = copy / "manifest.json"
    data = json.loads(manifest.read_text())
    data["files"][3]["digests"][0] = "0" * 16
    manifest.write_text(json.dumps(data))
    [problem] = verify_files(copy)
    assert (problem.path, problem.chunk) == (str(copy / data["files"][3]["name"]), 0)
    assert problem.reason == (
        "its checksums do not match the manifest digest (file replaced or rewritten)"
    )


def test_a_record_offset_that_differs_from_the_manifest_is_reported(copy):
    manifest = copy / "manifest.json"
    data = json.loads(manifest.read_text())
    data["files"][0]["offsets"][2] += 1
    manifest.write_text(json.dumps(data))
    [problem] = verify_files(copy / "part-00000-of-00004.tfcol")
    assert problem.chunk == 2 and problem.reason.startswith("record at byte ")
    assert problem.reason.endswith(f"the manifest says {data['files'][0]['offsets'][2]}")
