"""`tfinput._src.measurement.probes`: CPU time, memory and CPU count of this process, and the
machine record kept next to every measurement."""

from __future__ import annotations

import os
import platform
import threading

import numpy as np
import pyarrow
import tensorflow as tf

from tfinput._src.measurement.probes import (
    available_cpus,
    current_rss_bytes,
    machine,
    peak_rss_bytes,
    process_cpu_seconds,
)


def test_process_cpu_seconds_counts_work_on_other_threads():
    before = process_cpu_seconds()
    worker = threading.Thread(target=lambda: sum(range(2_000_000)))
    worker.start()
    worker.join()
    assert process_cpu_seconds() > before


def test_rss_probes_see_memory_this_process_touches():
    before = current_rss_bytes()
    block = np.ones(64 * 2**20, np.uint8)  # 64 MiB, every page written
    assert current_rss_bytes() - before >= 48 * 2**20
    assert peak_rss_bytes() >= 100 * 2**20  # TensorFlow alone is larger
    del block


def test_available_cpus_is_the_affinity_mask():
    assert available_cpus() == len(os.sched_getaffinity(0))


def test_machine_record():
    m = machine(cpu_count=3)
    assert m["cpu_count"] == 3 and m["logical_cpus"] == os.cpu_count()
    assert m["tensorflow"] == tf.__version__ and m["keras_backend"] == "tensorflow"
    assert m["pyarrow"] == pyarrow.__version__ and m["numpy"] == np.__version__
    assert m["python"] == platform.python_version()
    assert m["cpu_model"] and m["platform"]
    assert len(m["load_average"]) == 3
    assert machine()["cpu_count"] == available_cpus()
