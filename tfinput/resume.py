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
another schema or other batch-shaping knobs.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import io
import json
import os
import shutil
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tfinput.errors import DataError, ResumeError, without_locals

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

__all__ = [
    "COMPACT_FORMAT",
    "InputIterator",
    "KerasInputCheckpoint",
    "STATE_FORMAT",
    "distributed_steps",
    "identified",
    "identity_differences",
    "pipeline_identity",
    "verify",
]

#: Written into every state's header; a state of another format is refused.
STATE_FORMAT = "tfinput.input-state/1"
#: A state of three integers (epoch, seed, batch) and the pipeline's digest: what a
#: source that recomputes its order from them (columnar ``shuffle="global"``) saves.
COMPACT_FORMAT = "tfinput.input-position/1"
_HEADER, _BATCHES, _CKPT = "header.json", "unconsumed/", "iterator/"
#: Config fields that shape the batches: a state saved under other values is refused.
IDENTITY_KNOBS = ("batch_size", "drop_remainder", "shuffle_buffer", "shuffle_seed", "cache")

RESTORE_INTO = "Restore it into a build of the same files, schema and batch-shaping knobs"
REMEDY = (
    "tf.data can checkpoint only native datasets: data read by Python code "
    "(Dataset.from_generator, py_function) has no position it can save. Convert the data "
    "to a native format (`tfinput convert DATA --to columnar --out DIR`, or --to "
    "tfrecord) or build the wrapped dataset from native tf.data ops"
)


def pipeline_identity(pipeline: Any, config: Any, input_context: Any = None) -> dict[str, Any]:
    """What a state must match to be restored into a build: source kind, files (each
    local file by absolute path, size and modification time, so that the same files
    named from another working directory match and a file rewritten under its name
    does not), schema digest, layout, multi-hot format, the batch-shaping knobs and the
    input pipeline (``input_context``). Parallelism knobs may differ (a job restarted on
    another host may use other tuned settings)."""
    schema = json.dumps(pipeline.schema.to_dict(), sort_keys=True)
    identity = {
        "source": pipeline.source.kind,
        "files": _listed([_file_entry(path) for path in pipeline.source.files()]),
        "schema_digest": hashlib.sha256(schema.encode()).hexdigest()[:16],
        "layout": config.layout or pipeline.layout,
        "multi_hot_format": pipeline.multi_hot_format,
        "shuffle_files": pipeline.shuffle_files,
    }
    identity.update({k: getattr(config, k) for k in IDENTITY_KNOBS})
    if not (config.shuffle_buffer or pipeline.shuffle_files or _shuffles(pipeline.source)):
        identity["shuffle_seed"] = None  # nothing is shuffled: the seed changes nothing
    if getattr(pipeline, "towers", False):
        identity["towers"] = True
    if input_context is not None:
        identity["input_pipeline"] = [
            input_context.input_pipeline_id,
            input_context.num_input_pipelines,
        ]
    return identity


def _shuffles(source: Any) -> bool:
    """Whether the source shuffles by itself (columnar ``shuffle="global"`` or
    ``shuffle_rows``), so that the seed matters without a shuffle buffer."""
    return getattr(source, "shuffle", None) == "global" or bool(
        getattr(source, "shuffle_rows", False)
    )


#: Beyond this many files, an identity holds a summary of them (`_files_summary`): a
#: difference is then named by its kind (other files, another order, a file
#: rewritten), not by file, and a checkpoint does not grow with the number of files.
MAX_LISTED_FILES = 1000


def _file_entry(path: str) -> list[Any]:
    """``[absolute path, size, modification time in ns]`` of a local file; a remote
    one (``gs://...``) by its name only (``[path, None, None]``)."""
    if "://" in path:
        return [path, None, None]
    stat = os.stat(path)
    return [os.path.abspath(path), stat.st_size, stat.st_mtime_ns]


