"""`tfinput.service.start_worker`'s ``worker_address``: the address a worker registers with
its dispatcher, which the dispatcher hands to the trainers. Checked in this process on
loopback (a worker registered at an address nobody listens on is never read from), the
warning for a worker that registers ``localhost`` with a dispatcher on the network, and
the forms of the address. The read across two hosts is tests/test_service_hosts.py."""

from __future__ import annotations

import gc
import logging
import socket

import pytest
import tensorflow as tf

import tfinput
from tfinput import service
from tfinput._src.core.service.servers import parse_worker_address, registered_address
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError

ROWS = 1000


@pytest.mark.parametrize(
    "given, passed",
    [
        ("10.0.0.2", "10.0.0.2:%port%"),
        ("worker-1.example:5051", "worker-1.example:5051"),
        ("worker-1:%port%", "worker-1:%port%"),
        ("[fd00::2]:5051", "[fd00::2]:5051"),
        ("[fd00::2]", "[fd00::2]:%port%"),
    ],
)
def test_a_worker_address_is_a_host_with_or_without_its_port(given, passed):
    assert parse_worker_address(given) == passed


@pytest.mark.parametrize(
    "bad, why",
    [
        ("", "expected HOST or HOST:PORT"),
        (":5051", "expected HOST or HOST:PORT"),
        ("fd00::2", "expected HOST or HOST:PORT (an IPv6 host in brackets: [fd00::2]:5051)"),
        ("[worker-1]:5051", "expected HOST or HOST:PORT"),
        ("[fd00::2]5051", "expected HOST or HOST:PORT"),
        ("worker 1:5051", "expected HOST or HOST:PORT"),
        ("worker-1:", "the port must be 1 to 65535"),
        ("worker-1:0", "the port must be 1 to 65535"),
        ("worker-1:65536", "the port must be 1 to 65535"),
        ("worker-1:http", "the port must be 1 to 65535"),
    ],
)
def test_a_bad_worker_address_is_refused_naming_it(bad, why):
    with pytest.raises(ConfigError) as e:
        parse_worker_address(bad)
    assert str(e.value).startswith(f"worker address {bad!r}: ") and why in str(e.value)


def _rows(dispatcher: str, dataset: tf.data.Dataset, stall_timeout_s: float) -> list[int]:
    read = service.distribute(dataset, dispatcher, stall_timeout_s=stall_timeout_s)
    return sorted(int(r) for features, _ in read for r in features["dense"]["row_id"].numpy())


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_trainers_read_a_worker_at_the_address_it_registered(small_columnar, caplog):
    dataset = tfinput.columnar(small_columnar).build(PipelineConfig(batch_size=100))
    dispatcher = service.start_dispatcher()
    servers = [dispatcher]
    try:
        # Registered at a port nobody listens on: the trainer never gets a batch.
        nowhere = f"127.0.0.1:{_unused_port()}"
        with caplog.at_level(logging.WARNING, logger="tfinput.service"):
            lost = service.start_worker(dispatcher.target, worker_address=nowhere)
        assert registered_address(lost, nowhere) == nowhere
        with pytest.raises(
            tf.errors.OpError, match=r"ServiceError: no batch from grpc://.* in 1 s"
        ):
            _rows(dispatcher.target, dataset, stall_timeout_s=1)
        gc.collect()  # the failed read's iterator, while its servers still answer
        lost.stop()
        dispatcher.stop()
        # The same worker at its own address, with a new dispatcher: every row.
        dispatcher = service.start_dispatcher()
        servers.append(dispatcher)
        worker = service.start_worker(dispatcher.target, worker_address="127.0.0.1")
        servers.append(worker)
        port = worker._address.rsplit(":", 1)[1]
        assert registered_address(worker, "127.0.0.1") == f"127.0.0.1:{port}"
        assert registered_address(worker, None) == f"localhost:{port}"
        assert _rows(dispatcher.target, dataset, stall_timeout_s=60) == list(range(ROWS))
        assert caplog.records == []  # a dispatcher on loopback: no warning
    finally:
        gc.collect()
        for server in reversed(servers):
            server.stop()


def _network_address() -> str | None:
    """An address of this host on a network (not loopback), or None: the source address
    of a route out (a UDP socket's connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        ip = s.getsockname()[0]
    return None if ip.startswith("127.") or ip == "0.0.0.0" else ip


def test_a_worker_registered_as_localhost_with_a_dispatcher_on_the_network_warns(caplog):
    ip = _network_address()
    if ip is None:
        pytest.skip("this host has no address on a network (no route out)")
    dispatcher = service.start_dispatcher()
    port = dispatcher.target.rsplit(":", 1)[1]
    on_the_network = f"{ip}:{port}"
    started = []
    try:
        with caplog.at_level(logging.WARNING, logger="tfinput.service"):
            started.append(service.start_worker(f"grpc://{on_the_network}"))
        registered = registered_address(started[0], None)
        assert [r.getMessage() for r in caplog.records] == [
            f"tf.data service worker: registered with dispatcher {on_the_network} as "
            f"{registered}, an address only this host reaches: trainers on other hosts will "
            "wait for its batches until the read's stall timeout. Register the address they "
            "reach it at: --worker-address HOST[:PORT] (tfinput serve worker), "
            'worker_address="HOST[:PORT]" (tfinput.service.start_worker)'
        ]
        assert registered.startswith("localhost:")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="tfinput.service"):
            started.append(service.start_worker(on_the_network, worker_address=ip))
            started.append(service.start_worker(f"localhost:{port}"))  # all on this host
        assert caplog.records == []
        assert registered_address(started[1], ip).startswith(f"{ip}:")
    finally:
        for worker in started:
            worker.stop()
        dispatcher.stop()
