"""`tfinput.service`: a columnar pipeline runs on real tf.data service workers (in-process
dispatcher and worker on loopback) with output identical to local reading; Python-backed
pipelines are refused before they reach a worker; the guarded read counts and bounds; and
a pipeline read through worker processes on loopback (`tfinput.service.LocalFleet`) gives
the same examples as the local read, with the service knobs applied and the tuner
searching them and sizing the fleet for a target rate. `tfinput.graph` (defined with the
service): native-only datasets pass, Python callbacks are found and named."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import SEQUENTIAL, collect, kill_all, kill_and_wait_for, running
from tfinput import graph, service
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError
from tfinput.service import LocalFleet, ServiceRead, workers_needed


@pytest.fixture
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


@pytest.fixture(scope="module")
def fleet():
    with LocalFleet(max_workers=2) as f:
        yield f


def _config(**kw) -> PipelineConfig:
    return PipelineConfig(batch_size=100, drop_remainder=False, **SEQUENTIAL, **kw)


def test_every_example_once_through_the_service(fleet, small_columnar, small_schema):
    workers = 2
    local = tfinput.columnar(small_columnar, small_schema)
    served = local.with_service(fleet)
    assert served.describe()["service"]["processing_mode"] == "dynamic"
    config = _config(service_workers=workers, service_compression=None)
    rows = collect(served.build(config))["dense"]["row_id"].astype(int)
    assert sorted(rows.tolist()) == list(range(1000)), "dynamic sharding: each file once"
    assert fleet.address_for(workers).startswith("grpc://")


def test_the_tuner_searches_the_service_knobs_and_sizes_the_fleet(
    fleet, small_columnar, small_schema
):
    import tuners
    from tuners._space import SearchSpace

    pipeline = tfinput.columnar(small_columnar, small_schema).with_service(fleet)
    space = SearchSpace.for_pipeline(pipeline)
    assert space.choices["service_workers"] == (1, 2)
    assert space.choices["service_compression"] == ("AUTO", None)
    result = tuners.tune(
        pipeline,
        space=space.fix(interleave_cycle_length=1, interleave_block_length=1),
        n_trials=4,
        base=PipelineConfig(batch_size=100),
        options=tuners.TuneOptions(
            measurement=tuners.MeasureOptions(windows=2, window_batches=3, warmup_batches=1),
            confirmation=tuners.ConfirmOptions(
                confirm_top=1,
                confirm_windows=2,
                breakdown=False,
                advise_format=False,
                target_rate=1e6,
            ),
        ),
    )
    sizing = [line for line in result.advice if line.startswith("tf.data service:")]
    assert len(sizing) == 1 and "per worker" in sizing[0] and "needs about" in sizing[0]
    workers = result.best_config.service_workers or 2
    rate = next(c.median for c in result.confirmed if c.config == result.best_config)
    assert f"needs about {workers_needed(rate, workers, 1e6)} worker" in sizing[0]


def test_workers_needed_and_bad_settings():
    assert workers_needed(1000.0, 2, 5000.0) == 10
    assert workers_needed(1000.0, 1, 10.0) == 1
    with pytest.raises(ConfigError):
        workers_needed(0.0, 1, 10.0)
    with pytest.raises(ConfigError, match="dispatcher address"):
        ServiceRead(42)
    with pytest.raises(ConfigError, match="service_workers"):
        ServiceRead(LocalFleet(1), workers=3)
    remote = ServiceRead("grpc://localhost:1", workers=4)
    assert remote.worker_count(PipelineConfig()) == 4
    with pytest.raises(ConfigError, match="has 4 workers"):
        remote.address(PipelineConfig(service_workers=2))
    with pytest.raises(ConfigError, match="at most 1"):
        LocalFleet(1).address_for(2)
    assert np.isfinite(workers_needed(1.0, 1, 1.0))


def test_a_service_pipeline_has_no_resumable_iterator(small_columnar, small_schema):
    from tfinput.errors import ResumeError

    pipeline = tfinput.columnar(small_columnar, small_schema).with_service("grpc://localhost:1")
    with pytest.raises(ResumeError, match=r"tf\.data service"):
        pipeline.iterator(PipelineConfig(batch_size=100))
    assert pipeline.with_service(None).service is None


def test_any_fleet_is_read_through_the_core_protocol():
    """`Pipeline.with_service` takes any `Fleet` (the core's protocol), not one class:
    `LocalFleet` is one, and so is a user's own (here one that knows a fixed cluster)."""
    from tfinput._src.core.service import Fleet

    assert isinstance(LocalFleet(1), Fleet)

    class Cluster:
        max_workers = 4

        def address_for(self, workers):
            return f"grpc://dispatcher-{workers or self.max_workers}:5050"

    read = ServiceRead(Cluster())
    assert read.fleet is not None
    assert read.worker_count(PipelineConfig(service_workers=2)) == 2
    assert read.address(PipelineConfig(service_workers=2)) == "grpc://dispatcher-2:5050"
    assert read.describe()["service"] == "Cluster(max_workers=4)"
    assert ServiceRead(LocalFleet(3)).describe()["service"] == "LocalFleet(max_workers=3)"


def _is_server(p) -> bool:
    """Whether ``p`` is a `LocalFleet` server process (``python -c SERVER ...``)."""
    import psutil

    try:
        argv = p.cmdline()
    except psutil.Error:
        return False
    return len(argv) > 3 and argv[1] == "-c" and "DispatchServer" in argv[2]


def _servers_started_by(pid: int) -> list:
    """The `LocalFleet` servers started by process ``pid``, whoever their parent is now
    (its pid is their first argument)."""
    import psutil

    return [p for p in psutil.process_iter() if _is_server(p) and p.cmdline()[3] == str(pid)]


def _listening(p) -> bool:
    import psutil

    try:
        return any(c.status == psutil.CONN_LISTEN for c in p.net_connections(kind="tcp"))
    except psutil.Error:
        return False


def test_a_killed_command_leaves_no_server_running(small_columnar, small_schema, tmp_path):
    """``tfinput bench --service local:1`` killed with SIGKILL while its fleet serves:
    the dispatcher and workers it started, and its stderr filter, exit within seconds
    (they watch a pipe from the command and their parent pid)."""
    psutil = pytest.importorskip("psutil")
    small_schema.to_json(tmp_path / "schema.json")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # filter on
    argv = [
        sys.executable, "-m", "tfinput.cli", "bench", str(Path(small_columnar[0]).parent),
        "--schema", str(tmp_path / "schema.json"), "--service", "local:1",
        "--config", "autotune", "--batch-size", "10", "--windows", "1000",
    ]  # fmt: skip
    log = (tmp_path / "stderr").open("w")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, env=env)
    seen: list = []
    try:
        deadline = time.monotonic() + 540
        # Up: the dispatcher and its worker, each listening.
        while len([p for p in seen if _is_server(p) and _listening(p)]) < 2:
            assert proc.poll() is None, (tmp_path / "stderr").read_text()[-3000:]
            assert time.monotonic() < deadline, "the fleet did not start"
            time.sleep(0.5)
            seen = psutil.Process(proc.pid).children(recursive=True)
        roles = sorted("dispatcher" if "dispatcher" in p.cmdline() else "worker" for p in seen)
        assert roles[:2] == ["dispatcher", "worker"] and len(seen) == 3, "servers and filter"
        left = kill_and_wait_for(proc, seen, timeout=20)
        left += [p for p in running(_servers_started_by(proc.pid)) if p not in left]
        assert not left, [f"{p.pid}: {' '.join(p.cmdline()[3:])[:80]}" for p in left]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        kill_all(seen + _servers_started_by(proc.pid))
        log.close()


