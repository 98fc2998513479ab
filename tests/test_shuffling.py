"""A ``shuffle_buffer`` mixes rows across batches on every source, whatever the buffer
against the batch: no batch of a shuffled epoch holds exactly the rows of a batch of the
unshuffled read, every row comes once, and a seeded epoch is the same on every build.
The one buffer that cannot mix, one record in tf.data's own shuffle, is said once."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tfinput.config import PipelineConfig
from tfinput.schema import Dense, Label, Schema

#: Only the row ids are read: what is measured is where the rows go.
IDS = Schema(features=(Dense(name="row_id", dtype="int64"),), labels=(Label(name="label"),))
#: Files read one after another, in order: the unshuffled batch ``k`` of every source is
#: rows ``k * B`` to ``(k + 1) * B - 1`` of the fixture (its rows are written in order).
IN_ORDER = dict(interleave_cycle_length=1, interleave_parallelism=1, deterministic=True)
KINDS = (
    "tfrecord",  # records handed over in mini-batches (read_batch), shuffled by windows
    "tfrecord-records",  # read_batch=0: tf.data's own shuffle of records
    "parquet",
    "columnar",  # chunks of 100 rows: the batches below are under two chunks
    "wrapped",  # rows, batched by the pipeline
    "wrapped-batches",  # the user's batches of the config's size
    "wrapped-rebatched",  # the user's batches of 50, re-cut
)


def build(kind, files, columns, config):
    """One epoch of ``kind`` with ``config``, as each batch's row ids."""
    if kind.startswith("tfrecord"):
        pipeline = tfinput.tfrecord(files["tfrecord"], IDS)
        if kind == "tfrecord-records":
            config = config.replace(read_batch=0)
    elif kind in ("parquet", "columnar"):
        pipeline = getattr(tfinput, kind)(files[kind], IDS)
    elif kind == "wrapped":
        pipeline = tfinput.wrap(lambda: rows(columns), IDS)
    else:
        size = config.batch_size if kind == "wrapped-batches" else 50
        pipeline = tfinput.wrap(
            lambda: rows(columns).batch(size, drop_remainder=True),
            IDS,
            batched=True,
            rebatch=kind == "wrapped-rebatched",
        )
    return [f["dense"]["row_id"].numpy().astype(int) for f, _ in pipeline.build(config)]


def rows(columns):
    """The fixture's row ids and labels as a user's dataset of rows."""
    values = {key: columns.values[key] for key in ("row_id", "label")}
    return tf.data.Dataset.from_tensor_slices(values)


@pytest.fixture(scope="module")
def files(small_tfrecord, small_parquet, small_columnar):
    return {"tfrecord": small_tfrecord, "parquet": small_parquet, "columnar": small_columnar}


@pytest.mark.parametrize(
    ("batch", "buffer"),
    [(32, 10), (100, 100)],
    ids=["buffer-under-a-batch", "buffer-of-a-batch"],
)
@pytest.mark.parametrize("kind", KINDS)
def test_every_source_mixes_rows_across_batches(kind, batch, buffer, files, small_columns):
    base = PipelineConfig(batch_size=batch, drop_remainder=False, **IN_ORDER)
    config = base.replace(shuffle_buffer=buffer, shuffle_seed=7)
    plain = build(kind, files, small_columns, base)
    rows = np.concatenate(plain)
    assert rows.tolist() == list(range(len(rows)))  # the unshuffled read is in order
    shuffled = build(kind, files, small_columns, config)
    assert sorted(np.concatenate(shuffled).tolist()) == rows.tolist(), "every row exactly once"
    unshuffled = {tuple(b) for b in plain}
    same = [k for k, b in enumerate(shuffled) if tuple(sorted(b)) in unshuffled]
    assert same == [], f"batches holding an unshuffled batch's rows: {same} of {len(shuffled)}"
    again = build(kind, files, small_columns, config)  # seeded: the same epoch
    assert [b.tolist() for b in again] == [b.tolist() for b in shuffled]


@pytest.mark.parametrize("kind", ["tfrecord-records", "wrapped"])
def test_a_buffer_of_one_record_is_said_once_with_the_setting_that_mixes(
    kind, files, small_columns, caplog, monkeypatch
):
    from tfinput._src.core.sources import protocol

    monkeypatch.setattr(protocol, "_WARNED", set())  # warnings of earlier tests
    caplog.set_level(logging.WARNING, logger="tfinput")
    config = PipelineConfig(
        batch_size=32, drop_remainder=False, shuffle_buffer=1, shuffle_seed=1, **IN_ORDER
    )
    for _ in range(2):  # the tuner builds one pipeline many times: said once
        batches = build(kind, files, small_columns, config)
    assert np.concatenate(batches).tolist() == list(range(1000))  # nothing moved
    source = "tfrecord" if kind.startswith("tfrecord") else "dataset"
    assert [r.getMessage() for r in caplog.records if "shuffle_buffer" in r.getMessage()] == [
        f"tfinput: shuffle_buffer=1 has no effect on the {source} source: tf.data's shuffle "
        "of a one-record buffer hands each record on as it comes; set shuffle_buffer to 2 or "
        "more (rows then cross batch boundaries, and move farther the larger the buffer)"
    ]
