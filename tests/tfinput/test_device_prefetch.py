"""Device prefetch: same batches in the same order, errors at the right step, no thread
left behind. JAX runs on its CPU device here: the same code path as on a GPU."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tfinput import device_prefetch
from tfinput.errors import ConfigError, DataError
from tfinput.testing import small_schema, write_tfrecord


def test_order_and_completeness():
    it = device_prefetch.DevicePrefetch(range(100), put=lambda x: x * 2, size=3)
    assert list(it) == [2 * i for i in range(100)]
    assert not it.running
    with pytest.raises(StopIteration):
        next(it)


def test_source_error_is_raised_at_its_own_step():
    def source():
        yield from range(5)
        raise DataError("bad record in part-3.tfrecord")

    it = device_prefetch.DevicePrefetch(source(), put=lambda x: x, size=4)
    got = [next(it) for _ in range(5)]
    assert got == [0, 1, 2, 3, 4]
    with pytest.raises(DataError, match="part-3"):
        next(it)
    assert not it.running


def test_put_error_is_raised_at_its_own_step():
    def put(x):
        if x == 3:
            raise ValueError("cannot place batch 3")
        return x

    it = device_prefetch.DevicePrefetch(range(10), put=put, size=2)
    assert [next(it), next(it), next(it)] == [0, 1, 2]
    with pytest.raises(ValueError, match="batch 3"):
        next(it)


def test_close_stops_the_thread_and_releases_the_source():
    released = threading.Event()

    def endless():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            released.set()

    with device_prefetch.DevicePrefetch(endless(), put=lambda x: x, size=2) as it:
        assert [next(it), next(it)] == [0, 1]
    assert not it.running
    assert released.is_set()
    with pytest.raises(StopIteration):
        next(it)


def test_a_dropped_iterator_stops_its_thread():
    it = device_prefetch.DevicePrefetch(iter(lambda: 1, None), put=lambda x: x, size=2)
    next(it)
    thread = it._thread
    del it
    gc.collect()
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_size_is_validated():
    with pytest.raises(ConfigError, match="size"):
        device_prefetch.DevicePrefetch([], put=lambda x: x, size=0)
    with pytest.raises(ConfigError, match="size"):
        device_prefetch.to_tensorflow(tf.data.Dataset.range(3), size=0)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    schema = small_schema()
    files = write_tfrecord(tmp_path_factory.mktemp("dp"), schema, rows=256, files=2)
    return tfinput.tfrecord(files, schema)


def _flat(batch):
    return [np.asarray(x) for x in tf.nest.flatten(batch)]


def test_to_jax_delivers_every_batch_on_the_device(pipeline):
    jax = pytest.importorskip("jax")
    config = tfinput.PipelineConfig(batch_size=64, deterministic=True)
    expected = list(pipeline.build(config).as_numpy_iterator())
    with device_prefetch.to_jax(pipeline.build(config), size=2) as it:
        got = list(it)
    assert len(got) == len(expected) == 4
    device = jax.devices()[0]
    for g, e in zip(got, expected):
        leaves = jax.tree_util.tree_leaves(g)
        assert all(isinstance(x, jax.Array) and x.devices() == {device} for x in leaves)
        for a, b in zip(_flat(jax.device_get(g)), _flat(e)):
            np.testing.assert_array_equal(a, b)


_SHARDED = """
import numpy as np, jax, tensorflow as tf, tfinput
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tfinput import device_prefetch
assert len(jax.devices()) == 2, jax.devices()
mesh = Mesh(np.array(jax.devices()), ("data",))
sharding = NamedSharding(mesh, PartitionSpec("data"))
ds = tfinput.tfrecord(FILES, tfinput.testing.small_schema()).build(
    tfinput.PipelineConfig(batch_size=64, deterministic=True))
expected = next(ds.as_numpy_iterator())
with device_prefetch.to_jax(ds, sharding=sharding) as it:
    features, labels = next(it)
ids = features["ids"]["history"]
assert ids.sharding == sharding
assert sorted(s.data.shape for s in ids.addressable_shards) == [(32, 5), (32, 5)]
np.testing.assert_array_equal(np.asarray(ids), expected[0]["ids"]["history"])
assert not it.running
print("OK", flush=True)
# With TensorFlow and JAX (two host devices) in one process, interpreter teardown
# sometimes aborts inside their C++ runtimes ("terminate called without an active
# exception", rc -6) after everything above has passed; the prefetch thread is closed
# (asserted above), so leave without the teardown.
import os
os._exit(0)
"""


@pytest.mark.slow
def test_to_jax_with_a_sharding_splits_the_batch_over_devices(pipeline):
    """Data parallelism over two (CPU) devices: each holds half of every batch."""
    import os
    import subprocess
    import sys

    pytest.importorskip("jax")
    files = list(pipeline.source.paths)
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    code = _SHARDED.replace("FILES", repr(files))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("OK")


def test_to_jax_surfaces_a_data_error_from_the_pipeline(tmp_path):
    pytest.importorskip("jax")
    schema = small_schema()
    files = write_tfrecord(tmp_path, schema, rows=256, files=1)
    path = Path(files[0])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a corrupt record in the second half
    path.write_bytes(bytes(data))
    ds = tfinput.tfrecord(files, schema).build(tfinput.PipelineConfig(batch_size=32))
    it = device_prefetch.to_jax(ds, size=2)
    delivered = 0
    with pytest.raises(tf.errors.DataLossError):
        for _ in it:
            delivered += 1
    assert 0 < delivered < 8
    assert not it.running


def test_to_tensorflow_keeps_the_values(pipeline):
    config = tfinput.PipelineConfig(batch_size=64, deterministic=True)
    expected = [_flat(b) for b in pipeline.build(config).as_numpy_iterator()]
    ds = device_prefetch.to_tensorflow(pipeline.build(config), size=2)
    got = [_flat(b) for b in ds.as_numpy_iterator()]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        for a, b in zip(g, e):
            np.testing.assert_array_equal(a, b)
