"""`tfinput.resume`: every source resumes exactly, through ``tf.train.Checkpoint`` and
through `InputIterator` states, for a distributed iterator, and under Keras ``fit``
(TensorFlow backend in-process, JAX in a subprocess)."""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tfinput._src.core.resume import _first_difference
from tfinput.config import PipelineConfig
from tfinput.errors import DataError, ResumeError
from tfinput.resume import KerasInputCheckpoint

ROOT = Path(__file__).resolve().parents[3]
BATCH = 64  # 1000 rows: 15 full batches an epoch
KINDS = ("tfrecord", "parquet", "columnar", "wrapped")
# mode: (config knobs, build arguments); every mode is deterministic, so an
# uninterrupted run is reproducible and a restored one must equal it element by element.
MODES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "shuffle": (dict(shuffle_buffer=200, shuffle_seed=1), {}),
    "interleave": (
        dict(interleave_cycle_length=2, interleave_parallelism=2, map_parallelism=2, prefetch=2),
        {},
    ),
    "file_shuffle": (dict(shuffle_seed=3), {"shuffle_files": True}),
    "sharded": (dict(shuffle_buffer=100, shuffle_seed=2), {"sharded": True}),
    # Saved in the second epoch (the repeat's count is part of the position) ...
    "two_epochs": (dict(shuffle_buffer=200, shuffle_seed=4), {"epochs": 2, "save_after": 18}),
    # ... and in the first, restored across the boundary (the next epoch's order too).
    "across_epochs": (dict(shuffle_buffer=200, shuffle_seed=4), {"epochs": 2}),
    # TFRecord only (the other sources ignore it): file branches hand over mini-batches,
    # shuffled as such and re-cut to the batch size.
    "read_batch": (
        dict(
            read_batch=40,
            shuffle_buffer=200,
            shuffle_seed=5,
            interleave_cycle_length=2,
            interleave_parallelism=2,
        ),
        {},
    ),
}
TFRECORD_ONLY = ("read_batch",)


def _case(pipeline_of: Any, kind: str, mode: str) -> tuple[Any, PipelineConfig, Any, int, int]:
    """``(pipeline, config, input_context, epochs, batches before the save)``."""
    knobs, build = MODES[mode]
    pipeline = pipeline_of(kind)
    if build.get("shuffle_files"):
        pipeline = pipeline.with_file_shuffling()
    context = None
    if build.get("sharded"):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2
        )
    epochs = build.get("epochs", 1)
    config = PipelineConfig(batch_size=BATCH, deterministic=True, **knobs)
    return pipeline, config, context, epochs, build.get("save_after", 3)


def _assert_same_batches(got: list[Any], want: list[Any], what: str = "") -> None:
    """Batch by batch equal (values, shapes, dtypes, row lengths), through the comparison
    ``tfinput check --resume`` uses."""
    assert len(got) == len(want), f"{len(got)} batches after the restore, want {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        feature = _first_difference(w, g)
        assert feature is None, f"batch {i} after the restore{what} differs in {feature!r}"


def _row_ids(batch: Any) -> np.ndarray:
    return np.asarray(batch[0]["dense"]["row_id"]).astype(int)


# Known failures, kept visible (strict=False: they pass once fixed): none at present.
XFAIL: dict[tuple[str, str], str] = {}


def _params(kind: str, mode: str) -> Any:
    marks = (
        [pytest.mark.xfail(reason=XFAIL[kind, mode], strict=False)] if (kind, mode) in XFAIL else []
    )
    return pytest.param(kind, mode, id=f"{kind}-{mode}", marks=marks)


CASES = [
    _params(kind, mode)
    for kind in KINDS
    for mode in MODES
    if kind == "tfrecord" or mode not in TFRECORD_ONLY
]


