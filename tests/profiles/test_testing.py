"""profiles._testing: pipelines with a known bottleneck, the GZIP records they read, and
the per-process cache of their captures."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from profiles import _testing as testing
from profiles._analysis import CAPTURE_METADATA
from profiles._xplane import find_trace
from tfinput.errors import ConfigError


def _batches(dataset, n):
    return [tuple(np.asarray(t) for t in batch) for batch in dataset.take(n)]


def test_fast_pipeline_yields_features_and_parity_labels():
    ((x, y),) = _batches(testing.fast_pipeline(batch_size=4), 1)
    assert x.dtype == np.float32 and y.dtype == np.float32
    np.testing.assert_array_equal(x, [0, 1, 2, 3])
    np.testing.assert_array_equal(y, [0, 1, 0, 1])


def test_slow_map_pipeline_passes_the_values_through_its_map():
    dataset = testing.slow_map_pipeline(delay_s=0.0, batch_size=3)
    (x1, y1), (x2, y2) = _batches(dataset, 2)
    np.testing.assert_array_equal(x1, [0, 1, 2])
    np.testing.assert_array_equal(x2, [3, 4, 5])
    np.testing.assert_array_equal(y1, [0, 1, 0])
    np.testing.assert_array_equal(y2, [1, 0, 1])
    assert dataset.element_spec[0].shape == (3,)


def test_gzip_records_are_written_once_and_read_back(tmp_path):
    import tensorflow as tf

    paths = testing.write_gzip_records(tmp_path, files=2, records=3, record_bytes=50)
    assert paths == [str(tmp_path / f"records-{k}.tfrecord.gz") for k in range(2)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "records-0.tfrecord.gz",
        "records-1.tfrecord.gz",
    ]
    with open(paths[0], "rb") as f:
        assert gzip.decompress(f.read())  # a real GZIP stream
    records = [r.numpy() for r in tf.data.TFRecordDataset(paths, compression_type="GZIP")]
    assert len(records) == 6 and {len(r) for r in records} == {50}
    assert set(b"".join(records)) <= {0, 1, 2, 3}
    mtimes = [(tmp_path / p).stat().st_mtime_ns for p in paths]
    assert testing.write_gzip_records(tmp_path, files=2, records=3, record_bytes=50) == paths
    assert [(tmp_path / p).stat().st_mtime_ns for p in paths] == mtimes  # not rewritten


def test_small_interleave_pipeline_reads_one_file_after_the_other(tmp_path):
    import tensorflow as tf

    paths = testing.write_gzip_records(tmp_path, files=2, records=2, record_bytes=10)
    in_order = [r.numpy() for r in tf.data.TFRecordDataset(paths, compression_type="GZIP")]
    dataset = testing.small_interleave_pipeline(paths, batch_size=2)
    got = [r for batch in dataset.take(3) for r in batch.numpy()]
    # Cycle length 1: file 0, then file 1, then again from the start (it repeats).
    assert got == in_order + in_order[:2]


def test_cached_capture_profiles_each_known_pipeline_once(slow_map_logdir):
    import json

    assert testing.cached_capture("slow_map") == slow_map_logdir
    trace = find_trace(slow_map_logdir)
    saved = json.loads((trace.paths[0].parent / CAPTURE_METADATA).read_text())
    assert saved["config"] == {"steps": 8, "warmup": 2, "step_name": "train"}
    assert saved["step"]["kind"] == "simulated"


def test_cached_capture_of_an_unknown_pipeline():
    with pytest.raises(ConfigError, match=r"unknown pipeline 'nope'; known: \('slow_map'"):
        testing.cached_capture("nope")
    assert testing.KNOWN_PIPELINES == ("slow_map", "small_interleave", "fast")
