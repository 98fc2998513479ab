"""Reading a pipeline through tf.data service: where the service is, and a local fleet of
worker processes for measuring how many workers a host needs.

    fleet = LocalFleet(max_workers=2)                      # processes on this machine
    pipeline = tfinput.columnar("data/col", schema).with_service(fleet)
    ds = pipeline.build(config.replace(service_workers=2))  # 2 workers serve it

    pipeline = pipeline.with_service("grpc://dispatcher:5050", workers=8)  # a real fleet

`Pipeline.with_service` attaches a `ServiceRead`; `Pipeline.build` then builds the
pipeline as usual and reads it through `tfinput.service.distribute` with the config's
``service_compression`` and ``service_max_outstanding_requests``. The tuner searches
those two knobs for a service pipeline, and ``service_workers`` too when the service is a
`LocalFleet` (a cluster per worker count: a dispatcher and that many worker processes,
started on first use and stopped by `LocalFleet.close`). From the measured rate it
reports how many workers a target rate needs (`workers_needed`).

Workers of a local fleet share this machine's cores with the trainer: the rate it
measures is what these cores give through the service, a lower bound for a fleet of
separate machines.
"""

from __future__ import annotations

import atexit
import dataclasses
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tfinput.config import AUTOTUNE, PipelineConfig
from tfinput.errors import ConfigError
from tfinput.service import DEFAULT_STALL_TIMEOUT_S

__all__ = ["LocalFleet", "ServiceRead", "workers_needed"]

#: A tf.data service server in its own process: prints its dispatcher address, then
#: serves until SIGTERM. argv: ``dispatcher`` | ``worker DISPATCHER_ADDRESS``.
_SERVER = r"""
import os, signal, sys, threading
import tensorflow as tf
svc = tf.data.experimental.service
if sys.argv[1] == "dispatcher":
    server = svc.DispatchServer(svc.DispatcherConfig(port=0))
    print(server.target, flush=True)
else:
    server = svc.WorkerServer(svc.WorkerConfig(dispatcher_address=sys.argv[2], port=0))
    print("worker", flush=True)
# A measuring fleet keeps no state worth a graceful stop: leave at once.
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
signal.signal(signal.SIGINT, lambda *_: os._exit(0))
threading.Event().wait()
"""


