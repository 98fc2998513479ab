"""Fixtures of the `tfinput.convert` tests: input files, the sample data sets, and the
readers of what a conversion wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import SHARED_DATA, collect


@pytest.fixture
def write_text(tmp_path):
    """``write_text(text, name="in.csv")``: a text file in ``tmp_path``."""

    def write(text: str, name: str = "in.csv") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def _sample(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"sample data {path} not found (set TFINPUT_SHARED_DATA)")
    return path


@pytest.fixture
def criteo() -> Path:
    """The project's Criteo sample (200 rows, CSV with a header)."""
    return _sample("criteo_sample.txt")


@pytest.fixture
def movielens() -> Path:
    """The project's MovieLens-1M sample (200 joined rows, CSV with a header)."""
    return _sample("movielens_sample.txt")


class Output:
    """What a conversion wrote, read back."""

    #: Sequential batches of 100 in file order.
    config = tfinput.PipelineConfig.naive(batch_size=100)

    @staticmethod
    def table(result: Any) -> dict[str, list]:
        """Parquet output as ``{column: values}``."""
        return pq.read_table(list(result.paths)).to_pydict()

    @staticmethod
    def examples(result: Any) -> list[tf.train.Example]:
        """TFRecord output as parsed ``tf.train.Example`` protos."""
        ds = tf.data.TFRecordDataset(list(result.paths))
        return [tf.train.Example.FromString(r.numpy()) for r in ds]

    @staticmethod
    def pipeline(result: Any) -> Any:
        """A pipeline over the output, in its format."""
        if result.format == "columnar":
            return tfinput.columnar(str(Path(result.paths[0]).parent))
        reader = tfinput.parquet if result.format == "parquet" else tfinput.tfrecord
        return reader(result.paths, result.schema)

    @classmethod
    def assert_same_rows(cls, got: Any, want: Any) -> None:
        """Two pipelines give the same rows, in the same order."""
        a, b = collect(got.build(cls.config)), collect(want.build(cls.config))
        assert a.keys() == b.keys() and len(b["labels"]["label"]) > 0
        for group in b:
            assert a[group].keys() == b[group].keys(), group
            for name, expected in b[group].items():
                np.testing.assert_array_equal(a[group][name], expected, err_msg=name)


@pytest.fixture(scope="session")
def output() -> type[Output]:
    """`Output`: the readers of what `convert` wrote."""
    return Output
