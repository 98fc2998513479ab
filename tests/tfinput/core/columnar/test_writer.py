"""`tfinput._src.core.columnar.writer`: `ColumnarWriter`, tables to sharded chunks plus the
manifest; `verify_files`, every chunk checked offline against it."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

import tfinput
from tfinput._src.core.columnar.writer import ChunkProblem, verify_files
from tfinput.columnar_records import ColumnarWriter, read_manifest
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, DataError, SchemaError

VECTOR = tfinput.Schema.of([tfinput.Dense(name="v", length=2)], labels=["label"])


def _vectors(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "v": pa.array([[float(i), -float(i)] for i in range(start, start + n)]),
            "label": pa.array([float(i % 2) for i in range(n)], pa.float32()),
        }
    )


def test_files_hold_whole_chunks_and_the_manifest_describes_them(tmp_path):
    with ColumnarWriter(tmp_path, VECTOR, chunk_rows=4, rows_per_file=6) as w:
        w.write(_vectors(3))
        assert w.rows == 3 and not list(tmp_path.glob("*.tfcol"))  # buffered: no chunk yet
        w.write(_vectors(10, start=3).to_batches()[0])  # a RecordBatch works too
    m = w.manifest
    assert m == read_manifest(tmp_path) and w.rows == 13
    assert [(f.name, f.rows, f.chunks) for f in m.files] == [
        ("part-00000-of-00002.tfcol", 8, 2),  # 6 rows per file: rounded up to 2 chunks
        ("part-00001-of-00002.tfcol", 5, 2),
    ]
    assert verify_files(tmp_path) == []
    config = PipelineConfig(batch_size=13, drop_remainder=False)
    features, _ = next(iter(tfinput.columnar(tmp_path).build(config)))
    assert features["dense"]["v"].numpy()[:, 0].tolist() == list(range(13))


def test_writer_fills_defaults_and_rejects_missing_required_values(tmp_path):
    schema = tfinput.Schema.of(
        [
            tfinput.Dense(name="x", default=2.5),
            tfinput.Categorical(name="c", table="t"),
            tfinput.MultiHot(name="m", table="t", max_len=3),
        ],
        tables=[tfinput.Table(name="t", vocabulary_size=10, dim=4)],
        labels=["label"],
    )
    table = pa.table(
        {
            "x": pa.array([None, 1.0], pa.float32()),
            "c": pa.array([1, 2], pa.int64()),
            "m": pa.array([None, [3, 4]], pa.list_(pa.int64())),
            "label": pa.array([0.0, 1.0], pa.float32()),
        }
    )
    with ColumnarWriter(tmp_path / "ok", schema, chunk_rows=4) as w:
        w.write(table)
    features, _ = next(iter(tfinput.columnar(tmp_path / "ok").build(PipelineConfig(batch_size=2))))
    assert features["dense"]["x"].numpy().tolist() == [2.5, 1.0]
    assert features["weights"]["m"].numpy().tolist() == [[0, 0, 0], [1, 1, 0]]
    bad = table.set_column(1, "c", pa.array([None, 2], pa.int64()))
    with (
        pytest.raises(DataError, match="column 'c': missing value in row 0 of a chunk"),
        ColumnarWriter(tmp_path / "bad", schema, chunk_rows=4) as w,
    ):
        w.write(bad)
    assert not list((tmp_path / "bad").glob("*.tfcol"))  # aborted: nothing left behind


def test_a_vector_of_the_wrong_length_aborts_the_write(tmp_path):
    table = pa.table({"v": pa.array([[1.0, 2.0], [3.0]]), "label": pa.array([0.0, 1.0])})
    w = ColumnarWriter(tmp_path, VECTOR, chunk_rows=2)
    with pytest.raises(DataError, match="column 'v': expected vectors of length 2, found a row"):
        w.write(table)
    assert not list(tmp_path.glob("*.tfcol"))
    with pytest.raises(ConfigError, match=r"write\(\) after close\(\)"):
        w.write(table)
    with pytest.raises(ConfigError, match="closed after an error"):
        w.close()


def test_a_table_without_a_schema_column_is_a_schema_error(tmp_path):
    w = ColumnarWriter(tmp_path, VECTOR)
    with pytest.raises(SchemaError, match=r"needs column\(s\) \['label'\]; the table has \['v'\]"):
        w.write(pa.table({"v": pa.array([[1.0, 2.0]])}))


def test_nothing_written_leaves_no_manifest(tmp_path):
    manifest = ColumnarWriter(tmp_path, VECTOR).close()
    assert manifest.files == () and not (tmp_path / "manifest.json").exists()


@pytest.mark.parametrize(
    "kwargs",
    [dict(chunk_rows=0), dict(rows_per_file=True), dict(chunk_rows=1.5)],
    ids=["zero", "bool", "float"],
)
def test_sizes_must_be_positive_ints(tmp_path, kwargs):
    with pytest.raises(ConfigError, match=r"columnar writer: .* must be an int >= 1"):
        ColumnarWriter(tmp_path, VECTOR, **kwargs)


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