class LocalFleet:
    """tf.data service clusters on this machine, one per worker count, started on
    first use: `address_for` ``(w)`` is a dispatcher with ``w`` worker processes.

    Args:
      max_workers: The most workers a cluster may have (the tuner searches 1 to this).
      startup_timeout: Seconds a server process may take to start.

    Use it as a context manager, or call `close`; clusters still running at exit are
    stopped then.
    """

    def __init__(self, max_workers: int = 2, *, startup_timeout: float = 120.0):
        if not isinstance(max_workers, int) or max_workers < 1:
            raise ConfigError(f"LocalFleet: max_workers must be >= 1, got {max_workers!r}")
        self.max_workers = max_workers
        self.startup_timeout = startup_timeout
        self._clusters: dict[int, tuple[str, list[subprocess.Popen]]] = {}
        self._lock = threading.Lock()
        atexit.register(self.close)

    def __repr__(self) -> str:
        return f"LocalFleet(max_workers={self.max_workers})"

    def __enter__(self) -> LocalFleet:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def address_for(self, workers: int) -> str:
        """The dispatcher address of the cluster with ``workers`` worker processes
        (``0``: ``max_workers``), starting it if needed.

        Raises:
          ConfigError: more workers than ``max_workers``.
          RuntimeError: a server process failed to start (its output is quoted).
        """
        workers = workers or self.max_workers
        if workers > self.max_workers:
            raise ConfigError(
                f"service_workers={workers}: this LocalFleet has at most {self.max_workers}"
            )
        with self._lock:
            if workers not in self._clusters:
                dispatcher = self._start("dispatcher")
                procs = [dispatcher]
                address = _read_line(dispatcher, self.startup_timeout)
                self._clusters[workers] = (address, procs)
                started = [
                    self._start("worker", address.split("://", 1)[-1]) for _ in range(workers)
                ]
                procs += started  # started together: each imports TensorFlow (seconds)
                for worker in started:
                    _read_line(worker, self.startup_timeout)
            return self._clusters[workers][0]

    def close(self) -> None:
        """Stop every cluster's processes (SIGTERM, then SIGKILL after 10 s)."""
        with self._lock:
            procs = [p for _, ps in self._clusters.values() for p in ps]
            self._clusters.clear()
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 10
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def _start(self, *argv: str) -> subprocess.Popen:
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
        return subprocess.Popen(
            [sys.executable, "-c", _SERVER, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    """The first line a server prints that is not a TensorFlow log line."""
    lines: list[str] = []
    result: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            text = line.strip()
            if text.startswith("grpc://") or text == "worker":
                result.append(text)
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if not result:
        proc.kill()
        raise RuntimeError(
            f"tf.data service server did not start within {timeout:.0f} s: " + "".join(lines[-20:])
        )
    # Keep draining its output so a chatty server never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
    return result[0]


@dataclasses.dataclass(frozen=True)
class ServiceRead:
    """How a pipeline is read through tf.data service (`Pipeline.with_service`).

    Attributes:
      service: A dispatcher address (``grpc://host:port``) or a `LocalFleet`.
      workers: The address's worker count (for `workers_needed`); a `LocalFleet`
        uses ``PipelineConfig.service_workers`` instead.
      processing_mode: ``dynamic`` (default: the dispatcher hands each file to one
        worker, so every example comes once per epoch, at most once if a worker dies)
        or ``off`` (every worker reads everything: use with one worker); see
        `tfinput.service`.
      job_name: Consumers with the same name share one job (None: a job per
        iterator).
      stall_timeout_s: A read with no batch for this long raises `ServiceError` (a
        worker died and none came back at its address); None: no bound, and no count
        of the rows lost (`tfinput.service.guarded_dataset`).
    """

    service: Any
    workers: int | None = None
    processing_mode: str = "dynamic"
    job_name: str | None = None
    stall_timeout_s: float | None = DEFAULT_STALL_TIMEOUT_S

    def __post_init__(self) -> None:
        if not isinstance(self.service, (str, LocalFleet)):
            raise ConfigError(
                "with_service: expected a dispatcher address (grpc://host:port) or a "
                f"tfinput.fleet.LocalFleet, got {type(self.service).__name__}"
            )
        if self.stall_timeout_s is not None and not self.stall_timeout_s > 0:
            raise ConfigError(
                f"with_service: stall_timeout_s must be > 0 or None, got {self.stall_timeout_s}"
            )
        if isinstance(self.service, LocalFleet) and self.workers is not None:
            raise ConfigError(
                "with_service: a LocalFleet takes its worker count from "
                "PipelineConfig.service_workers, not workers="
            )

    @property
    def fleet(self) -> LocalFleet | None:
        return self.service if isinstance(self.service, LocalFleet) else None

    def worker_count(self, config: PipelineConfig) -> int | None:
        """The workers serving a build with ``config`` (None: unknown)."""
        if self.fleet is not None:
            return config.service_workers or self.fleet.max_workers
        return self.workers

    def address(self, config: PipelineConfig) -> str:
        """The dispatcher a build with ``config`` reads from.

        Raises:
          ConfigError: ``service_workers`` asks a fixed fleet for another worker count.
        """
        if self.fleet is not None:
            return self.fleet.address_for(config.service_workers)
        if config.service_workers and self.workers and config.service_workers != self.workers:
            raise ConfigError(
                f"service_workers={config.service_workers}, but {self.service} has "
                f"{self.workers} workers; a remote fleet's size is set where it runs "
                "(search worker counts with a tfinput.fleet.LocalFleet)"
            )
        return str(self.service)

    def apply(
        self,
        dataset: Any,
        config: PipelineConfig,
        *,
        rows: Callable[[], int | None] | None = None,
        files: int = 0,
        batch_size: int | None = None,
    ) -> Any:
        """``dataset`` read through the service with ``config``'s service knobs,
        guarded (`stall_timeout_s`).

        Args:
          rows: Computes the rows of one pass over the files, where one pass is read
            (None: a repeated or sharded build, nothing to compare).
          files: The files the workers share (dynamic sharding hands out whole files).
          batch_size: The batch size each worker batches its part with.
        """
        from tfinput.service import distribute

        expected, tail = self._epoch(config, rows, files, batch_size or config.batch_size)
        outstanding = config.service_max_outstanding_requests
        return distribute(
            dataset,
            self.address(config),
            processing_mode=self.processing_mode,
            job_name=self.job_name,
            compression=config.service_compression,
            max_outstanding_requests=None if outstanding == AUTOTUNE else outstanding,
            stall_timeout_s=self.stall_timeout_s,
            expected_rows=expected,
            tail_rows=tail,
        )

    def _epoch(
        self,
        config: PipelineConfig,
        rows: Callable[[], int | None] | None,
        files: int,
        batch_size: int,
    ) -> tuple[Callable[[], int | None] | None, int]:
        """``(rows one epoch delivers, rows its drop_remainder tails may drop)``.

        Dynamic sharding: every row once; each worker that read a file batches its
        own part, so up to ``batch_size - 1`` rows per such worker (at most one per
        file) are dropped by ``drop_remainder``. ``off``: every worker reads every row.
        """
        workers = self.worker_count(config)
        if rows is None:
            return None, 0
        readers = min(workers, files) if workers else files
        if self.processing_mode == "off":
            if not workers:
                return None, 0
            count = rows

            def rows_off() -> int | None:
                n = count()
                return None if n is None else n * workers

            rows, readers = rows_off, workers
        elif self.processing_mode != "dynamic":
            return None, 0
        tail = readers * (batch_size - 1) if config.drop_remainder else 0
        return rows, tail

    def describe(self) -> dict[str, Any]:
        where = f"LocalFleet(max_workers={self.fleet.max_workers})" if self.fleet else self.service
        return {
            "service": where,
            "workers": self.workers,
            "processing_mode": self.processing_mode,
            "stall_timeout_s": self.stall_timeout_s,
        }


def workers_needed(rate: float, workers: int, target_rate: float) -> int:
    """Workers that serve ``target_rate`` examples/s if ``workers`` served ``rate``
    (linear scaling per worker: a lower bound where the dispatcher or network binds).

    Raises:
      ConfigError: a non-positive rate, worker count or target.
    """
    if rate <= 0 or workers < 1 or target_rate <= 0:
        raise ConfigError(
            f"workers_needed: expected positive values, got rate={rate}, workers={workers}, "
            f"target_rate={target_rate}"
        )
    return max(1, math.ceil(target_rate / (rate / workers)))
