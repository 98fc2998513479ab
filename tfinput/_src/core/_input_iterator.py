"""`InputIterator`: batches of a pipeline whose position is saved as bytes and
restored in a new process; `distributed_steps` for ``tf.distribute``. `tfinput.resume`
is the public API."""

from __future__ import annotations

import collections
import io
import json
import os
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tfinput._src.core._resume_identity import (
    COMPACT_FORMAT,
    REMEDY,
    RESTORE_INTO,
    STATE_FORMAT,
    compact_identity,
    identity_differences,
)
from tfinput._src.core.errors import DataError, ResumeError, without_locals

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

_HEADER, _BATCHES, _CKPT = "header.json", "unconsumed/", "iterator/"


class InputIterator(Iterator[Any]):
    """Batches of a dataset, with a position that can be saved and restored exactly.

    Made by `tfinput.Pipeline.iterator` (or from any checkpointable `tf.data.Dataset`).
    It yields exactly what ``iter(dataset)`` yields; ``get_state()`` returns bytes;
    ``set_state(state)`` on an iterator of the same pipeline, in this process or a new
    one, continues with the batch after the last one delivered (or consumed, see
    ``get_state``).

    Args:
      dataset: The dataset (a built pipeline); with ``epoch_dataset``, its first pass,
        ``epoch_dataset(0, seed)``.
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

    A read that fails raises its error (a `DataError` through ``explain``) at that call
    and at every later one until `set_state`: TensorFlow's iterator ends after a failed
    read, which would end the data there without a word.

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
        # TensorFlow's iterator, made on first use: a `set_state` before the first batch
        # (every resume) restores into its own, and one made here would be thrown away.
        self._iterator: Any = None
        self._epochs = epochs
        self._epoch_dataset = epoch_dataset
        self._seed = seed
        # ``(epoch, seed)`` of the pass ``self._dataset`` was built for while no iterator
        # has been made of it: a `set_state` into that pass restores into it rather than
        # into another build of the same pass.
        self._unread: tuple[int, int] | None = (0, seed) if epoch_dataset is not None else None
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
        # The error a read of TensorFlow's iterator raised: that iterator then ends
        # (StopIteration), and its checkpoint ends the data there; raised again instead.
        self._failed: BaseException | None = None
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
                    if self._failed is not None:  # not the silent end TensorFlow gives
                        raise self._failed
                    try:
                        batch = next(self._live())
                        break
                    except StopIteration:
                        self._check_not_empty()
                        if not self._next_epoch():
                            raise
                    except tf.errors.OpError as e:
                        if self._explain is None:
                            self._failed = e
                            raise
                        self._failed = self._explain(without_locals(e))
                        raise self._failed from e
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
        self._iterator = None
        return True

    def _live(self) -> Any:
        """TensorFlow's iterator over the current pass, made on first use."""
        with self._lock:
            if self._iterator is None:
                self._iterator = iter(self._dataset)
                self._unread = None
            return self._iterator

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
        return self._live()

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
          DataError: a read failed (the error it raised, again; a consumer that reads
            ahead may not have delivered it yet): TensorFlow's iterator ends after a
            failed read, so a state saved from it would end the data there. A compact
            state is saved all the same.
        """
        if not isinstance(unconsumed, int) or unconsumed < 0:
            raise ResumeError(f"unconsumed must be an integer >= 0, got {unconsumed!r}")
        with self._lock:
            return self._state_at(self.position - unconsumed)

    def state_at(self, position: int) -> bytes:
        """The state whose next batch is the one delivered at ``position`` (batches
        since the start of the data): for a consumer that counts what it trained on
        while the iterator runs ahead on another thread (`tfinput.sparsecore.sparsecore_feed`),
        where ``get_state(unconsumed=...)`` would race the reads.

        Raises:
          ResumeError: ``position`` is ahead of the batches delivered, or before the
            batches kept (``keep``).
          DataError: a read failed, as in `get_state`.
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
            if self._failed is not None:  # TensorFlow's checkpoint would end the data here
                raise self._failed
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
                    prefix = tf.train.Checkpoint(iterator=self._live()).write(
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
            "identity": compact_identity(self._identity),
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
            differences := identity_differences(saved, compact_identity(self._identity))
        ):
            raise ResumeError(
                f"set_state: the state was saved from another {header.get('source')} "
                f"pipeline. {'. '.join(differences)}. {RESTORE_INTO}"
            )
        position, epoch, seed, batch = values
        dataset = self._resume_dataset(epoch, seed, batch)
        with self._lock:
            self._dataset, self._iterator, self._unread = dataset, None, None
            self._failed = None
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
        unread = self._epoch_dataset is not None and self._unread == (epoch, seed)
        if unread:
            dataset = self._dataset
        elif self._epoch_dataset is not None:
            dataset = self._epoch_dataset(epoch, seed)
        with tempfile.TemporaryDirectory(prefix="tfinput-state-") as tmp:
            for member in z.namelist():
                if member.startswith(_CKPT):
                    with open(os.path.join(tmp, member[len(_CKPT) :]), "wb") as f:
                        f.write(z.read(member))
            iterator = iter(dataset if dataset is not None else self._dataset)
            self._unread = None
            try:
                status = tf.train.Checkpoint(iterator=iterator).read(
                    os.path.join(tmp, header["checkpoint"])
                )
                status.assert_existing_objects_matched()
            # IndexError: TensorFlow's checkpoint reader on a cut data file.
            except (tf.errors.OpError, AssertionError, ValueError, IndexError) as e:
                if unread:  # reading on from the start needs a build not yet iterated
                    self._dataset = self._epoch_dataset(epoch, seed)
                    self._unread = (epoch, seed)
                raise ResumeError(
                    f"set_state: TensorFlow could not restore the {self._name} pipeline's "
                    f"iterator from this state ({_first_line(e)}); restore into the "
                    "pipeline and config it was saved from (docs/resume.md lists the knobs "
                    "that may change)"
                ) from e
        specs = (dataset if dataset is not None else self._dataset).element_spec
        again = [
            _deserialize(z.read(m), specs) for m in sorted(z.namelist()) if m.startswith(_BATCHES)
        ]
        with self._lock:
            if dataset is not None:
                self._dataset, self.epoch, self._seed = dataset, epoch, seed
            self._iterator, self._failed = iterator, None
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
    from tfinput._src.core.errors import clean_error

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
