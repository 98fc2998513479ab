"""`tfinput.service`: a columnar pipeline runs on real tf.data service workers (in-process
dispatcher and worker on loopback) with output identical to local reading; Python-backed
pipelines are refused before they reach a worker."""

from __future__ import annotations

import numpy as np
import pytest

import tfinput
from tests.helpers import collect
from tfinput import service
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError


@pytest.fixture(scope="module")
def address():
    with service.local_cluster(workers=1) as addr:
        yield addr


def test_columnar_pipeline_on_the_service_matches_local_reading(address, small_columnar):
    config = PipelineConfig(batch_size=200, deterministic=True)
    pipeline = tfinput.columnar(small_columnar)
    local = collect(pipeline.build(config))
    remote = collect(service.distribute(pipeline.build(config), address, job_name="same"))
    for group in local:
        for name, want in local[group].items():
            np.testing.assert_array_equal(remote[group][name], want, err_msg=f"{group}/{name}")


def test_dynamic_sharding_delivers_every_row_once(address, small_columnar):
    config = PipelineConfig(batch_size=100, drop_remainder=False)
    ds = service.distribute(
        tfinput.columnar(small_columnar).build(config), address, processing_mode="dynamic"
    )
    rows = collect(ds)["dense"]["row_id"].astype(int)
    assert sorted(rows.tolist()) == list(range(1000))


def test_python_backed_pipeline_is_refused_naming_the_ops(address, small_schema, small_parquet):
    ds = tfinput.parquet(small_parquet, small_schema).build(PipelineConfig(batch_size=100))
    with pytest.raises(ConfigError) as e:
        service.distribute(ds, address)
    message = str(e.value)
    assert message.startswith("the dataset given to tf.data service is not native-only")
    assert "PyFuncStateless" in message


def test_unknown_processing_mode(address, small_columnar):
    ds = tfinput.columnar(small_columnar).build(PipelineConfig(batch_size=100))
    with pytest.raises(ConfigError, match="processing_mode: expected one of"):
        service.distribute(ds, address, processing_mode="round-robin")
