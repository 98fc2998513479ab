"""Shared fixtures: small real TFRecord, Parquet and columnar files, written once per
test run. Which end of the supported matrix runs which test is declared in
`tests/ends.toml` (read by `tests/_ends.py`) and applied here."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# XLA (TensorFlow's jit_compile and JAX, here and in the child processes the tests start)
# compiles with LLVM's cheap pipeline: the tests run a few steps of each compiled
# program, so full optimisation is CPU time spent for nothing. The programs and their
# numerics are XLA's as usual.
os.environ.setdefault(
    "XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
)

import pytest

from tests._once import run_once

#: Which end runs which test, slow tests, frozen garbage (tests/ends.toml).
pytest_plugins = ("tests._ends",)


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("TFINPUT_TEST_TIMES"):  # opt-in diagnostics
        config.pluginmanager.import_plugin("tests._diagnostics")
    # Three logical CPU devices, so tf.distribute tests have several replicas. This must
    # happen before TensorFlow initialises its devices, i.e. before any test runs.
    # pytest-xdist's controlling process runs no test: it need not load TensorFlow.
    if not hasattr(config, "workerinput") and (config.getoption("numprocesses", None) or 0):
        return
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    # RuntimeError: already initialised (e.g. by a plugin); the tests adapt.
    with contextlib.suppress(RuntimeError):
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * 3
        )


ROWS = 1000


@pytest.fixture(scope="session")
def small_schema():
    from tfinput import testing

    return testing.small_schema()


@pytest.fixture(scope="session")
def small_columns(small_schema):
    from tfinput import testing

    return testing.generate(small_schema, ROWS, seed=7, max_list_len=8)


def shared_files(
    tmp_path_factory: pytest.TempPathFactory, name: str, write: Callable[[Path], list[str]]
) -> list[str]:
    """Files written once per test run and read by every worker: ``write(directory)``
    runs in the first process that asks (the others wait), later ones read the list of
    files it returned (`tests._once.run_once`)."""
    return run_once(tmp_path_factory, name, lambda d: [str(f) for f in write(d)])


@pytest.fixture(scope="session")
def small_tfrecord(tmp_path_factory, small_schema, small_columns):
    from tfinput import testing

    return shared_files(
        tmp_path_factory,
        "tfrecord",
        lambda d: testing.write_tfrecord(
            d, small_schema, rows=ROWS, files=4, columns=small_columns
        ),
    )


@pytest.fixture(scope="session")
def small_parquet(tmp_path_factory, small_schema, small_columns):
    from tfinput import testing

    return shared_files(
        tmp_path_factory,
        "parquet",
        lambda d: testing.write_parquet(
            d, small_schema, rows=ROWS, files=4, columns=small_columns, row_group_size=100
        ),
    )


@pytest.fixture(scope="session")
def small_columnar(tmp_path_factory, small_schema, small_columns):
    """The same rows as columnar records: chunks of 100 rows, files of 300, 300, 300, 100."""
    from tfinput import testing

    return shared_files(
        tmp_path_factory,
        "columnar",
        lambda d: testing.write_columnar(
            d, small_schema, rows=ROWS, files=4, chunk_rows=100, columns=small_columns
        ),
    )


@pytest.fixture(scope="session")
def pipeline_of(small_schema, small_columns, small_tfrecord, small_parquet, small_columnar):
    """``pipeline_of(kind)``: a pipeline over the shared 1000 rows for each kind in
    `tests.helpers.SOURCE_KINDS` (``wrapped_batched``: the user's dataset batches by 50).

    A module that runs over every source parametrizes its own ``pipeline`` fixture::

        @pytest.fixture(params=SOURCE_KINDS)
        def pipeline(request, pipeline_of):
            return pipeline_of(request.param)
    """
    import tfinput
    from tests.helpers import wrapped_dataset

    def make(kind: str):
        if kind == "tfrecord":
            return tfinput.tfrecord(small_tfrecord, small_schema)
        if kind == "parquet":
            return tfinput.parquet(small_parquet, small_schema)
        if kind == "columnar":
            return tfinput.columnar(small_columnar, small_schema)
        if kind == "wrapped":
            return tfinput.wrap(lambda: wrapped_dataset(small_columns), small_schema)
        if kind == "wrapped_batched":
            return tfinput.wrap(
                lambda: wrapped_dataset(small_columns).ragged_batch(50, drop_remainder=True),
                small_schema,
                batched=True,
            )
        raise ValueError(f"unknown source kind {kind!r}")

    return make


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A folder on a 5 MiB file system of its own (a tmpfs), for outputs that fill their
    disk; unmounted after the test. `tests.helpers.fill` leaves a chosen space free on
    it. Skipped where this process may not mount one (it needs root, or CAP_SYS_ADMIN)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(folder)]
    try:
        done = subprocess.run(mount, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        done = subprocess.CompletedProcess(mount, 1, "", str(e))
    if done.returncode != 0:
        pytest.skip(f"a tmpfs of its own, which this process may not mount: {done.stderr}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False, timeout=30)
