"""Minibatching through the SparseCore feed (``SparseCorePlan(minibatching=True)``): a
batch whose ids exceed the limits is split into minibatches instead of refused, and
what the feed yields equals jax-tpu-embedding called directly on every entry that
carries data; on several hosts the hosts agree on each split through jax-tpu-embedding's
gRPC all-reduce (`tfinput.sparsecore.AllReduce`, two hosts in one process here; two
processes in test_feed_hosts.py), and a feed that stops spends the same batch numbers
on every host, so that the next feed's all-reduces neither wait for ever nor abort."""

from __future__ import annotations

import gc
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

import tfinput
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError

pytest.importorskip(
    "jax_tpu_embedding",
    reason="jax-tpu-embedding is not installed (pip install 'tfinput[sparsecore]': wheels "
    "for CPython 3.12+ on x86-64 Linux)",
)

from jax_tpu_embedding.sparsecore.lib.nn import embedding

from tests.helpers import without_weight_zero
from tfinput._src.applications.sparsecore.workers import used_entries_minibatched
from tfinput.sparsecore import AllReduce, LimitsExceeded, SparseCorePlan, sparsecore_feed

BATCH = 64
DEVICES = 2
SC = 4
#: The data needs at most 18 ids and 10 distinct ids in one partition (8 batches of the
#: shared rows): 24 ids hold every batch, 4 distinct ids none, so that every batch must
#: be split (into up to 6 minibatches) and none drops an id once it is.
LIMITS = (24, 4)


@pytest.fixture(scope="module")
def batches(small_tfrecord, small_schema):
    config = PipelineConfig(batch_size=BATCH, deterministic=True)
    ds = tfinput.tfrecord(small_tfrecord, small_schema).build(config)
    return list(ds.take(8).as_numpy_iterator())


def _plan(schema, *, hosts=1, minibatching=True, **kw):
    return SparseCorePlan.from_schema(
        schema,
        batch_size=BATCH,
        local_device_count=DEVICES,
        global_device_count=DEVICES * hosts,
        num_sc_per_device=SC,
        stacking="none",
        limits={t.name: LIMITS for t in schema.tables},
        minibatching=minibatching,
        **kw,
    )


def _direct(plan, features, number, all_reduce=None):
    """The reference: jax-tpu-embedding called directly with minibatching, each
    multi-hot row without its padding (the plan's ids and weights, made ragged here)."""
    ids, weights = without_weight_zero(*plan.inputs(features))
    out, stats = embedding.preprocess_sparse_dense_matmul_input(
        ids,
        weights,
        dict(plan.feature_specs),
        local_device_count=plan.local_device_count,
        global_device_count=plan.global_device_count,
        num_sc_per_device=SC,
        allow_id_dropping=True,
        batch_number=number,
        enable_minibatching=True,
        all_reduce_interface=all_reduce,
    )
    return out, stats


