"""Resume exactly after preemption: save the input position, restore it in a new process.

A training job on preemptible hosts checkpoints its model every K steps; when it
restarts from the last checkpoint, the input must continue from the same batch, or the
first part of the epoch is trained twice and the rest never. tfinput pipelines are
native tf.data graphs whose iterators TensorFlow can checkpoint, on every source:

- **TensorFlow training loops**: ``tf.train.Checkpoint(model=..., iterator=it)`` with
  ``it = iter(pipeline.build(config))``, as for any tf.data pipeline.
- **Any loop (JAX, Keras, plain Python)**: `InputIterator` (``pipeline.iterator(config)``)
  yields the same batches and gives its position as bytes, ``it.get_state()``, to store
  next to an Orbax or Keras checkpoint; ``it.set_state(state)`` on a freshly built
  iterator continues exactly there. Batches already taken from the iterator but not yet
  trained on (a prefetcher's or Keras's look-ahead) are part of the state
  (``get_state(unconsumed=n)``) and come out again first.
- **Keras ``fit``**: `KerasInputCheckpoint` saves the model and the input position
  together every N steps and restores both at the start of the next run.
- **``tf.distribute``**: `distributed_steps` hands one host's `InputIterator` batches to
  the strategy's replicas as ``distribute_datasets_from_function`` would, while the
  position stays the iterator's (TensorFlow's distributed iterator cannot be saved).

What a state holds: TensorFlow's iterator checkpoint (positions in the files, plus the
elements of the shuffle and prefetch buffers: its size grows with the shuffle buffer,
see ``docs/resume.md``), a small JSON header naming the pipeline it belongs to, and any
unconsumed batches. A state is refused, with the reason, by a pipeline over other files,
another schema, other batch-shaping knobs or another read plan (``docs/resume.md``
lists the knobs that may change).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from tfinput._src.core._input_iterator import InputIterator
from tfinput._src.core.errors import ResumeError

if TYPE_CHECKING:  # pragma: no cover
    import keras

    from tfinput._src.core.config import PipelineConfig


class Resumable(Protocol):
    """What `verify` needs of a pipeline (`tfinput.Pipeline` has it)."""

    def iterator(self, config: PipelineConfig | None = None, *, keep: int = 8) -> InputIterator:
        """An iterator whose position can be saved and restored."""
        ...


# ----------------------------------------------------------- verification
def verify(
    pipeline: Resumable,
    config: PipelineConfig,
    *,
    after: int = 3,
    compare: int = 3,
    tick: Callable[[], object] = lambda: None,
) -> dict[str, object]:
    """Save the position of ``pipeline.iterator(config)`` after ``after`` batches,
    restore it into a fresh iterator and compare its next ``compare`` batches with the
    uninterrupted run's, element by element.

    Args:
      pipeline: A `tfinput.Pipeline`.
      config: The `tfinput.PipelineConfig` to build it with.
      after: Batches read before saving.
      compare: Batches compared after the restore (fewer when the epoch ends first;
        then the restored run must end there too).
      tick: Called after every batch read (progress display).

    Returns:
      JSON-ready: ``ok``; ``exact`` (True, False, or None when the position could not
      be saved or restored); ``after``, ``compared`` (batches compared),
      ``batch_size``; ``state_bytes``, ``save_ms``, ``restore_ms`` once saved and
      restored; ``first_difference`` (``{"batch": index from the start, "feature":
      path}``) when a batch differs; ``error`` (the reason) when not ok; ``config``.
    """
    import tensorflow as tf

    from tfinput._src.core.errors import TfinputError

    result: dict[str, object] = {
        "ok": False,
        "exact": None,
        "after": after,
        "compared": 0,
        "batch_size": config.batch_size,
        "config": config.to_dict(),
        "error": None,
    }
    try:
        return _save_restore_compare(pipeline, config, after, compare, tick, result)
    except ResumeError as e:
        result["error"] = str(e)
        return result
    except (TfinputError, tf.errors.OpError) as e:
        from tfinput._src.core.errors import clean_error

        result["error"] = f"{type(e).__name__}: {clean_error(e)}"
        return result


def _save_restore_compare(
    pipeline: Resumable,
    config: PipelineConfig,
    after: int,
    compare: int,
    tick: Callable[[], object],
    result: dict[str, object],
) -> dict[str, object]:
    """`verify`'s run: ``result`` filled in, ``ok`` when the restored run is exact."""
    first = pipeline.iterator(config, keep=0)
    for i in range(after):
        if next(first, None) is None:
            result["error"] = (
                f"the data hold only {i} batch(es) of {config.batch_size}: lower "
                "--resume-after or use a config with a smaller batch size"
            )
            return result
        tick()
    t0 = time.perf_counter()
    state = first.get_state()
    result["save_ms"] = round(1e3 * (time.perf_counter() - t0), 1)
    result["state_bytes"] = len(state)
    expected = []
    for batch in first:
        expected.append(batch)
        tick()
        if len(expected) == compare:
            break
    ended = len(expected) < compare
    restored = pipeline.iterator(config, keep=0)
    t0 = time.perf_counter()
    restored.set_state(state)
    result["restore_ms"] = round(1e3 * (time.perf_counter() - t0), 1)
    for i, want in enumerate(expected):
        got = next(restored, None)
        tick()
        where = after + i
        if got is None:
            return _differs(result, where, None, f"the restored run ended at batch {where}")
        feature = _first_difference(want, got)
        if feature is not None:
            return _differs(result, where, feature, None)
        result["compared"] = i + 1
    if ended and next(restored, None) is not None:
        where = after + len(expected)
        return _differs(result, where, None, f"the restored run goes on after batch {where - 1}")
    result["ok"] = result["exact"] = True
    return result