def identity_differences(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What differs between a saved pipeline identity and the current one, in words
    (which file, which field); empty when they match. Either may be the compact
    summary of `_compact_identity`."""
    # Compared as JSON gives them back (tuples as lists), as a saved identity is read.
    saved, now = (json.loads(json.dumps(x, sort_keys=True, default=str)) for x in (saved, now))
    out: list[str] = []
    for key in sorted(set(saved) | set(now)):
        a, b = saved.get(key), now.get(key)
        if a == b:
            continue
        if key == "files":
            out += _file_differences(a, b)
        elif key != "files_digest":  # an earlier tfinput's; "files" says it
            out.append(f"{key}: saved {a!r}, now {b!r}")
    return out


def _some(paths: list[str], n: int = 3) -> str:
    return ", ".join(paths[:n]) + (f" and {len(paths) - n} more" if len(paths) > n else "")


def _file_differences(saved: Any, now: Any) -> list[str]:
    if isinstance(saved, dict) or isinstance(now, dict):  # compact summaries
        saved = saved if isinstance(saved, dict) else _files_summary(saved or [])
        now = now if isinstance(now, dict) else _files_summary(now or [])
        if saved.get("names") != now.get("names"):
            return [f"files: other files ({saved.get('count')} saved, {now.get('count')} now)"]
        if saved.get("order") != now.get("order"):
            return [f"files: the same {now.get('count')} files in another order"]
        return [
            "files: a file changed since the save (its size or modification time; a "
            f"compact state, or one of more than {MAX_LISTED_FILES:,} files, does not "
            "record which)"
        ]
    if not isinstance(saved, list) or not isinstance(now, list):
        return ["files: saved by an earlier tfinput, which recorded only a digest"]
    before = {entry[0]: entry for entry in saved}
    after = {entry[0]: entry for entry in now}
    out = []
    if missing := [p for p in before if p not in after]:
        out.append(f"files: {len(missing)} saved but not given now: {_some(missing)}")
    if added := [p for p in after if p not in before]:
        out.append(f"files: {len(added)} given now but not saved: {_some(added)}")
    if not missing and not added and list(before) != list(after):
        i = next(i for i, (a, b) in enumerate(zip(before, after)) if a != b)
        out.append(
            f"files: the same {len(after)} files in another order: number {i + 1} was "
            f"{list(before)[i]}, now {list(after)[i]}; list them in the saved order "
            "(sorted, as a folder or glob gives them)"
        )
    for path, (_, size, mtime) in before.items():
        if path in after and after[path][1:] != [size, mtime]:
            new_size, new_mtime = after[path][1:]
            what = (
                f"size {size:,} -> {new_size:,} bytes"
                if size != new_size
                else f"modified at {_when(mtime)} -> {_when(new_mtime)}"
            )
            out.append(
                f"{path} changed since the save: {what} (a copy that keeps modification "
                "times, cp -p or rsync -t, resumes)"
            )
    return out


def _when(mtime_ns: int | None) -> str:
    if mtime_ns is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(mtime_ns / 1e9)) + " UTC"


def _files_summary(files: list[list[Any]]) -> dict[str, Any]:
    """A compact summary of an identity's file entries: their number and digests of
    their names (any order), their order, and their sizes and modification times."""

    def digest(value: Any) -> str:
        return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]

    return {
        "count": len(files),
        "names": digest(sorted(entry[0] for entry in files)),
        "order": digest([entry[0] for entry in files]),
        "stats": digest([entry[1:] for entry in files]),
    }


def _listed(entries: list[list[Any]]) -> list[list[Any]] | dict[str, Any]:
    return entries if len(entries) <= MAX_LISTED_FILES else _files_summary(entries)


def _compact_identity(identity: Mapping[str, Any]) -> dict[str, Any]:
    """An identity with its file list summarised (`_files_summary`): what a compact
    state carries (under 1 KB whatever the number of files)."""
    out = dict(identity)
    if isinstance(out.get("files"), list):
        out["files"] = _files_summary(out["files"])
    return out


def identified(dataset: tf.data.Dataset, identity: Mapping[str, Any]) -> tf.data.Dataset:
    """``dataset``, whose iterators carry ``identity`` into ``tf.train.Checkpoint``: a
    checkpoint of such an iterator restores only into an iterator of a dataset of the
    same identity, and refuses any other at restore with a `ResumeError` naming what
    differs. (Datasets derived from it by further transformations are plain ones.)"""
    return _identified_class()(dataset, json.dumps(identity, sort_keys=True, default=str))


@functools.lru_cache(maxsize=1)
def _identified_class() -> type:
    import tensorflow as tf
    from tensorflow.python.data.ops import dataset_ops  # no public unary base class

    class IdentityCheck(tf.__internal__.tracking.Trackable):
        """Saved beside an iterator's state: the identity of its pipeline."""

        def __init__(self, identity: str) -> None:
            self.identity = identity

        def _serialize_to_tensors(self) -> dict[str, Any]:
            return {"identity": tf.constant(self.identity)}

        def _restore_from_tensors(self, restored: Mapping[str, Any]) -> Any:
            saved = json.loads(restored["identity"].numpy().decode())
            now = json.loads(self.identity)
            if differences := identity_differences(saved, now):
                raise ResumeError(
                    "tf.train.Checkpoint: this iterator's position was saved from another "
                    f"{saved.get('source')} pipeline. {'. '.join(differences)}. {RESTORE_INTO}"
                )
            return tf.no_op()

    class IdentifiedDataset(dataset_ops.UnaryUnchangedStructureDataset):
        """The same dataset; its eager iterators carry an `IdentityCheck`."""

        def __init__(self, dataset: tf.data.Dataset, identity: str) -> None:
            self._tfinput_identity = identity
            super().__init__(dataset, dataset._variant_tensor)

        def __iter__(self) -> Any:
            iterator = super().__iter__()
            if tf.executing_eagerly():
                iterator._track_trackable(
                    IdentityCheck(self._tfinput_identity), name="tfinput_pipeline", overwrite=True
                )
            return iterator

    return IdentifiedDataset


class InputIterator(Iterator[Any]):
    """Batches of a dataset, with a position that can be saved and restored exactly.

    Made by `tfinput.Pipeline.iterator` (or from any checkpointable `tf.data.Dataset`).
    It yields exactly what ``iter(dataset)`` yields; ``get_state()`` returns bytes;
    ``set_state(state)`` on an iterator of the same pipeline, in this process or a new
    one, continues with the batch after the last one delivered (or consumed, see
    ``get_state``).

    Args:
      dataset: The dataset (a built pipeline).
      identity: What the pipeline is (`pipeline_identity`); a state of another identity
        is refused.
      name: Names the source in errors (``tfrecord``, ``parquet``, ...).
      keep: Batches remembered after delivery, so that ``get_state(unconsumed=n)`` can
        hand back up to ``keep`` batches a consumer has taken but not trained on.
      explain: Turns a TensorFlow error raised while reading into the error to raise
        (`tfinput.Pipeline.explain`); None: raised as it is.
      epochs: Passes over the data (None: endless), with ``epoch_dataset``.
      epoch_dataset: ``(epoch, seed) -> dataset``: each pass is a fresh build whose
        shuffle seed is derived from ``seed`` and the epoch (`epoch_seed`), so every
        epoch's order is fixed by the state alone. (A ``repeat`` of one dataset draws
        each pass's order from a generator that a checkpoint saved while the pipeline
        had already read ahead to the end of a pass does not hold: the passes after a
        restore came out in another order.) None: ``dataset`` is the whole stream.
      seed: The base seed for ``epoch_dataset`` (saved in the state).
      resume_dataset: ``(epoch, seed, batch) -> dataset`` yielding pass ``epoch`` from
        its batch ``batch`` on, exactly as an uninterrupted run did (columnar
        ``shuffle="global"``: `ColumnarSource.resume_at`). States are then compact: the
        epoch, seed and batch and a digest of the pipeline's identity (about 200 bytes
        whatever the data or the batches handed back), and a restore recomputes the
        order instead of reading TensorFlow's iterator checkpoint. The restoring process
        must run with the same ``tf.random.set_seed`` (or none), like the saving one.

    Attributes:
      position: Batches delivered since the start of the data (restored states count
        from the start too).
    """

    def __init__(
        self,
        dataset: tf.data.Dataset,
        *,
        identity: Mapping[str, Any] | None = None,
        name: str = "dataset",
        keep: int = 8,
        explain: Callable[[BaseException], BaseException] | None = None,
        epochs: int | None = 1,
        epoch_dataset: Callable[[int, int], tf.data.Dataset] | None = None,
        seed: int = 0,
        resume_dataset: Callable[[int, int, int], tf.data.Dataset] | None = None,
    ) -> None:
        if not isinstance(keep, int) or keep < 0:
            raise ResumeError(f"keep must be an integer >= 0, got {keep!r}")
        self._dataset = dataset
        self._iterator = iter(dataset)
        self._epochs = epochs
        self._epoch_dataset = epoch_dataset
        self._seed = seed
        self._resume_dataset = resume_dataset
        self.epoch = 0
        # Position at which each recent pass began (for compact states).
        self._epoch_starts: dict[int, int] = {0: 0}
        self._identity = dict(identity or {})
        self._name = name
        self._explain = explain
        self._recent: collections.deque[Any] = collections.deque(maxlen=keep or None)
        self._keep = keep
        self._replay: collections.deque[Any] = collections.deque()
        # Keep batches delivered from this position on, however many (set by
        # `KerasInputCheckpoint`, whose consumer's look-ahead has no fixed bound); None:
        # the last ``keep``.
        self._hold_from: int | None = None
        # Delivering a batch and saving the position exclude each other: a consumer may
        # pull from another thread (Keras on TensorFlow reads through tf.data) while a
        # callback saves, and the position, the kept batches and TensorFlow's iterator
        # must describe the same point.
        self._lock = threading.RLock()
        self.position = 0

    # ------------------------------------------------------------- iterate
    def __iter__(self) -> InputIterator:
        return self

    def __next__(self) -> Any:
        import tensorflow as tf

        with self._lock:
            if self._replay:
                batch = self._replay.popleft()
            else:
                while True:
                    try:
                        batch = next(self._iterator)
                        break
                    except StopIteration:
                        self._check_not_empty()
                        if not self._next_epoch():
                            raise
                    except tf.errors.OpError as e:
                        if self._explain is None:
                            raise
                        raise self._explain(without_locals(e)) from e
            if self._keep or self._hold_from is not None:
                self._recent.append(batch)
            self.position += 1
            self._release()
            return batch

    def _check_not_empty(self) -> None:
        """An epoch that ended before its first batch is an error, not a silent end."""
        if self._epoch_starts.get(self.epoch) != self.position:
            return
        batch = self._identity.get("batch_size")
        raise DataError(
            f"{self._name} pipeline: the epoch gave no batch: the data hold fewer rows "
            f"than one batch{f' of {batch:,}' if batch else ''} (a partial batch is "
            "dropped with drop_remainder); lower the batch size, or see what the files "
            "hold with tfinput check"
        )

    def _next_epoch(self) -> bool:
        """Start the next pass, if there is one."""
        if self._epoch_dataset is None:
            return False
        if self._epochs is not None and self.epoch + 1 >= self._epochs:
            return False
        self.epoch += 1
        self._epoch_starts[self.epoch] = self.position
        for old in [e for e in self._epoch_starts if e < self.epoch - 3]:
            del self._epoch_starts[old]
        self._dataset = self._epoch_dataset(self.epoch, self._seed)
        self._iterator = iter(self._dataset)
        return True

    def _hold(self, position: int) -> None:
        """Keep every batch delivered from ``position`` on (and no earlier one), beyond
        ``keep`` if need be: `get_state` can then hand back everything after it."""
        with self._lock:
            if self._recent.maxlen is not None:
                self._recent = collections.deque(self._recent)
            self._hold_from = position
            self._release()

    def _rewind(self, position: int) -> None:
        """Deliver again, next, the kept batches delivered from ``position`` on."""
        with self._lock:
            back = self.position - position
            if back <= 0:
                return
            if back > len(self._recent):
                raise ResumeError(
                    f"cannot go back {back} batches: only {len(self._recent)} are kept"
                )
            for _ in range(back):
                self._replay.appendleft(self._recent.pop())
            self.position = position

    def _release(self) -> None:
        if self._hold_from is None:
            return
        # self._recent holds the batches delivered at positions [position - len, position).
        while self._recent and self.position - len(self._recent) < self._hold_from:
            self._recent.popleft()

    @property
    def keep(self) -> int:
        """Delivered batches kept for ``get_state(unconsumed=n)``."""
        return self._keep

    @property
    def tf_iterator(self) -> Any:
        """The underlying ``tf.data`` iterator, for ``tf.train.Checkpoint(iterator=...)``
        in TensorFlow loops (it does not include batches handed back by `set_state`)."""
        return self._iterator

    # --------------------------------------------------------------- state
    def get_state(self, *, unconsumed: int = 0) -> bytes:
        """The position as bytes (a small zip: header, TensorFlow's iterator checkpoint,
        and the batches to deliver again first; or, for a source that recomputes its
        order (``resume_dataset``), a compact JSON position of about 200 bytes).

        Args:
          unconsumed: The last ``unconsumed`` batches delivered were not trained on
            (a prefetcher or Keras holds them): the state is the position before them,
            and a restored iterator delivers them again first.

        Raises:
          ResumeError: the dataset cannot be checkpointed (the message names the source
            and the remedy), or ``unconsumed`` is more than the batches kept.
        """
        if not isinstance(unconsumed, int) or unconsumed < 0:
            raise ResumeError(f"unconsumed must be an integer >= 0, got {unconsumed!r}")
        with self._lock:
            return self._state_at(self.position - unconsumed)

    def state_at(self, position: int) -> bytes:
        """The state whose next batch is the one delivered at ``position`` (batches
        since the start of the data): for a consumer that counts what it trained on
        while the iterator runs ahead on another thread (`tfinput.integrations.
        sparsecore_feed`), where ``get_state(unconsumed=...)`` would race the reads.

        Raises:
          ResumeError: ``position`` is ahead of the batches delivered, or before the
            batches kept (``keep``).
        """
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ResumeError(f"position must be an integer >= 0, got {position!r}")
        with self._lock:
            if position > self.position:
                raise ResumeError(
                    f"state_at({position}): only {self.position} batch(es) were delivered"
                )
            return self._state_at(position)

    def _state_at(self, at: int) -> bytes:
        """The state whose next batch is the one delivered at position ``at`` (at most
        the current position; the batches delivered since must still be kept)."""
        import tensorflow as tf

        with self._lock:
            compact = self._compact_state(at)
            if compact is not None:
                return compact
            unconsumed = self.position - at
            if unconsumed > min(len(self._recent), self.position):
                raise ResumeError(
                    f"get_state(unconsumed={unconsumed}): only the last {len(self._recent)} "
                    f"delivered batches are kept (keep={self._keep}); make the iterator "
                    "with a larger keep (at least the consumer's look-ahead)"
                )
            again = list(self._recent)[len(self._recent) - unconsumed :] if unconsumed else []
            again += list(self._replay)
            with tempfile.TemporaryDirectory(prefix="tfinput-state-") as tmp:
                try:
                    prefix = tf.train.Checkpoint(iterator=self._iterator).write(
                        os.path.join(tmp, "ckpt")
                    )
                except (tf.errors.FailedPreconditionError, tf.errors.UnimplementedError) as e:
                    raise ResumeError(self._unsaveable(e)) from e
                out = io.BytesIO()
                with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
                    header = {
                        "format": STATE_FORMAT,
                        "position": at,
                        "epoch": self.epoch,
                        "seed": self._seed,
                        "unconsumed": len(again),
                        "identity": self._identity,
                        "checkpoint": os.path.basename(prefix),
                    }
                    z.writestr(_HEADER, json.dumps(header, sort_keys=True))
                    for name in sorted(os.listdir(tmp)):
                        z.write(os.path.join(tmp, name), _CKPT + name)
                    for i, batch in enumerate(again):
                        z.writestr(f"{_BATCHES}{i:06d}", _serialize(batch))
            return out.getvalue()

    def _compact_state(self, at: int) -> bytes | None:
        """The compact state of position ``at``, or None where there is none (no
        ``resume_dataset``, or ``at`` lies in a pass begun too long ago)."""
        if self._resume_dataset is None or not 0 <= at <= self.position:
            return None
        begun = [e for e, start in self._epoch_starts.items() if start <= at]
        if not begun:
            return None
        epoch = max(begun)
        position = {
            "format": COMPACT_FORMAT,
            "source": self._name,
            "identity": _compact_identity(self._identity),
            "position": at,
            "epoch": epoch,
            "seed": self._seed,
            "batch": at - self._epoch_starts[epoch],
        }
        return json.dumps(position, sort_keys=True).encode()

    def _set_compact(self, state: bytes) -> None:
        try:
            header = json.loads(state)
            values = [int(header[k]) for k in ("position", "epoch", "seed", "batch")]
        except (ValueError, KeyError, TypeError) as e:
            raise ResumeError(
                f"set_state: not a tfinput input state ({type(e).__name__}: {e}); pass "
                "the bytes returned by get_state()"
            ) from e
        if header.get("format") != COMPACT_FORMAT:
            raise ResumeError(
                f"set_state: state format {header.get('format')!r}; this tfinput reads "
                f"{STATE_FORMAT!r} and {COMPACT_FORMAT!r}"
            )
        if self._resume_dataset is None:
            raise ResumeError(
                f"set_state: this compact state (from a {header.get('source')} pipeline "
                "whose order is recomputed: columnar shuffle='global') cannot restore this "
                f"{self._name} pipeline; restore it into a build of the same files, schema "
                "and batch-shaping knobs"
            )
        saved = header.get("identity")
        if self._identity and not isinstance(saved, dict):
            raise ResumeError(
                "set_state: this compact state was saved by an earlier tfinput (it "
                "records a digest of its pipeline, not what the pipeline was), so it cannot "
                "be checked against this one; resume with the tfinput that saved it, or "
                "restart the epoch"
            )
        if self._identity and (
            differences := identity_differences(saved, _compact_identity(self._identity))
        ):
            raise ResumeError(
                f"set_state: the state was saved from another {header.get('source')} "
                f"pipeline. {'. '.join(differences)}. {RESTORE_INTO}"
            )
        position, epoch, seed, batch = values
        dataset = self._resume_dataset(epoch, seed, batch)
        with self._lock:
            self._dataset, self._iterator = dataset, iter(dataset)
            self.epoch, self._seed, self.position = epoch, seed, position
            self._epoch_starts = {epoch: position - batch}
            self._replay.clear()
            self._recent.clear()
            if self._hold_from is not None:
                self._hold_from = self.position

    def set_state(self, state: bytes) -> None:
        """Continue from ``state`` (from `get_state` of an iterator of the same
        pipeline): the next batch is the one after the saved position.

        Raises:
          ResumeError: not a tfinput input state, a state of another pipeline (the
            message names what differs), or TensorFlow refuses it.
        """
        import tensorflow as tf

        if isinstance(state, (bytes, bytearray)) and state[:1] == b"{":
            self._set_compact(bytes(state))
            return
        try:
            z = zipfile.ZipFile(io.BytesIO(state))
            header = json.loads(z.read(_HEADER))
            if not isinstance(header, dict) or "checkpoint" not in header:
                raise ValueError("no tfinput header")
        except (zipfile.BadZipFile, KeyError, ValueError, TypeError) as e:
            raise ResumeError(
                f"set_state: not a tfinput input state ({type(e).__name__}: {e}); pass "
                "the bytes returned by get_state()"
            ) from e
        if header.get("format") != STATE_FORMAT:
            raise ResumeError(
                f"set_state: state format {header.get('format')!r}; this tfinput reads "
                f"{STATE_FORMAT!r}"
            )
        self._check_identity(header.get("identity", {}))
        epoch, seed, dataset = int(header.get("epoch", 0)), int(header.get("seed", 0)), None
        if self._epoch_dataset is not None:
            dataset = self._epoch_dataset(epoch, seed)
        with tempfile.TemporaryDirectory(prefix="tfinput-state-") as tmp:
            for member in z.namelist():
                if member.startswith(_CKPT):
                    with open(os.path.join(tmp, member[len(_CKPT) :]), "wb") as f:
                        f.write(z.read(member))
            iterator = iter(dataset if dataset is not None else self._dataset)
            try:
                status = tf.train.Checkpoint(iterator=iterator).read(
                    os.path.join(tmp, header["checkpoint"])
                )
                status.assert_existing_objects_matched()
            except (tf.errors.OpError, AssertionError, ValueError) as e:
                raise ResumeError(
                    f"set_state: TensorFlow could not restore the {self._name} pipeline's "
                    f"iterator from this state ({_first_line(e)}); restore into the "
                    "pipeline and config it was saved from (parallelism knobs may differ "
                    "only where the pipeline's stages stay the same)"
                ) from e
        specs = (dataset if dataset is not None else self._dataset).element_spec
        again = [
            _deserialize(z.read(m), specs) for m in sorted(z.namelist()) if m.startswith(_BATCHES)
        ]
        with self._lock:
            if dataset is not None:
                self._dataset, self.epoch, self._seed = dataset, epoch, seed
            self._iterator = iterator
            self._replay = collections.deque(again)
            self._recent.clear()
            self.position = int(header["position"])
            self._epoch_starts = {}  # a pass's start is unknown: full states from here
            if self._hold_from is not None:
                self._hold_from = self.position

    def _check_identity(self, saved: Mapping[str, Any]) -> None:
        if not self._identity or not saved:
            return
        if differences := identity_differences(saved, self._identity):
            raise ResumeError(
                f"set_state: the state was saved from another {saved.get('source')} "
                f"pipeline. {'. '.join(differences)}. {RESTORE_INTO}"
            )

    def _unsaveable(self, error: BaseException) -> str:
        return (
            f"cannot save the input position of this {self._name} pipeline: "
            f"{_first_line(error).rstrip('.')}. {REMEDY}"
        )


def distributed_steps(strategy: Any, batches: Iterator[Any]) -> Iterator[Any]:
    """One host's batches as per-replica values of ``strategy``, a step at a time.

    ``batches`` is this host's `InputIterator` (``pipeline.iterator(config,
    input_context=ctx)``, the same context ``distribute_datasets_from_function`` would
    pass): each step takes one batch per replica on this host, consecutive batches to
    consecutive replicas, as ``distribute_datasets_from_function`` hands them out. The
    read position stays the iterator's: ``batches.get_state()`` after a step saves it
    (TensorFlow's own distributed iterator cannot go into a checkpoint,
    tensorflow/tensorflow#56372). The replicas on this host are asked of the strategy
    (their ids, through ``experimental_distribute_values_from_function``), so the same
    code serves one host or several.

    Yields:
      What ``strategy.run`` takes: the batch structure with per-replica values. The
      steps end when the iterator cannot give every local replica a batch (a last
      incomplete step is dropped, as ``drop_remainder`` drops a partial batch).
    """
    local = strategy.experimental_local_results(
        strategy.experimental_distribute_values_from_function(
            lambda ctx: ctx.replica_id_in_sync_group
        )
    )
    ids = [int(i) for i in local]
    while True:
        parts = []
        for _ in ids:
            try:
                parts.append(next(batches))
            except StopIteration:
                return
        by_id = dict(zip(ids, parts))
        yield strategy.experimental_distribute_values_from_function(
            lambda ctx, by_id=by_id: by_id[int(ctx.replica_id_in_sync_group)]
        )


def epoch_seed(seed: int, epoch: int) -> int:
    """The shuffle seed of pass ``epoch`` (0: ``seed`` itself) of a multi-epoch
    `InputIterator`."""
    return seed if epoch == 0 else (seed + epoch * 0x9E3779B97F4A7C15) % 2**62


def _first_line(error: BaseException) -> str:
    from tfinput.errors import clean_error

    return clean_error(error).splitlines()[0] if str(error) else type(error).__name__


def _serialize(batch: Any) -> bytes:
    """One batch (any nest of tensors, ragged or sparse too) as bytes."""
    import tensorflow as tf

    flat = tf.nest.flatten(batch, expand_composites=True)
    parts = [tf.io.serialize_tensor(t).numpy() for t in flat]
    out = io.BytesIO()
    out.write(len(parts).to_bytes(4, "little"))
    for p in parts:
        out.write(len(p).to_bytes(8, "little"))
        out.write(p)
    return out.getvalue()


def _deserialize(data: bytes, element_spec: Any) -> Any:
    import tensorflow as tf

    specs = tf.nest.flatten(element_spec, expand_composites=True)
    view = memoryview(data)
    n, at = int.from_bytes(view[:4], "little"), 4
    parts = []
    for spec in specs[:n]:
        size = int.from_bytes(view[at : at + 8], "little")
        at += 8
        parts.append(tf.io.parse_tensor(bytes(view[at : at + size]), spec.dtype))
        at += size
    return tf.nest.pack_sequence_as(element_spec, parts, expand_composites=True)


def _build_for_loading(model: Any, iterator: InputIterator) -> None:
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

    def restore(self, model: Any) -> int:
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

    def save(self, model: Any) -> None:
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
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=directory)
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


# ----------------------------------------------------------- verification
def verify(
    pipeline: Any,
    config: Any,
    *,
    after: int = 3,
    compare: int = 3,
    tick: Callable[[], Any] = lambda: None,
) -> dict[str, Any]:
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

    from tfinput.errors import TfinputError

    result: dict[str, Any] = {
        "ok": False,
        "exact": None,
        "after": after,
        "compared": 0,
        "batch_size": config.batch_size,
        "config": config.to_dict(),
        "error": None,
    }
    try:
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
            return _differs(
                result, where, None, f"the restored run goes on after batch {where - 1}"
            )
    except ResumeError as e:
        result["error"] = str(e)
        return result
    except (TfinputError, tf.errors.OpError) as e:
        from tfinput.errors import clean_error

        result["error"] = f"{type(e).__name__}: {clean_error(e)}"
        return result
    result["ok"] = result["exact"] = True
    return result


def _differs(
    result: dict[str, Any], batch: int, feature: str | None, why: str | None
) -> dict[str, Any]:
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


def _first_difference(want: Any, got: Any) -> str | None:
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


def _leaves(batch: Any, path: str = "") -> Iterator[tuple[str, tuple[Any, ...]]]:
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