# ------------------------------------------------------- 1. every source, every mode
@pytest.mark.parametrize(("kind", "mode"), CASES)
def test_every_source_and_mode_resumes_exactly_both_ways(pipeline_of, kind, mode, tmp_path):
    """Both ways of saving, on one pipeline: `InputIterator` states restored into a fresh
    build, and ``tf.train.Checkpoint`` with default options restored into
    ``iter(pipeline.build(...))``. In one epoch the position is saved once from the
    iterator's ``tf_iterator`` and its uninterrupted run is the reference of both; over
    two epochs the built dataset's ``repeat`` is saved in a run of its own."""
    pipeline, config, context, epochs, save_after = _case(pipeline_of, kind, mode)

    # -- InputIterator.get_state / set_state, restored in a new build
    it = pipeline.iterator(config, input_context=context, epochs=epochs)
    for _ in range(save_after):
        next(it)
    state = it.get_state()
    assert isinstance(state, bytes)
    if epochs == 1:  # the same position the TensorFlow way, from its own tf.data iterator
        tf_path = tf.train.Checkpoint(iterator=it.tf_iterator).write(str(tmp_path / "ckpt"))
    want = list(it)
    assert len(want) >= 3
    again = _case(pipeline_of, kind, mode)[0]  # a new build
    restored = again.iterator(config, input_context=context, epochs=epochs)
    restored.set_state(state)
    assert restored.position == save_after
    _assert_same_batches(list(restored), want, " (InputIterator state)")
    assert restored.position == it.position

    # -- tf.train.Checkpoint of the built dataset
    def dataset() -> tf.data.Dataset:
        ds = pipeline.build(config, context)
        return ds.repeat(epochs) if epochs != 1 else ds

    if epochs == 1:
        path = tf_path  # restored into ``pipeline.build``: ``want`` is the reference
        uninterrupted = want
    else:  # a repeat of the built dataset, saved in its own run
        built = iter(dataset())
        for _ in range(save_after):
            next(built)
        path = tf.train.Checkpoint(iterator=built).write(str(tmp_path / "ckpt"))
        uninterrupted = list(built)  # the uninterrupted run goes on
    fresh = iter(dataset())
    tf.train.Checkpoint(iterator=fresh).read(path).assert_consumed()
    got = list(fresh)
    assert len(got) == len(uninterrupted)
    # A repeat's later passes draw their order from the shuffle's seed generator, which
    # a checkpoint taken after tf.data read ahead to the end of the pass does not hold
    # (a TensorFlow limit, docs/resume.md): the saved pass resumes exactly and the next
    # one holds the same examples. `pipeline.iterator(epochs=...)` is exact in every
    # pass (above).
    later = len(uninterrupted) - (15 - save_after) if mode == "across_epochs" else 0
    cut = len(got) - later
    _assert_same_batches(got[:cut], uninterrupted[:cut], " (tf.train.Checkpoint)")
    if later:
        ids = [
            np.sort(np.concatenate([_row_ids(b) for b in run[cut:]]))
            for run in (got, uninterrupted)
        ]
        # Each holds every row at most once. Where the later pass comes out in another
        # order (TensorFlow 2.17 with the windowed record shuffle of ``read_batch``), the
        # full batches drop another remainder: the two differ by at most the rows a pass
        # drops (1,000 - 15 x 64 = 40), and are otherwise the same rows.
        assert len(ids[0]) == len(ids[1]) == len(np.unique(ids[0])) == len(np.unique(ids[1]))
        assert len(np.setdiff1d(ids[0], ids[1])) <= 1000 - 15 * BATCH