@pytest.mark.parametrize(
    "kind", ["columnar", "columnar-rebatch-shuffled", "tfrecord"], ids=lambda k: k
)
def test_native_pipelines_have_no_python_ops(kind, small_schema, small_tfrecord, small_columnar):
    if kind == "tfrecord":
        ds = tfinput.tfrecord(small_tfrecord, small_schema).build(PipelineConfig(batch_size=200))
    elif kind == "columnar":
        ds = tfinput.columnar(small_columnar).build(PipelineConfig(batch_size=200))
    else:
        pipeline = tfinput.columnar(small_columnar, shuffle_rows=True).with_file_shuffling()
        ds = pipeline.build(PipelineConfig(batch_size=64, shuffle_buffer=300, cache=True))
    assert graph.find_python_ops(ds) == []
    assert graph.is_native(ds)
    graph.assert_native(ds)


def test_parquet_pipeline_is_reported_as_not_native(small_schema, small_parquet):
    ds = tfinput.parquet(small_parquet, small_schema).build(PipelineConfig(batch_size=200))
    ops = graph.find_python_ops(ds)
    assert any(op.startswith("PyFuncStateless in function") and "MapDataset" in op for op in ops)
    with pytest.raises(ConfigError, match=r"parquet input is not native-only: \d+ op\(s\)"):
        graph.assert_native(ds, what="parquet input")


def _double(x):
    return x * 2


@pytest.mark.parametrize(
    ("make", "op"),
    [
        (lambda ds: ds.map(lambda x: tf.py_function(_double, [x], tf.int64)), "EagerPyFunc"),
        (lambda ds: ds.map(lambda x: tf.numpy_function(_double, [x], tf.int64)), "PyFunc"),
        (
            lambda ds: ds.map(lambda x: tf.numpy_function(_double, [x], tf.int64, stateful=False)),
            "PyFuncStateless",
        ),
        (  # buried two functions deep: interleave -> map -> py_function
            lambda ds: ds.interleave(
                lambda x: tf.data.Dataset.from_tensors(x).map(
                    lambda y: tf.py_function(_double, [y], tf.int64)
                )
            ),
            "EagerPyFunc",
        ),
    ],
    ids=["py_function", "numpy_function", "numpy_function-stateless", "nested"],
)
def test_python_callbacks_are_found_with_their_owner(make, op):
    ds = make(tf.data.Dataset.range(4))
    ops = graph.find_python_ops(ds)
    assert len(ops) == 1 and ops[0].startswith(f"{op} in function")
    assert "used by" in ops[0] and ("MapDataset" in ops[0] or "InterleaveDataset" in ops[0])
    # the check does not change the dataset
    assert list(ds.as_numpy_iterator()) == [0, 2, 4, 6]


def test_from_generator_is_found():
    ds = tf.data.Dataset.from_generator(
        lambda: iter(np.arange(3)), output_signature=tf.TensorSpec([], tf.int64)
    )
    ops = graph.find_python_ops(ds)
    assert any(o.startswith("GeneratorDataset") for o in ops)
