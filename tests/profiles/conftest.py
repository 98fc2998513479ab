"""Profiler traces shared by the profiles test modules.

A capture runs the profiler for several steps; the traces of the known pipelines
(`profiles._testing.cached_capture`) are taken once per process and read by every
module that only needs to look at them.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def slow_map_logdir():
    """Log directory of `profiles._testing.slow_map_pipeline` (a map sleeping 60 ms per
    batch, parallelism 1) under a simulated 2 ms step: 8 profiled steps, warm-up 2.

    The known answer does not depend on the machine's load: the sleep is a wait, not CPU
    work, so a busy machine only makes the rest relatively cheaper."""
    from profiles._testing import cached_capture

    return cached_capture("slow_map")


@pytest.fixture(scope="session")
def slow_map(slow_map_logdir):
    """`profiles.analyze` of `slow_map_logdir`."""
    from profiles import analyze

    return analyze(slow_map_logdir)


@pytest.fixture(scope="session")
def fast_logdir():
    """Log directory of `profiles._testing.fast_pipeline`, captured like `slow_map_logdir`."""
    from profiles._testing import cached_capture

    return cached_capture("fast")


@pytest.fixture(scope="session")
def fast(fast_logdir):
    """`profiles.analyze` of `fast_logdir`."""
    from profiles import analyze

    return analyze(fast_logdir)


@pytest.fixture(scope="session")
def trace_file(slow_map_logdir):
    """The one ``<host>.xplane.pb`` file of `slow_map_logdir`."""
    from profiles._xplane import find_trace

    return find_trace(slow_map_logdir).paths[0]


@pytest.fixture(scope="session")
def unmarked_logdir(tmp_path_factory):
    """A trace of `profiles._testing.fast_pipeline` taken without step markers: five
    ``next()`` calls between ``tf.profiler.experimental.start`` and ``stop``."""
    import tensorflow as tf

    from profiles._testing import fast_pipeline

    logdir = tmp_path_factory.mktemp("unmarked")
    iterator = iter(fast_pipeline())
    next(iterator)
    tf.profiler.experimental.start(str(logdir))
    for _ in range(5):
        next(iterator)
    tf.profiler.experimental.stop()
    return logdir