# ------------------------------------------------------------- 2. unconsumed batches
# One source: the batches handed back are the ones `InputIterator` keeps, whatever reads them.
@pytest.mark.parametrize("kind", ["tfrecord"])
def test_unconsumed_batches_come_again_first(pipeline_of, kind):
    pipeline = pipeline_of(kind)
    config = PipelineConfig(batch_size=BATCH, shuffle_buffer=200, shuffle_seed=5)
    it = pipeline.iterator(config, keep=4)
    taken = [next(it) for _ in range(5)]
    state = it.get_state(unconsumed=3)  # batches 2, 3, 4 were not trained on
    rest = list(it)

    restored = pipeline_of(kind).iterator(config, keep=4)
    restored.set_state(state)
    assert restored.position == 2
    first = next(restored)
    # A state taken while replayed batches are pending carries them on.
    state2 = restored.get_state(unconsumed=1)
    again = pipeline_of(kind).iterator(config, keep=4)
    again.set_state(state2)
    _assert_same_batches(list(again), taken[2:] + rest)
    _assert_same_batches([first, *restored], taken[2:] + rest)


def test_unconsumed_beyond_keep_or_delivered_is_refused(pipeline_of):
    it = pipeline_of("tfrecord").iterator(PipelineConfig(batch_size=BATCH), keep=2)
    next(it)
    with pytest.raises(ResumeError, match="unconsumed=2"):
        it.get_state(unconsumed=2)  # one batch delivered
    for _ in range(4):
        next(it)
    with pytest.raises(ResumeError, match=r"keep=2.*larger keep"):
        it.get_state(unconsumed=3)
    with pytest.raises(ResumeError, match="integer >= 0"):
        it.get_state(unconsumed=-1)
    assert it.get_state(unconsumed=2)


# ------------------------------------------------------ 3. a dataset tf.data cannot save
def _generator_pipeline(small_columns: Any, small_schema: Any) -> Any:
    from tests.helpers import wrapped_dataset

    rows = wrapped_dataset(small_columns).ragged_batch(50, drop_remainder=True)

    def make() -> tf.data.Dataset:
        return tf.data.Dataset.from_generator(
            lambda: iter(rows), output_signature=rows.element_spec
        )

    return tfinput.wrap(make, small_schema, batched=True)


def test_from_generator_fails_at_save_time_naming_the_source_and_remedy(
    small_columns, small_schema, tmp_path
):
    pipeline = _generator_pipeline(small_columns, small_schema)
    config = PipelineConfig(batch_size=50)
    it = pipeline.iterator(config)
    next(it)
    with pytest.raises(ResumeError, match=r"dataset pipeline.*tfinput convert .*--to columnar"):
        it.get_state()
    # Keras users meet the same error at the first save, not a silent restart later.
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.layers.Dense(1)])
    model(np.zeros((1, 1), np.float32))
    ckpt = KerasInputCheckpoint(pipeline.iterator(config), tmp_path / "ckpt", every=1)
    with pytest.raises(ResumeError, match="tfinput convert"):
        ckpt.save(model)
    assert ckpt.latest is None and not (tmp_path / "ckpt").exists()
    # Through tf.train.Checkpoint too, TensorFlow refuses (it never saves a position that
    # would restart from the beginning).
    with pytest.raises(tf.errors.OpError):
        tf.train.Checkpoint(iterator=iter(pipeline.build(config))).write(str(tmp_path / "x"))


# ----------------------------------------------------------- 4. set_state refuses
def test_set_state_refuses_bytes_that_are_not_a_state(pipeline_of):
    it = pipeline_of("tfrecord").iterator(PipelineConfig(batch_size=BATCH))
    empty_zip = io.BytesIO()
    with zipfile.ZipFile(empty_zip, "w") as z:
        z.writestr("other.txt", "x")
    for junk in (b"", b"not a state", empty_zip.getvalue()):
        with pytest.raises(ResumeError, match="not a tfinput input state"):
            it.set_state(junk)
    assert len(_row_ids(next(it))) == BATCH  # still usable, from the start
    assert it.position == 1