def _assert_same(plan, got, want):
    """Equal on everything that carries data: per device, the row pointers of the
    minibatches the batch has (SparseCores x minibatches x partitions; the rest of the
    row pointer buffer is not written), and the COO entries up to the last one they
    point to, rounded up to 8 (ids, alignment padding; beyond, the buffer is not
    written)."""
    np.testing.assert_array_equal(got.num_minibatches, want.num_minibatches)
    n = int(np.max(want.num_minibatches))
    rows = SC * n * SC * plan.global_device_count
    for table, pointers in want.lhs_row_pointers.items():
        a = got.lhs_row_pointers[table].reshape(DEVICES, -1)[:, :rows]
        b = pointers.reshape(DEVICES, -1)[:, :rows]
        assert a.tobytes() == b.tobytes(), table
        for device in range(DEVICES):
            end = -(-int(b[device, -1]) // 8) * 8
            assert end > 0
            for field in ("lhs_embedding_ids", "lhs_sample_ids", "lhs_gains"):
                x = getattr(got, field)[table].reshape(DEVICES, -1)[device, :end]
                y = getattr(want, field)[table].reshape(DEVICES, -1)[device, :end]
                assert x.tobytes() == y.tobytes(), (table, field, device)


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _pair():
    """Two hosts' `AllReduce` ends in this process, on loopback."""
    ports = _free_ports(2)
    return [
        AllReduce.start([f"localhost:{ports[1 - h]}"], ports[h], host_id=h, host_count=2)
        for h in range(2)
    ]


def test_a_batch_beyond_the_limits_is_minibatched_not_refused(batches, small_schema):
    refusing = sparsecore_feed(batches, _plan(small_schema, minibatching=False))
    with pytest.raises(LimitsExceeded, match="batch 0: table"), refusing:
        next(refusing)
    plan = _plan(small_schema)
    with sparsecore_feed(batches, plan, workers=2, prefetch=3) as feed:
        fed = list(feed)
    assert len(fed) == len(batches)
    stats = feed.stats.to_dict()
    assert stats["dropped_ids"] == 0
    assert stats["minibatched"] == len(batches) and stats["max_minibatches"] > 1
    for number, (((_, sparse), _), (features, _)) in enumerate(zip(fed, batches)):
        want, want_stats = _direct(plan, features, number)
        assert not any(want_stats.id_drop_counters.values())
        _assert_same(plan, sparse, want)
    # Every id is in the buffers, over the minibatches: as many as a plan without
    # minibatching holds with limits that fit every batch (jax-tpu-embedding's 256).
    roomy = SparseCorePlan.from_schema(
        small_schema,
        batch_size=BATCH,
        local_device_count=DEVICES,
        num_sc_per_device=SC,
        stacking="none",
    )
    with sparsecore_feed(batches, roomy) as whole:
        list(whole)
    assert whole.stats.dropped_ids == 0
    used = {t: u["used_entries"] for t, u in whole.stats.to_dict()["tables"].items()}
    assert {t: u["used_entries"] for t, u in stats["tables"].items()} == used


def test_used_entries_minibatched_reads_each_devices_running_ends():
    # Two devices, 4 row pointers written each (then unwritten memory): device 0's ends
    # 3, 10, 10, 17 -> [0, 3), [8, 10), [16, 10), [16, 17): 3 + 2 + 0 + 1; device 1's
    # 0, 9, 9, 20 -> 0 + 9 + 0 + 4.
    pointers = np.array([3, 10, 10, 17, -7, 99, 0, 9, 9, 20, 5, -1])
    assert used_entries_minibatched(pointers, 64, 2, 4) == 6 + 13
    assert used_entries_minibatched(pointers, 10, 2, 4) == 10


def test_two_hosts_agree_on_every_split_and_a_stopped_feed_spends_the_same_numbers(
    batches, small_schema
):
    """Two hosts (two AllReduce ends on loopback, threads of this process), each feeding
    half of every global batch for 2 of the 4 devices. Each takes 3 batches from a first
    feed and closes it (the workers had run ahead), then a second feed takes the rest:
    no all-reduce waits for ever or aborts, and both hosts spent the same numbers."""
    plan = _plan(small_schema, hosts=2)
    ends = _pair()
    halves = [batches, batches[::-1]]  # host h's per-host batches
    got: dict[int, list] = {0: [], 1: []}
    errors: list[BaseException] = []

    def host(h: int) -> None:
        try:
            with sparsecore_feed(halves[h], plan, workers=2, prefetch=2, all_reduce=ends[h]) as f:
                got[h] += [next(f) for _ in range(3)]
            rest = halves[h][3:]  # from where the training loop is
            with sparsecore_feed(rest, plan, workers=2, all_reduce=ends[h]) as f:
                got[h] += list(f)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=host, args=(h,)) for h in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a host waited for ever"
    assert not errors, errors
    assert [len(got[h]) for h in range(2)] == [8, 8]
    # The first feed spent 3 + prefetch 2 = 5 numbers on both hosts (as far as any host
    # may have read ahead), the second the 5 batches left: the next feed starts from the
    # same number on both.
    assert [e.take() for e in ends] == [5 + 5, 5 + 5]
    splits = [[int(np.max(s.num_minibatches)) for (_, s), _ in got[h]] for h in range(2)]
    assert splits[0] == splits[1] and max(splits[0]) > 1, splits

    # The reference: direct calls on both hosts at once, through two fresh ends.
    refs = _pair()
    want: dict[int, list] = {0: [], 1: []}

    def direct(h: int) -> None:
        fed = halves[h][:3] + halves[h][3:]
        want[h] = [_direct(plan, f, n, refs[h].interface)[0] for n, (f, _) in enumerate(fed)]

    threads = [threading.Thread(target=direct, args=(h,)) for h in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for h in range(2):
        for ((_, sparse), _), reference in zip(got[h], want[h], strict=True):
            _assert_same(plan, sparse, reference)


def test_minibatching_settings_are_checked(batches, small_schema):
    plan = _plan(small_schema)
    with pytest.raises(ConfigError, match=r"all_reduce must be a tfinput\.sparsecore\.AllReduce"):
        sparsecore_feed(batches, plan, all_reduce=object())
    (end, _other) = _pair()
    with pytest.raises(ConfigError, match="the plan does not minibatch"):
        sparsecore_feed(batches, _plan(small_schema, minibatching=False), all_reduce=end)
    with pytest.raises(ConfigError, match="all_reduce needs worker threads"):
        sparsecore_feed(batches, plan, processes=True, all_reduce=end)
    with pytest.raises(ConfigError, match=r"minibatching on several hosts \(2 of 4 devices"):
        sparsecore_feed(batches, _plan(small_schema, hosts=2))
    with pytest.raises(ConfigError, match=r"keras-rs 0\.4 does not minibatch"):
        _plan(small_schema, output="keras_rs")
    with pytest.raises(ConfigError, match="1 peer"):
        AllReduce.start(["localhost:1"], _free_ports(1)[0], host_id=0, host_count=3)
    first = sparsecore_feed(batches[:1], plan, workers=0, all_reduce=end)
    with pytest.raises(ConfigError, match="another feed is using this AllReduce"):
        sparsecore_feed(batches, plan, all_reduce=end)
    first.close()
    assert end.take() == 0  # a serial feed that ran nothing spent nothing
    end.give_back(0)
    dropped = sparsecore_feed(batches[:1], plan, workers=0, all_reduce=end)
    del dropped  # collected without close: it gives its numbers back all the same
    gc.collect()
    sparsecore_feed(batches[:1], plan, workers=0, all_reduce=end).close()


#: One host of two feeds while the other never does; the process then exits without
#: closing the feed (argv: the data's directory).
_LEFT_WAITING = """
import socket, sys, time
import tfinput
from tfinput import testing
from tfinput.config import PipelineConfig
from tfinput.sparsecore import AllReduce, SparseCorePlan, sparsecore_feed

schema = testing.small_schema()
files = testing.write_tfrecord(sys.argv[1], schema, rows=256, files=1)
batches = tfinput.tfrecord(files, schema).build(PipelineConfig(batch_size=64))
plan = SparseCorePlan.from_schema(schema, batch_size=64, local_device_count=2,
    global_device_count=4, stacking="none", limits={t.name: (24, 4) for t in schema.tables},
    minibatching=True)
ports = []
for _ in range(2):
    with socket.socket() as s:
        s.bind(("localhost", 0))
        ports.append(s.getsockname()[1])
ends = [AllReduce.start([f"localhost:{ports[1 - h]}"], ports[h], host_id=h, host_count=2)
        for h in range(2)]
feed = sparsecore_feed(batches, plan, workers=2, all_reduce=ends[0])
time.sleep(2)  # its workers wait in the all-reduce for the other host
print("leaving", flush=True)
"""


def test_a_host_left_waiting_raises_at_close_and_does_not_hold_up_the_exit(
    batches, small_schema, monkeypatch, tmp_path
):
    """The other host never preprocesses the batches this one started: closing waits
    (`Lockstep.TIMEOUT`), then raises naming the batches; a process that exits without
    closing its feed exits (its workers are daemon threads, its finalizer does not run
    at exit)."""
    from tfinput._src.applications.sparsecore.workers import Lockstep

    monkeypatch.setattr(Lockstep, "PATIENCE", 0.2)
    monkeypatch.setattr(Lockstep, "TIMEOUT", 1.0)
    ends = _pair()
    feed = sparsecore_feed(batches, _plan(small_schema, hosts=2), workers=2, all_reduce=ends[0])
    # None taken, prefetch 4: any host may have read batches 0-3, so this one runs them
    # all before it waits.
    with pytest.raises(tfinput.errors.DataError, match=r"batches 0-3 of this feed were not"):
        feed.close()
    proc = subprocess.run(
        [sys.executable, "-c", _LEFT_WAITING, str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and "leaving" in proc.stdout, proc.stdout + proc.stderr[-3000:]