def _differs(
    result: dict[str, object], batch: int, feature: str | None, why: str | None
) -> dict[str, object]:
    result["exact"] = False
    result["first_difference"] = {"batch": batch, "feature": feature}
    result["error"] = why or (
        f"batch {batch} (the {_ordinal(batch - result['after'] + 1)} after the restore) "
        f"differs from the uninterrupted run in {feature!r}"
    )
    return result


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _first_difference(want: object, got: object) -> str | None:
    """The path of the first leaf (``dense/price``, ``label``) where two batches differ,
    or None when they are equal, values, shapes, row lengths and dtypes alike."""
    import numpy as np

    a, b = dict(_leaves(want)), dict(_leaves(got))
    for path in list(a) + [p for p in b if p not in a]:
        x, y = a.get(path), b.get(path)
        if x is None or y is None or len(x) != len(y):
            return path
        for u, v in zip(x, y, strict=True):
            if u.dtype != v.dtype or u.shape != v.shape:
                return path
            nan = u.dtype.kind in "fc"
            if not np.array_equal(u, v, equal_nan=nan):
                return path
    return None


def _leaves(batch: object, path: str = "") -> Iterator[tuple[str, tuple[object, ...]]]:
    """``(path, arrays)`` for every tensor of a batch: ``(features, labels)`` give
    ``group/feature`` and ``label``; ragged and sparse tensors give all their parts."""
    import tensorflow as tf

    if not path and isinstance(batch, tuple) and len(batch) == 2:
        yield from _leaves(batch[0], "")
        yield from _leaves(batch[1], "label")
        return
    join = (lambda k: f"{path}/{k}") if path else str
    if isinstance(batch, Mapping):
        for key in sorted(batch):
            yield from _leaves(batch[key], join(key))
    elif isinstance(batch, (tuple, list)):
        for i, item in enumerate(batch):
            yield from _leaves(item, join(i))
    elif isinstance(batch, tf.RaggedTensor):
        parts = (batch.flat_values, *batch.nested_row_splits)
        yield path, tuple(p.numpy() for p in parts)
    elif isinstance(batch, tf.SparseTensor):
        yield path, (batch.indices.numpy(), batch.values.numpy(), batch.dense_shape.numpy())
    else:
        import numpy as np

        yield path, (np.asarray(batch),)


# ----------------------------------------------------------- Keras fit
def _build_for_loading(model: keras.Model, iterator: InputIterator) -> None:
    """Create the variables of a fresh model and of its optimizer, so that
    ``load_weights`` finds them (Keras refuses an unbuilt model, and skips, with only a
    warning, the state of an optimizer that has not been built: the restarted run would
    train with a reset Adam).

    The model is called on zeros shaped like a batch where the batches have static
    shapes, else on the first batch of a separate pass (the iterator's position does not
    move)."""
    import numpy as np
    import tensorflow as tf

    if not model.built:
        features = iterator._dataset.element_spec
        if isinstance(features, tuple):
            features = features[0]
        specs = tf.nest.flatten(features, expand_composites=False)
        static = all(
            isinstance(s, tf.TensorSpec) and s.shape.is_fully_defined() and s.dtype != tf.string
            for s in specs
        )
        if static:
            inputs = tf.nest.map_structure(
                lambda s: np.zeros(s.shape, s.dtype.as_numpy_dtype), features
            )
        else:
            first = next(iter(iterator._dataset))
            inputs = first[0] if isinstance(first, tuple) else first
            inputs = tf.nest.map_structure(np.asarray, inputs)
        model(inputs)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)