def test_set_state_refuses_a_state_whose_checkpoint_was_cut(pipeline_of):
    """A state whose iterator checkpoint lost its end (a copy cut short, then zipped
    again) is refused with a ResumeError, not TensorFlow's reader error; the iterator
    then reads from the start."""
    config = PipelineConfig(batch_size=BATCH, shuffle_buffer=100, shuffle_seed=1)
    it = pipeline_of("tfrecord").iterator(config)
    first = _row_ids(next(it))
    state = zipfile.ZipFile(io.BytesIO(it.get_state()))
    cut = io.BytesIO()
    with zipfile.ZipFile(cut, "w") as z:
        for member in state.namelist():
            data = state.read(member)
            z.writestr(member, data[: len(data) // 2] if ".data-" in member else data)
    again = pipeline_of("tfrecord").iterator(config)
    with pytest.raises(ResumeError, match="TensorFlow could not restore the tfrecord"):
        again.set_state(cut.getvalue())
    assert (_row_ids(next(again)) == first).all() and again.position == 1


def test_set_state_refuses_a_state_of_another_pipeline(pipeline_of, small_tfrecord, small_schema):
    config = PipelineConfig(batch_size=BATCH)
    it = pipeline_of("tfrecord").iterator(config)
    next(it)
    state = it.get_state()
    other_batch = pipeline_of("tfrecord").iterator(PipelineConfig(batch_size=32))
    with pytest.raises(ResumeError, match="batch_size: saved 64, now 32"):
        other_batch.set_state(state)
    other_files = tfinput.tfrecord(small_tfrecord[:2], small_schema).iterator(config)
    missing = ", ".join(os.path.abspath(f) for f in small_tfrecord[2:])
    with pytest.raises(
        ResumeError, match=f"files: 2 saved but not given now: {re.escape(missing)}"
    ):
        other_files.set_state(state)
    other_source = pipeline_of("columnar").iterator(config)
    with pytest.raises(ResumeError, match="source: saved 'tfrecord', now 'columnar'"):
        other_source.set_state(state)


def test_tf_train_checkpoint_refuses_another_pipeline_naming_what_differs(
    small_tfrecord, small_schema, tmp_path, monkeypatch
):
    """The route for TensorFlow loops, ``tf.train.Checkpoint(iterator=iter(ds))``: the
    checkpoint carries the pipeline's identity, and a restore into another pipeline
    (files reordered, one missing, another seed, a file rewritten) is refused at restore,
    naming what differs; the same files named from another directory resume."""
    files = [shutil.copy(f, tmp_path) for f in small_tfrecord]  # one is touched below
    config = PipelineConfig(
        batch_size=BATCH, shuffle_buffer=100, shuffle_seed=1, deterministic=True
    )
    it = iter(tfinput.tfrecord(files, small_schema).build(config))
    next(it)
    path = tf.train.Checkpoint(iterator=it).write(str(tmp_path / "ckpt"))

    def restore(paths: list[str], config: PipelineConfig = config) -> Any:
        fresh = iter(tfinput.tfrecord(paths, small_schema).build(config))
        tf.train.Checkpoint(iterator=fresh).read(path).assert_existing_objects_matched()
        return fresh

    prefix = (
        "tf.train.Checkpoint: this iterator's position was saved from another tfrecord pipeline. "
    )
    with pytest.raises(ResumeError) as e:
        restore(files[::-1])
    assert str(e.value).startswith(
        f"{prefix}files: the same 4 files in another order: number 1 was {files[0]}, now {files[3]}; "
        "list them in the saved order"
    )
    with pytest.raises(
        ResumeError, match=f"files: 1 saved but not given now: {re.escape(files[3])}\\. "
    ):
        restore(files[:3])
    with pytest.raises(ResumeError, match="shuffle_seed: saved 1, now 2"):
        restore(files, dataclasses.replace(config, shuffle_seed=2))
    monkeypatch.chdir(tmp_path)  # the same files, by relative path from elsewhere
    resumed = restore([os.path.basename(f) for f in files])
    assert _row_ids(next(resumed)).tolist() == _row_ids(next(it)).tolist()
    os.utime(files[2], ns=(0, 10**18))  # rewritten under its name
    with pytest.raises(
        ResumeError, match=f"{re.escape(files[2])} changed since the save: modified"
    ):
        restore(files)


# ------------------------------------------------------- 5. the distributed iterator
def _mirrored() -> tf.distribute.Strategy:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(devices) < 2:
        pytest.skip("needs several logical CPU devices (set up in conftest)")
    return tf.distribute.MirroredStrategy(devices[:2])


def _per_replica(strategy: tf.distribute.Strategy, batch: Any) -> list[np.ndarray]:
    per_replica = tf.nest.map_structure(strategy.experimental_local_results, batch)
    return [np.asarray(t) for t in tf.nest.flatten(per_replica)]


DISTRIBUTED_CONFIG = PipelineConfig(
    batch_size=BATCH, deterministic=True, shuffle_buffer=200, shuffle_seed=6
)


@pytest.mark.xfail(
    raises=ValueError,
    strict=True,
    reason="TensorFlow's DistributedIterator is not Trackable (tensorflow/tensorflow#56372): "
    "tf.train.Checkpoint refuses it; use the per-input-pipeline InputIterator (next test)",
)
def test_distributed_iterator_checkpoints_with_tf_train_checkpoint(pipeline_of, tmp_path):
    strategy = _mirrored()
    pipeline = pipeline_of("tfrecord")
    dist = strategy.distribute_datasets_from_function(
        lambda ctx: pipeline.build(DISTRIBUTED_CONFIG, input_context=ctx)
    )
    it = iter(dist)
    next(it)
    tf.train.Checkpoint(iterator=it).write(str(tmp_path / "ckpt"))


# One source: the recipe only hands the per-replica batches of an `InputIterator` out,
# whose exact resume is checked for every source above.
@pytest.mark.parametrize("kind", ["tfrecord"])
def test_distributed_input_resumes_exactly_through_input_iterator_states(pipeline_of, kind):
    """`tfinput.resume.distributed_steps`, for ``distribute_datasets_from_function``
    users: the same per-replica batches from this host's `InputIterator`, whose state
    saves and restores."""
    strategy = _mirrored()
    replicas = strategy.num_replicas_in_sync
    context = tf.distribute.InputContext(
        num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=replicas
    )
    distributed = functools.partial(tfinput.resume.distributed_steps, strategy)

    pipeline = pipeline_of(kind)
    reference = strategy.distribute_datasets_from_function(
        lambda ctx: pipeline.build(DISTRIBUTED_CONFIG, input_context=ctx)
    )
    want = [_per_replica(strategy, b) for b in reference]
    it = pipeline.iterator(DISTRIBUTED_CONFIG, input_context=context)
    steps = distributed(it)
    first = [_per_replica(strategy, next(steps)) for _ in range(3)]
    state = it.get_state()

    restored = pipeline_of(kind).iterator(DISTRIBUTED_CONFIG, input_context=context)
    restored.set_state(state)
    rest = [_per_replica(strategy, b) for b in distributed(restored)]
    assert len(rest) >= 3
    _assert_same_batches(first + rest, want)


# ----------------------------------------------------------------- 6. Keras fit
class Preempted(Exception):
    """Raised by a callback to stop the first run, as a preemption would."""


def interrupted_fit(
    files: dict[str, Any],
    kind: str,
    directory: str,
    *,
    steps_per_execution: int = 1,
    keep: int = 8,
) -> dict[str, Any]:
    """Two runs of ``fit`` over one epoch (15 batches) with `KerasInputCheckpoint` saving
    every 4 steps: the first is stopped at step 7 (9 with ``steps_per_execution=3``),
    the second restores and finishes the epoch in two ``fit`` calls. Returns the row ids
    of the batches trained before the checkpoint and after the restore (each call's
    first ``steps`` batches pulled, in order) and of an uninterrupted epoch. ``keep``
    below Keras's look-ahead checks that `KerasInputCheckpoint` keeps what Keras holds
    regardless. Also run by the JAX subprocess, so it takes plain paths."""
    import keras

    from tests.helpers import SMALL_RANKING_MODEL
    from tfinput import models, testing

    schema = testing.small_schema()
    config = PipelineConfig(
        batch_size=BATCH, deterministic=True, shuffle_buffer=200, shuffle_seed=8
    )

    def pipeline() -> Any:
        return getattr(tfinput, kind)(files[kind], schema)

    class StopAt(keras.callbacks.Callback):
        def __init__(self, step: int) -> None:
            super().__init__()
            self.stop = step

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch + 1 >= self.stop:
                raise Preempted(batch)

    def run(stop: int | None, fits: list[int] | None = None) -> tuple[int, Any, bool, int]:
        """One process's training: ``fits``, the steps of each ``fit`` call (the rest
        of the epoch in one call by default). Returns the batches trained, in order."""
        ckpt = KerasInputCheckpoint(pipeline().iterator(config, keep=keep), directory, every=4)
        # Compiled on JAX (its default; each run compiles once, cheaper than running
        # every step op by op), not on TensorFlow (an XLA compile costs more than the
        # steps run here).
        model = models.ranking_model(
            schema,
            jit_compile=keras.config.backend() == "jax",
            steps_per_execution=steps_per_execution,
            **SMALL_RANKING_MODEL,
        )
        start = ckpt.restore(model)
        iterations = int(model.optimizer.iterations.numpy()) if start else 0

        class LookAhead(keras.callbacks.Callback):
            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                look_ahead.append(ckpt.iterator.position - ckpt.step)

        callbacks = [ckpt.callback(), LookAhead()] + ([StopAt(stop)] if stop else [])
        trained: list[np.ndarray] = []
        for steps in fits or [15 - start]:
            pulled: list[np.ndarray] = []

            def logged(pulled: list[np.ndarray] = pulled) -> Any:
                for batch in ckpt.batches():
                    pulled.append(_row_ids(batch))
                    yield batch

            try:
                model.fit(logged(), steps_per_epoch=steps, epochs=1, callbacks=callbacks, verbose=0)
            except Preempted:
                pulls.append(len(pulled))
                return start, trained + pulled, True, iterations
            pulls.append(len(pulled))
            trained += pulled[:steps]  # Keras trains the batches in the order it pulls
        return start, trained, False, iterations

    look_ahead: list[int] = []  # batches Keras had pulled but not trained, per callback
    pulls: list[int] = []  # batches each fit call pulled
    first_start, first, first_preempted, _ = run(stop=7)
    (saved,) = os.listdir(directory)  # the one checkpoint folder the first run left
    resumed_at = int(json.loads((Path(directory) / saved / "step.json").read_text())["step"])
    # The second process finishes the epoch in two fit calls: the look-ahead the first
    # call dropped must be trained by the second.
    second_start, second, second_preempted, iterations = run(
        stop=None, fits=[3, 15 - resumed_at - 3]
    )
    epoch = [_row_ids(b) for b in pipeline().build(config)]
    return {
        "first_start": first_start,
        "first_pulled": pulls[0],
        "second_pulled": pulls[1:],
        "look_ahead": max(look_ahead),
        "preempted": [first_preempted, second_preempted],
        "optimizer_steps_restored": iterations,
        "resumed_at": second_start,
        "trained": [r.tolist() for r in first[:second_start] + second[: 15 - second_start]],
        "epoch": [r.tolist() for r in epoch],
    }


def _check_one_epoch(result: dict[str, Any]) -> None:
    assert result["first_start"] == 0
    assert result["preempted"] == [True, False]
    # The model came back with its optimizer (Adam's step count and moments), not reset.
    assert result["optimizer_steps_restored"] == result["resumed_at"]
    assert 4 <= result["resumed_at"] < 15
    # Keras pulls batches ahead of training: the saves had batches to hand back.
    assert result["look_ahead"] >= 1
    assert result["first_pulled"] > result["resumed_at"]
    trained = [r for batch in result["trained"] for r in batch]
    assert len(trained) == len(set(trained)), "no example twice"
    assert sorted(trained) == sorted(r for batch in result["epoch"] for r in batch)
    assert result["trained"] == result["epoch"], "in the uninterrupted run's order"


def _files(small_tfrecord: Any, small_columnar: Any) -> dict[str, Any]:
    return {"tfrecord": list(small_tfrecord), "columnar": small_columnar}


@pytest.mark.parametrize(
    ("kind", "steps_per_execution", "keep"),
    [("tfrecord", 1, 8), ("columnar", 3, 0)],
    ids=["tfrecord", "columnar-spe3-keep0"],
)
def test_keras_fit_resumes_mid_epoch_on_tensorflow(
    small_tfrecord, small_columnar, kind, steps_per_execution, keep, tmp_path
):
    import keras

    if keras.config.backend() != "tensorflow":
        pytest.skip("the in-process Keras test runs on the TensorFlow backend")
    result = interrupted_fit(
        _files(small_tfrecord, small_columnar),
        kind,
        str(tmp_path / "ckpt"),
        steps_per_execution=steps_per_execution,
        keep=keep,
    )
    _check_one_epoch(result)
    if keep == 0:
        assert result["look_ahead"] > keep
    # On TensorFlow the first fit of the second run pulled past its 3 steps (Keras reads
    # ahead through tf.data); the next fit trained those batches, in order.
    assert result["second_pulled"][0] > 3


# ------------------------------------------------- 7. a crash at every point of a save
_CRASH_SAVE = """
import os, sys
from tfinput._src.core import resume as folders
directory, at, generation = sys.argv[1], sys.argv[2], sys.argv[3]
folders._failpoint = lambda name: os._exit(9) if name == at else None

def write(folder):
    for name in folders._KERAS_FILES:
        with open(os.path.join(folder, name), "w") as f:
            f.write(generation)
        if at == "mid-write":
            os._exit(9)

folders._save_folder(directory, write)
"""
SAVE_POINTS = ("start", "made", "mid-write", "written", "synced", "renamed", "removed")


def _generation_writer(generation: str) -> Any:
    def write(folder: str) -> None:
        for name in ("model.weights.h5", "input.state", "step.json"):
            Path(folder, name).write_text(generation)

    return write


def _latest_generation(directory: Path) -> str:
    from tfinput._src.core.resume import _KERAS_FILES, _latest_folder

    latest = _latest_folder(str(directory), _KERAS_FILES)
    assert latest is not None
    contents = {Path(latest, name).read_text() for name in _KERAS_FILES}
    assert len(contents) == 1, f"a mixed checkpoint: {contents}"
    return contents.pop()


@pytest.mark.parametrize("at", SAVE_POINTS)
def test_a_save_killed_at_any_point_leaves_the_last_checkpoint_whole(tmp_path, at):
    """A process killed (os._exit) at each step of a checkpoint save: the last complete
    checkpoint is found whole, the next save succeeds and leaves one folder, and the
    temporary folders of crashed saves (this one, and one from before) are gone."""
    from tfinput._src.core.resume import _save_folder

    directory = tmp_path / "ckpt"
    _save_folder(str(directory), _generation_writer("1"))
    (directory / ".tmp-crashed-before").mkdir()
    (directory / ".tmp-crashed-before" / "model.weights.h5").write_text("junk")
    out = subprocess.run(
        [sys.executable, "-c", _CRASH_SAVE, str(directory), at, "2"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 9, out.stderr[-2000:]
    assert _latest_generation(directory) == ("2" if at in ("renamed", "removed") else "1")
    _save_folder(str(directory), _generation_writer("3"))
    assert _latest_generation(directory) == "3"
    left = "ckpt-3" if at in ("renamed", "removed") else "ckpt-2"
    assert [p.name for p in directory.iterdir()] == [left]


def test_a_failed_save_leaves_no_folder_and_the_earlier_layout_is_read(tmp_path):
    from tfinput._src.core.resume import _save_folder

    directory = tmp_path / "ckpt"

    def failing(folder: str) -> None:
        Path(folder, "model.weights.h5").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _save_folder(str(directory), failing)
    assert list(directory.iterdir()) == []
    # tfinput 0.1 swapped ``current`` through ``.old``: a run killed between its two
    # renames left only ``.old``, one killed before removing it left both.
    (directory / ".old").mkdir()
    _generation_writer("old")(str(directory / ".old"))
    assert _latest_generation(directory) == "old"
    (directory / "current").mkdir()
    _generation_writer("current")(str(directory / "current"))
    assert _latest_generation(directory) == "current"
    _save_folder(str(directory), _generation_writer("new"))
    assert _latest_generation(directory) == "new"
    assert [p.name for p in directory.iterdir()] == ["ckpt-1"]


_JAX_FIT = """
import json, keras
assert keras.config.backend() == "jax"
from tests.tfinput.core.test_resume import interrupted_fit
print("RESULT", json.dumps(interrupted_fit(FILES, "tfrecord", DIRECTORY)))
"""


@pytest.mark.slow
def test_keras_fit_resumes_mid_epoch_on_jax(small_tfrecord, small_columnar, tmp_path):
    pytest.importorskip("jax")
    code = _JAX_FIT.replace("FILES", repr(_files(small_tfrecord, small_columnar))).replace(
        "DIRECTORY", repr(str(tmp_path / "ckpt"))
    )
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        # The second run's train step is the first one's: read from a compilation cache
        # (of compiles over 1 s), as a restarted job would, rather than compiled again.
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax-cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "1",
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    _check_one_epoch(json.loads(line[len("RESULT ") :]))


def test_an_epoch_without_a_batch_is_an_error_not_a_silent_end(pipeline_of):
    """1,000 rows and a batch of 2,048 with drop_remainder: the iterator says so."""
    it = pipeline_of("tfrecord").iterator(PipelineConfig(batch_size=2048))
    with pytest.raises(DataError) as e:
        next(it)
    assert str(e.value) == (
        "tfrecord pipeline: the epoch gave no batch: the data hold fewer rows than one "
        "batch of 2,048 (a partial batch is dropped with drop_remainder); lower the batch "
        "size, or see what the files hold with tfinput check"
    )


def test_a_failed_read_is_raised_again_not_saved_or_ended_silently(tmp_path, small_schema):
    """TensorFlow's iterator ends after a failed read: a consumer that reads on (a feed's
    worker, a prefetcher) would see the data end early, and a state saved after it
    would end the data there. The iterator raises the read's error again instead."""
    from tfinput import testing

    [path] = testing.write_tfrecord(tmp_path, small_schema, rows=1000)
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    it = tfinput.tfrecord([path], small_schema).iterator(PipelineConfig(batch_size=100))
    next(it)
    before = it.get_state()
    delivered = 1
    with pytest.raises(DataError) as first:
        while True:
            next(it)
            delivered += 1
    assert str(first.value).startswith(f"{path}: corrupted record at byte ")
    for again in (lambda: next(it), it.get_state, lambda: it.state_at(1)):
        with pytest.raises(DataError) as e:
            again()
        assert str(e.value) == str(first.value)
    it.set_state(before)  # a state saved before the failure reads up to it again
    assert [next(it) is not None for _ in range(delivered - 1)] == [True] * (delivered - 1)
    with pytest.raises(DataError, match="corrupted record"):
        next(it)
