"""The Python functions tf.data calls, at the interpreter's exit
(`tfinput._src.core._python_calls`; tests/test_exit.py ends real scripts with iterators
of every such source alive)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import tensorflow as tf

from tfinput._src.core import _python_calls

ROOT = Path(__file__).resolve().parents[3]


def test_a_call_of_tf_data_into_python_is_seen_until_it_returns():
    """A ``tf.numpy_function`` running on one of tf.data's threads is what the exit hook
    waits for: seen, named, while it runs; gone once it has returned."""
    # Iterators an earlier test of this process dropped may still be collected, and
    # their tf.data threads still be calling Python: let them end first.
    gc.collect()
    _wait_until_no_call_in_flight()
    entered, release = threading.Event(), threading.Event()

    def held(x):
        entered.set()
        release.wait(60)
        return x

    dataset = tf.data.Dataset.range(1).map(lambda x: tf.numpy_function(held, [x], tf.int64))
    batches = iter(dataset.prefetch(1))  # the prefetch thread makes the call
    got = []
    consumer = threading.Thread(target=lambda: got.append(int(next(batches))))
    consumer.start()
    assert entered.wait(60)
    running = _python_calls._calls_in_flight()
    release.set()
    consumer.join(60)
    assert [call.split(" ")[0] for call in running] == ["held"], running
    assert running[0].endswith(f"test_python_calls.py:{held.__code__.co_firstlineno + 2})")
    assert got == [0]
    _wait_until_no_call_in_flight()
    assert _python_calls._calls_in_flight() == []


def _wait_until_no_call_in_flight(seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while _python_calls._calls_in_flight() and time.monotonic() < deadline:
        time.sleep(0.01)


_REFUSED = """
import sys
import tfinput
from tfinput import testing
from tfinput._src.core import _python_calls
from tfinput.config import PipelineConfig
from tfinput.errors import DataError

batches = tfinput.parquet(sys.argv[1:], testing.small_schema()).iterator(
    PipelineConfig(batch_size=10)
)
next(batches)
_python_calls._drain()  # what the exit hook does, before the script ends
read = 1
try:
    for _ in batches:  # what was read ahead, then the refusal
        read += 1
except DataError as e:
    print(f"{read} batches, then DataError: {e}")
"""


def test_reads_after_the_exit_began_are_refused_and_the_script_exits(small_parquet):
    """Once the exit hook has run (called here before the script's end, as a hook
    registered before the first build would find it), a Parquet iterator gives what it
    had read ahead, then a `DataError` saying that the interpreter is exiting; the
    script then ends with the iterator alive, and exits."""
    out = subprocess.run(
        [sys.executable, "-c", _REFUSED, *small_parquet],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    read, message = out.stdout.strip().split(" batches, then ")
    assert 1 <= int(read) < 100, out.stdout  # 1000 rows: 100 batches
    assert message == f"DataError: {_python_calls.EXITING}", out.stdout
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
