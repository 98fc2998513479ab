"""`tfinput.service`: a columnar pipeline runs on real tf.data service workers (in-process
dispatcher and worker on loopback) with output identical to local reading; Python-backed
pipelines are refused before they reach a worker."""

from __future__ import annotations

import numpy as np
import pytest

import tfinput
from tests.helpers import collect
from tfinput import service
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError


@pytest.fixture(scope="module")
def address():
    with service.local_cluster(workers=1) as addr:
        yield addr


def test_columnar_pipeline_on_the_service_matches_local_reading(address, small_columnar):
    config = PipelineConfig(batch_size=200, deterministic=True)
    pipeline = tfinput.columnar(small_columnar)
    local = collect(pipeline.build(config))
    remote = collect(service.distribute(pipeline.build(config), address, job_name="same"))
    for group in local:
        for name, want in local[group].items():
            np.testing.assert_array_equal(remote[group][name], want, err_msg=f"{group}/{name}")


def test_dynamic_sharding_delivers_every_row_once(address, small_columnar):
    config = PipelineConfig(batch_size=100, drop_remainder=False)
    ds = service.distribute(
        tfinput.columnar(small_columnar).build(config), address, processing_mode="dynamic"
    )
    rows = collect(ds)["dense"]["row_id"].astype(int)
    assert sorted(rows.tolist()) == list(range(1000))


def test_python_backed_pipeline_is_refused_naming_the_ops(address, small_schema, small_parquet):
    ds = tfinput.parquet(small_parquet, small_schema).build(PipelineConfig(batch_size=100))
    with pytest.raises(ConfigError) as e:
        service.distribute(ds, address)
    message = str(e.value)
    assert message.startswith("the dataset given to tf.data service is not native-only")
    assert "PyFuncStateless" in message


def test_unknown_processing_mode(address, small_columnar):
    ds = tfinput.columnar(small_columnar).build(PipelineConfig(batch_size=100))
    with pytest.raises(ConfigError, match="processing_mode: expected one of"):
        service.distribute(ds, address, processing_mode="round-robin")


def _batches(rows: int, batch: int):
    import tensorflow as tf

    return tf.data.Dataset.range(rows).batch(batch).map(lambda x: {"row_id": x})


def test_guarded_read_yields_every_batch_in_order_and_counts_rows():
    read = service.guarded(_batches(25, 10), expected_rows=25)
    got = [b["row_id"].numpy().tolist() for b in read]
    assert got == [list(range(10)), list(range(10, 20)), list(range(20, 25))]
    assert (read.batches, read.rows, read.lost, read.finished) == (3, 25, 0, True)
    assert read.summary() == "tf.data service read: 3 batches, 25 rows of 25 expected, none lost"


def test_guarded_read_counts_rows_an_epoch_did_not_deliver(caplog):
    read = service.guarded(_batches(25, 10), expected_rows=40)
    assert sum(int(b["row_id"].shape[0]) for b in read) == 25
    assert read.lost == 15
    assert "15 of 40 rows lost" in read.summary()
    assert "15 of 40 rows lost" in caplog.text


def test_guarded_read_raises_the_pipelines_error_at_its_batch():
    import tensorflow as tf

    def check(v):
        if v >= 3:
            raise ValueError(f"bad row {v}")
        return v

    ds = tf.data.Dataset.range(5).map(lambda x: tf.numpy_function(check, [x], tf.int64))
    read = service.guarded(ds)
    seen = []
    with pytest.raises(tf.errors.OpError, match="bad row 3"):
        for x in read:
            seen.append(int(x))
    assert seen == [0, 1, 2]