def _keras_callback_base() -> type:
    import keras

    return keras.callbacks.Callback


class KerasInputCheckpoint:
    """Resume Keras ``fit`` mid-epoch at the same input position (any backend).

    Saves the model (weights and optimizer state, `keras.Model.save_weights`) and the
    input position together every ``every`` steps into ``directory`` (each save a new
    folder, ``ckpt-N``, written under a temporary name and renamed when complete; the
    older one is removed after: a crash at any point leaves the last complete
    checkpoint whole), and restores both when the next run starts::

        it = pipeline.iterator(config, epochs=None)      # endless, resumable
        ckpt = tfinput.resume.KerasInputCheckpoint(it, "local/dir", every=500)
        step = ckpt.restore(model)                       # 0 on the first run
        callbacks = [ckpt.callback()]
        if step % 1000:  # finish the interrupted epoch first
            model.fit(ckpt.batches(), steps_per_epoch=1000 - step % 1000, epochs=1,
                      callbacks=callbacks)
        model.fit(ckpt.batches(), steps_per_epoch=1000, epochs=10,
                  initial_epoch=-(-step // 1000), callbacks=callbacks)

    Always pass ``steps_per_epoch``: without it Keras restarts a generator each epoch
    and yields its first two (peeked) batches again. Keras takes batches ahead of
    training (it peeks two, and on TensorFlow reads through ``prefetch(AUTOTUNE)``); the
    callback counts the steps Keras has trained (``steps_per_execution`` included) and
    saves the input position after the last trained batch, under the iterator's lock
    (Keras may be pulling on another thread), handing back the batches Keras holds, so
    they are trained on after the restart, not skipped. It keeps those batches whatever
    the iterator's ``keep``, since Keras's look-ahead has no fixed bound.

    Args:
      iterator: The `InputIterator` Keras reads (through `batches`).
      directory: Where checkpoints go (one current checkpoint is kept).
      every: Save every this many training steps (with ``steps_per_execution`` k,
        at the first callback at or after each multiple).
    """

    def __init__(self, iterator: InputIterator, directory: str | os.PathLike[str], *, every: int):
        if not isinstance(every, int) or every < 1:
            raise ResumeError(f"every must be an integer >= 1, got {every!r}")
        self.iterator = iterator
        self.directory = os.fspath(directory)
        self.every = every
        self.step = 0  # steps trained, counted from the start of training
        self._generation = 0  # which `batches` generator reads
        # Keras's look-ahead has no fixed bound (on TensorFlow it reads the generator
        # through ``prefetch(AUTOTUNE)``): keep every batch delivered but not yet trained,
        # whatever ``keep`` says, and let each trained step release its batch.
        iterator._hold(iterator.position)

    def batches(self) -> Iterator[object]:
        """The iterator as the generator Keras ``fit`` accepts (``(features, labels)``).

        A new generator (the next ``fit`` call) starts with the batches an earlier one
        delivered but Keras did not train on (its look-ahead, dropped when ``fit``
        returned); the earlier generator stops.
        """
        self._generation += 1
        generation = self._generation
        self.iterator._rewind(self.step)
        while True:
            with self.iterator._lock:
                if self._generation != generation:
                    return  # a later fit reads now; its look-ahead must not move
                try:
                    batch = next(self.iterator)
                except StopIteration:
                    return
            yield batch

    def restore(self, model: keras.Model) -> int:
        """Load the last checkpoint into ``model`` and the iterator, if there is one.

        A freshly made model (and its optimizer) is built first, on zeros shaped like
        a batch (or one batch read in a separate pass), so that the saved weights and
        the optimizer's state both load.

        Returns:
          The training steps already done (0 without a checkpoint).
        """
        current = self.latest
        if current is None:
            return 0
        with open(os.path.join(current, "step.json")) as f:
            self.step = int(json.load(f)["step"])
        _build_for_loading(model, self.iterator)
        model.load_weights(os.path.join(current, "model.weights.h5"))
        with open(os.path.join(current, "input.state"), "rb") as f:
            self.iterator.set_state(f.read())
        self.iterator._hold(self.step)
        return self.step

    @property
    def latest(self) -> str | None:
        """The folder of the last complete checkpoint in ``directory`` (None: none)."""
        return _latest_folder(self.directory, _KERAS_FILES)

    def save(self, model: keras.Model) -> None:
        """Write model and input position now (the callback calls it every ``every``
        steps). A crash at any point of it leaves the previous checkpoint whole, and
        the next save clears what the crashed one left."""
        # The position after the last trained step, read under the iterator's lock:
        # Keras may be pulling the next batches on another thread meanwhile.
        state = self.iterator._state_at(self.step)

        def write(folder: str) -> None:
            model.save_weights(os.path.join(folder, "model.weights.h5"))
            with open(os.path.join(folder, "input.state"), "wb") as f:
                f.write(state)
            with open(os.path.join(folder, "step.json"), "w") as f:
                json.dump({"step": self.step}, f)

        _save_folder(self.directory, write)

    def callback(self) -> keras.callbacks.Callback:
        """The Keras callback that counts trained steps and saves every ``every``."""
        owner = self

        class _Callback(_keras_callback_base()):  # type: ignore[misc]
            def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
                del epoch, logs
                self.epoch_start = owner.step

            def on_train_batch_end(self, batch: int, logs: object = None) -> None:
                # Called once per execution (steps_per_execution steps); ``batch`` is
                # the index in the epoch of the last step trained.
                del logs
                before, owner.step = owner.step, self.epoch_start + batch + 1
                owner.iterator._hold(owner.step)  # trained: no longer needed again
                if owner.step // owner.every > before // owner.every:
                    owner.save(self.model)

        return _Callback()


