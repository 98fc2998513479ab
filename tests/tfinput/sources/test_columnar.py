"""`tfinput.sources.columnar` (`ColumnarSource`): files from manifests, what the source
declares, reading, the chunk-sized shuffle buffer, error messages that name a chunk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tfinput
from tfinput import testing
from tfinput.columnar_records.manifest import read_manifest
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, SourceError
from tfinput.sources import ColumnarSource

# The shared fixture: chunks of 100 rows, files of 300, 300, 300 and 100 rows.


def test_columnar_reads_the_fixture_rows_in_file_order(
    small_columnar, small_schema, assert_reads_fixture_rows
):
    assert_reads_fixture_rows(tfinput.columnar(small_columnar, small_schema))


def test_columnar_declares_native_iterator_checkpointing(small_columnar, read_request):
    source = ColumnarSource(paths=str(small_columnar[0]))
    assert source.paths == (str(small_columnar[0]),)
    assert (source.kind, source.batches_itself, source.resume) == ("columnar", False, "iterator")
    request = read_request(small_columnar, interleave_block_length=3, cache=True, shuffle_buffer=5)
    assert source.unhonoured(request) == {}


@pytest.mark.parametrize("flag", ["verify", "shuffle_rows"])
def test_flags_must_be_booleans(flag):
    with pytest.raises(ConfigError, match=f"columnar source: {flag} must be true or false, got 1"):
        ColumnarSource(paths=("x",), **{flag: 1})


def test_files_from_a_directory_its_manifest_or_the_data_files(small_columnar):
    directory = Path(small_columnar[0]).parent
    files = list(small_columnar)
    assert ColumnarSource(paths=(str(directory),)).files() == files
    assert ColumnarSource(paths=(str(directory / "manifest.json"),)).files() == files
    # Listed twice (a glob and a file): read once, in the order given.
    source = ColumnarSource(paths=(files[2], str(directory / "*.tfcol")))
    assert source.files() == [files[2], files[0], files[1], files[3]]
    assert source.manifest().chunk_rows == 100


def test_count_records_from_the_manifest(small_columnar, tmp_path):
    source = ColumnarSource(paths=tuple(small_columnar))
    assert [source.count_records(p) for p in small_columnar] == [300, 300, 300, 100]
    assert source.count_records(str(tmp_path / "elsewhere.tfcol")) is None


def test_shuffle_buffer_counts_chunks(small_columnar, read_request):
    source = ColumnarSource(paths=tuple(small_columnar))
    buffers = [
        source.shuffle_buffer(None, read_request(small_columnar, shuffle_buffer=rows))
        for rows in (1, 100, 101, 250)
    ]
    assert buffers == [1, 1, 2, 3]


def test_explain_error_names_the_chunk_and_its_rows(small_columnar):
    path = small_columnar[1]
    entry = read_manifest(path).entry(path)
    source = ColumnarSource(paths=tuple(small_columnar))
    at = entry.offsets[1] + 5
    message = source.explain_error(path, f"{path}: corrupted record at {at}")
    assert message.startswith(f"chunk 1 (rows 100-199 of the file, byte {at}): corrupted record;")
    assert source.explain_error(path, "something else") == "something else"


def test_a_file_of_another_source_is_refused(small_columnar, small_schema):
    source = ColumnarSource(paths=tuple(small_columnar[:2]))
    with pytest.raises(SourceError, match=f"{small_columnar[3]}: not a file of this columnar"):
        source.validate([small_columnar[3]], small_schema)


def test_data_sets_with_different_chunk_sizes_are_refused(tmp_path, small_columnar, small_schema):
    other = testing.write_columnar(tmp_path, small_schema, rows=100, chunk_rows=50)
    with pytest.raises(SourceError, match=r"different chunk sizes \[50, 100\] cannot be read"):
        tfinput.columnar([*small_columnar, *other], small_schema).build(
            PipelineConfig(batch_size=100)
        )


def test_no_whole_chunk_to_read(tmp_path, small_schema):
    files = testing.write_columnar(tmp_path, small_schema, rows=50, chunk_rows=100)
    pipeline = tfinput.columnar(files, small_schema)
    with pytest.raises(SourceError, match="no whole chunk of 100 rows to read"):
        pipeline.build(PipelineConfig(batch_size=100, drop_remainder=True))
    _, labels = next(iter(pipeline.build(PipelineConfig(batch_size=100, drop_remainder=False))))
    assert labels.shape == (50,)


def test_roofline_reads_whole_chunks(small_columnar, small_schema):
    source = ColumnarSource(paths=tuple(small_columnar))
    stages = source.roofline_stages(small_columnar, small_schema, 250)
    assert stages.descriptions["read"] == (
        "TFRecordDataset over the files in order, batch(2 chunks of 100 rows)"
    )
    read = next(iter(stages.factories["read"]()))
    assert stages.counters["read"](read) == 200
    parsed = next(iter(stages.factories["parse"]()))
    np.testing.assert_array_equal(np.ravel(parsed["row_id"]), np.arange(200))
    size = sum(Path(p).stat().st_size for p in small_columnar)
    assert stages.bytes_per_example == pytest.approx(size / 1000)
