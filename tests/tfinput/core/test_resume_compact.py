"""Compact `InputIterator` states: columnar records with the global shuffle save three
integers and a summary of the pipeline's identity, whatever the data or the batches
handed back."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

import tfinput
from tfinput.config import PipelineConfig
from tfinput.errors import ResumeError
from tfinput.resume import COMPACT_FORMAT

CONFIG = PipelineConfig(batch_size=100, shuffle_seed=3, deterministic=True)


def _rows(batch) -> list[int]:
    return batch[0]["dense"]["row_id"].numpy().astype(int).tolist()


@pytest.fixture(scope="module")
def pipeline(small_columnar, small_schema):
    return tfinput.columnar(small_columnar, small_schema, shuffle="global")


#: ``(batches taken, unconsumed)`` at which `test_compact_state_resumes_exactly` saves.
SAVES = [(1, 0), (6, 4), (10, 0), (11, 3), (12, 2), (25, 8)]


@pytest.fixture(scope="module")
def saved_run(pipeline):
    """One uninterrupted run of three passes (10 batches of 100 rows, one chunk each),
    with the state it gave at each of `SAVES` (``get_state(unconsumed=...)`` after that
    many ``next``): ``(rows of every batch, {(taken, unconsumed): state})``. Taking a
    state does not move the iterator, so one run serves every save point (rather than
    one three-pass run each), and each state is checked against the run that gave it."""
    it = pipeline.iterator(CONFIG, epochs=3, keep=8)
    batches, states = [], {}
    for batch in it:
        batches.append(_rows(batch))
        for taken, unconsumed in SAVES:
            if taken == len(batches):
                states[taken, unconsumed] = it.get_state(unconsumed=unconsumed)
    return batches, states


@pytest.fixture(scope="module")
def uninterrupted(saved_run):
    """Every batch of three passes (10 batches of 100 rows, one chunk each)."""
    return saved_run[0]


@pytest.mark.parametrize(
    "taken,unconsumed",
    SAVES,
    ids=["first", "ahead", "pass-end", "back-over-pass-end", "second-pass", "third-pass"],
)
def test_compact_state_resumes_exactly(pipeline, saved_run, taken, unconsumed):
    uninterrupted, states = saved_run
    assert len(uninterrupted) == 30
    state = states[taken, unconsumed]
    header = json.loads(state)
    assert header["format"] == COMPACT_FORMAT and len(state) < 1024
    at = taken - unconsumed
    # Pass, batch within it (a state at a pass's end may say batch 10 of that pass).
    assert header["epoch"] * 10 + header["batch"] == at and header["batch"] <= 10

    fresh = pipeline.iterator(CONFIG, epochs=3)
    fresh.set_state(state)
    assert fresh.position == at
    rest = [_rows(b) for b in fresh]
    assert rest == uninterrupted[at:]


def test_restored_iterator_saves_compact_states_again(pipeline, uninterrupted):
    it = pipeline.iterator(CONFIG, epochs=3)
    for _ in range(4):
        next(it)
    second = pipeline.iterator(CONFIG, epochs=3)
    second.set_state(it.get_state())
    for _ in range(9):  # into the second pass
        next(second)
    third = pipeline.iterator(CONFIG, epochs=3)
    third.set_state(second.get_state(unconsumed=1))
    assert [_rows(b) for b in third] == uninterrupted[12:]


def test_state_size_does_not_grow_with_the_data_or_the_batches_handed_back(
    pipeline, small_columnar, small_schema
):
    big = dataclasses.replace(CONFIG, batch_size=500)
    small = pipeline.iterator(CONFIG, keep=8)
    large = pipeline.iterator(big, keep=8)
    for _ in range(2):
        next(small), next(large)
    sizes = {len(small.get_state(unconsumed=2)), len(large.get_state(unconsumed=2))}
    assert max(sizes) < 1024
    assert max(sizes) - min(sizes) <= 4  # digits of the numbers only


def test_compact_state_of_another_pipeline_is_refused(pipeline, small_tfrecord, small_schema):
    it = pipeline.iterator(CONFIG)
    next(it)
    state = it.get_state()
    other_seed = pipeline.iterator(dataclasses.replace(CONFIG, shuffle_seed=4))
    with pytest.raises(
        ResumeError, match=r"another columnar pipeline\. shuffle_seed: saved 3, now 4"
    ):
        other_seed.set_state(state)
    buffered = tfinput.tfrecord(small_tfrecord, small_schema).iterator(CONFIG)
    with pytest.raises(ResumeError, match="cannot restore this tfrecord pipeline"):
        buffered.set_state(state)
    same = pipeline.iterator(CONFIG)  # a refused state leaves it as it was
    with pytest.raises(ResumeError, match="not a tfinput input state"):
        same.set_state(b'{"format": "x"')
    with pytest.raises(ResumeError, match="state format"):
        same.set_state(json.dumps({**json.loads(state), "format": "other/9"}).encode())


def test_buffer_shuffle_keeps_the_full_state(small_columnar, small_schema):
    pipeline = tfinput.columnar(small_columnar, small_schema)
    it = pipeline.iterator(dataclasses.replace(CONFIG, shuffle_buffer=200))
    next(it)
    state = it.get_state()
    assert state[:2] == b"PK"  # a zip with TensorFlow's iterator checkpoint


def test_batches_not_made_of_whole_chunks_keep_the_full_state(pipeline, uninterrupted, caplog):
    # Chunks of 100 rows rebatched to 96: the order cannot be restarted at a batch, and
    # the user is told what that costs and how to avoid it.
    from tfinput._src.core.columnar.source import _warn_full_states

    _warn_full_states.cache_clear()
    config = dataclasses.replace(CONFIG, batch_size=96)
    with caplog.at_level(logging.WARNING, logger="tfinput"):
        it = pipeline.iterator(config)
    next(it)
    assert it.get_state()[:2] == b"PK"
    assert (
        "columnar shuffle='global' with batch_size 96, not a multiple of the 100-row chunks"
        in caplog.text
    )
    assert "a batch size that is a multiple of 100 keeps states small" in caplog.text
