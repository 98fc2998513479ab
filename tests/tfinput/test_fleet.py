"""A pipeline read through tf.data service worker processes on loopback
(`tfinput.fleet.LocalFleet`): the same examples as the local read, the service knobs
applied, and the tuner searching them and sizing the fleet for a target rate."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tfinput
from tests.helpers import SEQUENTIAL, collect, kill_all, kill_and_wait_for, running
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError
from tfinput.fleet import LocalFleet, ServiceRead, workers_needed


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
    from tfinput._src.core._service_read import Fleet

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