def test_guarded_read_stalled_past_its_bound_raises_service_error():
    import time

    import tensorflow as tf

    def slow(x):
        time.sleep(0.0 if x == 0 else 30)
        return x

    ds = tf.data.Dataset.range(3).map(lambda x: tf.numpy_function(slow, [x], tf.int64))
    read = service.guarded(ds, expected_rows=3, stall_timeout_s=1, address="grpc://d:1")
    it = iter(read)
    assert int(next(it)) == 0
    started = time.monotonic()
    with pytest.raises(
        tfinput.ServiceError,
        match=r"no batch from grpc://d:1 in 1 s after 1 batches \(1 rows of 3 expected\)",
    ):
        next(it)
    assert time.monotonic() - started < 5
    read.close()


def test_guarded_read_refuses_a_non_positive_bound():
    with pytest.raises(ConfigError, match="stall_timeout_s must be > 0"):
        service.guarded(_batches(5, 5), stall_timeout_s=0)


def test_a_healthy_epoch_with_a_drop_remainder_tail_reports_no_loss(
    address, small_columnar, caplog
):
    # 1,000 rows in batches of 300: the worker drops the last 100 (drop_remainder),
    # which is not a loss; the default read compares the rows with the manifests'.
    caplog.set_level("INFO")
    pipeline = tfinput.columnar(small_columnar).with_service(address, workers=1)
    ds = pipeline.build(PipelineConfig(batch_size=300, drop_remainder=True))
    assert sum(int(f["dense"]["row_id"].shape[0]) for f, _ in ds) == 900
    assert "lost" not in caplog.text


def test_the_default_read_counts_the_rows_an_epoch_did_not_deliver(caplog):
    # The guard every service build gets, on an epoch that ends 15 rows short.
    ds = service.guarded_dataset(_batches(25, 10), expected_rows=lambda: 40, tail_rows=9)
    assert sum(int(b["row_id"].shape[0]) for b in ds) == 25
    assert "15 of 40 rows lost (at least 6; up to 9 may be the workers' drop_remainder" in (
        caplog.text
    )
    caplog.clear()
    ds = service.guarded_dataset(_batches(25, 10), expected_rows=lambda: 30, tail_rows=9)
    assert sum(int(b["row_id"].shape[0]) for b in ds) == 25  # 5 short: a tail
    assert "lost" not in caplog.text


def test_a_service_read_without_a_stall_bound_is_tf_datas_own(address, small_columnar):
    pipeline = tfinput.columnar(small_columnar).with_service(address, stall_timeout_s=None)
    ds = pipeline.build(PipelineConfig(batch_size=250))
    assert "DataService" in type(ds).__name__ and service.unguarded(ds) is ds
    with pytest.raises(ConfigError, match="stall_timeout_s must be > 0 or None, got 0"):
        tfinput.columnar(small_columnar).with_service(address, stall_timeout_s=0)


def test_repeated_builds_repeat_inside_the_service_stage(address, small_columnar):
    # One job for every epoch: `.repeat()` on the service dataset would start a new job
    # per epoch, whose start-up a bench or tuning window crossing an epoch would time.
    config = PipelineConfig(batch_size=250, deterministic=True)
    pipeline = tfinput.columnar(small_columnar).with_service(address)
    ds = pipeline.build(config, repeat=True)
    assert "DataService" in type(service.unguarded(ds)).__name__  # the repeat is inside
    local = tfinput.columnar(small_columnar).build(config, repeat=True)
    assert "Repeat" in type(local).__name__
    rows = [b["dense"]["row_id"] for b, _ in ds.take(10)]  # 2.5 epochs of 4 batches
    np.testing.assert_array_equal(np.concatenate(rows).astype(int) % 1000, np.arange(2500) % 1000)


def test_the_guarded_read_keeps_the_element_spec_and_every_batch(address, small_columnar):
    config = PipelineConfig(batch_size=200, deterministic=True)
    pipeline = tfinput.columnar(small_columnar)
    guarded = pipeline.with_service(address).build(config)
    plain = service.unguarded(guarded)
    assert guarded.element_spec == plain.element_spec == pipeline.build(config).element_spec
    for _ in range(2):  # each pass is checked on its own
        rows = collect(guarded)["dense"]["row_id"].astype(int)
        assert sorted(rows.tolist()) == list(range(1000))