# ------------------------------------------------------- checkpoint folders
#: The files of a `KerasInputCheckpoint` folder: all present means complete.
_KERAS_FILES = ("model.weights.h5", "input.state", "step.json")
_FOLDER_PREFIX = "ckpt-"
#: Folders that `KerasInputCheckpoint` of tfinput 0.1 wrote (``current``, and ``.old``
#: while it swapped them): read when no ``ckpt-*`` folder exists, removed by the next save.
_LEGACY_FOLDERS = ("current", ".old")


def _failpoint(name: str) -> None:
    """Called at each step of `_save_folder` (tests replace it to stop the process
    there, and check that `_latest_folder` and the next save cope)."""


def _numbered(directory: str) -> list[tuple[int, str]]:
    """``(number, path)`` of every ``ckpt-N`` folder, complete or not, by number."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        number = name[len(_FOLDER_PREFIX) :]
        if name.startswith(_FOLDER_PREFIX) and number.isdigit():
            out.append((int(number), os.path.join(directory, name)))
    return sorted(out)


def _latest_folder(directory: str, required: tuple[str, ...]) -> str | None:
    """The last complete checkpoint folder in ``directory``: the highest-numbered
    ``ckpt-N`` that holds every ``required`` file (a save that was stopped while it
    removed an older folder may leave part of that one behind), else a folder of the
    earlier layout. None: no checkpoint."""

    def complete(path: str) -> bool:
        return all(os.path.isfile(os.path.join(path, name)) for name in required)

    for _, path in reversed(_numbered(directory)):
        if complete(path):
            return path
    for name in _LEGACY_FOLDERS:
        path = os.path.join(directory, name)
        if complete(path):
            return path
    return None


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fresh_folder(directory: str) -> str:
    """A new, empty ``.tmp-*`` folder in ``directory``, with the mode the user's umask
    gives (`tempfile.mkdtemp` would make it 0700 whatever the umask, and the rename keeps
    that mode on the checkpoint)."""
    while True:
        path = os.path.join(directory, f".tmp-{uuid.uuid4().hex[:12]}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue


def _save_folder(directory: str, write: Callable[[str], None]) -> str:
    """Write a new checkpoint folder in ``directory`` so that a crash at any point
    leaves the last complete one whole and findable (`_latest_folder`).

    ``write(folder)`` fills a fresh temporary folder; its files are flushed to disk and
    the folder is renamed, in one atomic step, to ``ckpt-N`` with N above every
    existing number. Only then are the older folders removed, with what earlier
    crashed saves left (``.tmp-*`` folders, parts of older folders).

    Returns:
      The new folder's path.
    """
    os.makedirs(directory, exist_ok=True)
    _failpoint("start")
    tmp = _fresh_folder(directory)
    _failpoint("made")
    try:
        write(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _failpoint("written")
    for name in os.listdir(tmp):
        if os.path.isfile(os.path.join(tmp, name)):
            _fsync(os.path.join(tmp, name))
    _fsync(tmp)
    _failpoint("synced")
    numbered = _numbered(directory)
    final = os.path.join(directory, f"{_FOLDER_PREFIX}{numbered[-1][0] + 1 if numbered else 1}")
    os.replace(tmp, final)
    _fsync(directory)
    _failpoint("renamed")
    stale = [path for _, path in numbered]
    stale += [os.path.join(directory, name) for name in _LEGACY_FOLDERS]
    stale += [
        os.path.join(directory, name) for name in os.listdir(directory) if name.startswith(".tmp-")
    ]
    for path in stale:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            _failpoint("removed")
    return final
