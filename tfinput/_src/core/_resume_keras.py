"""The Keras ``fit`` side of resume: `KerasInputCheckpoint` saves the model with its input
position, in checkpoint folders that a crash at any point leaves whole. It imports Keras
only to make its callback. `tfinput.resume` is the public API."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from tfinput._src.core._input_iterator import InputIterator
from tfinput._src.core.errors import ResumeError

if TYPE_CHECKING:  # pragma: no cover
    import keras

    pass

__all__ = ["KerasInputCheckpoint"]


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

    def batches(self) -> Iterator[Any]:
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

    def callback(self) -> Any:
        """The Keras callback that counts trained steps and saves every ``every``."""
        owner = self

        class _Callback(_keras_callback_base()):  # type: ignore[misc]
            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                del epoch, logs
                self.epoch_start = owner.step

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
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
