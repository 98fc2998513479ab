"""Fixtures of the source tests (the file sources in ``sources/``, the columnar source in
``columnar/``): fresh knob warnings, logged warnings, a read request, and the check that
a source reads the shared fixture rows exactly, in file order."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tests.helpers import SEQUENTIAL, collect, expected_rows


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each knob warning is logged once per process; start every test with none logged,
    whatever other tests built before."""
    from tfinput._src.core.sources import protocol

    monkeypatch.setattr(protocol, "_WARNED", set())


@pytest.fixture
def warnings_logged(caplog):
    """``warnings_logged()``: the tfinput warnings logged so far in this test."""
    caplog.set_level(logging.WARNING, logger="tfinput")

    def messages() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    return messages


@pytest.fixture
def read_request(small_schema):
    """``read_request(files, **config)``: a `ReadRequest` of the small schema."""
    from tfinput._src.core.sources.protocol import ReadRequest
    from tfinput.config import PipelineConfig

    def make(files, *, shuffle_files=False, **config):
        config.setdefault("batch_size", 10)
        return ReadRequest(
            files=list(files),
            schema=small_schema,
            config=PipelineConfig(**config),
            batch_size=config["batch_size"],
            shuffle_files=shuffle_files,
        )

    return make


@pytest.fixture
def assert_reads_fixture_rows(small_columns, small_schema):
    """``assert_reads_fixture_rows(pipeline, batch_size=100)``: built sequentially, the
    pipeline gives the shared 1000 rows, every value and in file order."""
    from tfinput.config import PipelineConfig

    def check(pipeline, batch_size: int = 100) -> None:
        got = collect(pipeline.build(PipelineConfig(batch_size=batch_size, **SEQUENTIAL)))
        want = expected_rows(small_columns, small_schema)
        np.testing.assert_array_equal(got["dense"]["row_id"], np.arange(1000))
        for group in ("dense", "ids", "weights"):
            assert got[group].keys() == want[group].keys(), group
            for name, expected in want[group].items():
                np.testing.assert_allclose(got[group][name], expected, rtol=1e-6, err_msg=name)
        np.testing.assert_array_equal(got["labels"]["label"], small_columns.values["label"])

    return check
