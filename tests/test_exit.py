"""A script that ends with tfinput iterators still alive exits, every time.

tf.data calls the readers' Python functions on its own threads, ahead of the consumer.
An iterator held by a module-level variable is destroyed while Python finalizes the
modules, and its destructor waits for those calls; a call still in flight then never
returns (Python ends a thread that takes the GIL after finalization began), and the
exit hung for ever (`tfinput._src.core._python_calls` says how tfinput prevents it).
Each child process below makes iterators of the sources that call Python from tf.data,
takes their first batches one after the other and ends with them alive and reading
ahead: Parquet through ``build()`` and ``iter()`` and through ``iterator()`` (one
read-ahead thread over row groups of 25,000 rows: tf.data's calls wait for its reads),
columnar records shuffled globally, a user's ``from_generator`` dataset wrapped
(``tfinput.wrap``), and the tf.data service guard (its watchdog waits in Python).
Without the exit hook the generator and guard child hangs every time, the Parquet and
columnar one most times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tfinput import testing

ROOT = Path(__file__).resolve().parent.parent
#: Seconds a child may take in all (it imports TensorFlow; the machine may be busy).
#: A child that hangs at its exit fails the test after this long.
TIMEOUT_S = 300

_CHILD = """
import json, sys, time
import numpy as np
import tensorflow as tf
import tfinput
from tfinput import schema as tfs, testing
from tfinput.config import PipelineConfig

files = json.loads(sys.argv[1])
small = testing.small_schema()
config = PipelineConfig(batch_size=50)
# Parquet: a batch is a row group of 25,000 rows, and one thread reads ahead, so that
# tf.data's calls wait for its reads as the script ends.
parquet = tfinput.parquet(files["parquet"], small)
one_thread = PipelineConfig(batch_size=25_000, interleave_parallelism=1)


def rows():  # a user's Python generator, slow enough to be called at the exit
    i = 0
    while True:
        time.sleep(0.01)
        yield {"x": np.float32(i), "y": np.float32(i % 2)}
        i += 1


def maker(kind):  # a function that makes an iterator of the kind (its dataset built)
    if kind == "parquet_iterator":
        return lambda: parquet.iterator(one_thread)
    if kind == "parquet_build":
        dataset = parquet.build(one_thread)
    elif kind == "columnar_global":
        dataset = tfinput.columnar(files["columnar"], small, shuffle="global").build(config)
    elif kind == "wrapped_generator":
        spec = tf.TensorSpec([], tf.float32)
        users = tf.data.Dataset.from_generator(rows, output_signature={"x": spec, "y": spec})
        schema = tfs.Schema(features=(tfs.Dense(name="x"),), labels=(tfs.Label(name="y"),))
        dataset = tfinput.wrap(users, schema).build(PipelineConfig(batch_size=4))
    elif kind == "service_guard":
        service = tf.data.experimental.service
        servers.append(dispatcher := service.DispatchServer())
        address = dispatcher.target.split("://")[1]
        servers.append(service.WorkerServer(service.WorkerConfig(dispatcher_address=address)))
        guarded = tfinput.tfrecord(files["tfrecord"], small).with_service(dispatcher.target)
        dataset = guarded.build(config)
    return lambda: iter(dataset)


servers = []
makers = [(kind, maker(kind)) for kind in sys.argv[2:]]
alive = []  # the iterators, alive at the exit
for kind, make in makers:  # each reads ahead from its first batch on, as the script ends
    batches = make()
    next(batches)
    alive.append(batches)
    print(kind, flush=True)
print("end of the script", flush=True)
"""

#: The children run side by side: the sources whose Python calls read files (Parquet
#: last, so that its reads are in flight as the script ends), and those whose calls wait
#: (the generator sleeps, the guard's watchdog waits for a batch).
CHILDREN = (
    ("columnar_global", "parquet_build", "parquet_iterator"),
    ("wrapped_generator", "service_guard"),
)


def test_a_script_ending_with_iterators_alive_exits(
    tmp_path, small_schema, small_columnar, small_tfrecord
):
    """Each child (see the module docstring) exits 0 after its last line, with no
    traceback on stderr."""
    parquet = testing.write_parquet(tmp_path, small_schema, rows=100_000, row_group_size=25_000)
    files = json.dumps({"parquet": parquet, "columnar": small_columnar, "tfrecord": small_tfrecord})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, files, *kinds],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for kinds in CHILDREN
    ]
    deadline = time.monotonic() + TIMEOUT_S
    hung, results = [], []
    for kinds, proc in zip(CHILDREN, procs):
        try:
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            hung.append(f"{kinds}, having printed {out!r}")
            continue
        results.append((kinds, proc.returncode, out, err))
    assert not hung, f"no exit after {TIMEOUT_S} s: " + "; ".join(hung)
    for kinds, returncode, out, err in results:
        assert returncode == 0, err[-3000:]
        assert out.splitlines() == [*kinds, "end of the script"], out
        assert "Traceback" not in err, err[-3000:]
