"""Move batches to the accelerator ahead of the step, overlapping transfer with compute.

Two backends, one contract (same batches, same order, errors at the batch where they
happened, nothing left running when the consumer stops):

- **JAX** (`to_jax`): a background thread converts each batch to numpy and calls
  ``jax.device_put`` (onto one device, or with a `jax.sharding.Sharding` for data
  parallelism over several), keeping ``size`` batches in flight. The training loop's
  ``next()`` then returns arrays already on the device, and ``device_put`` of batch
  *n + 1* runs while step *n* computes. Pair it with the ``packed`` layout: the transfer
  cost grows with the number of arrays per batch.
- **TensorFlow** (`to_tensorflow`): ``tf.data.experimental.prefetch_to_device``, the
  dataset transformation TensorFlow provides for exactly this (for a
  `tf.distribute.Strategy`, ``distribute_datasets_from_function`` with
  ``InputOptions(experimental_fetch_to_device=True)`` does the same per replica). For
  the TPU embedding path keep ids on the host instead (``experimental_fetch_to_device
  =False``), as the README's TPU section shows.

Resuming (JAX): pass the pipeline's `tfinput.InputIterator` as the source,
``to_jax(pipeline.iterator(config))``; the prefetcher's ``get_state()`` is the position
after the last batch the loop received (the batches pulled ahead are saved as not yet
consumed, and come again first after ``set_state``). ``docs/resume.md`` has the recipe.

What ``size`` trades: each batch in flight holds device memory (a criteo-like batch of
4096 is about 3 MiB packed); 2 hides one transfer behind one step, more only helps when
transfer times vary.

Profiles: each transfer (``put``) is an input-pipeline stage that xprof's input-pipeline
analyzer counts (`input_stage`: ``tfinput/device_put``, category ``enqueue``), in JAX's
trace and in TensorFlow's alike; `profiles.analyze` lists it among the host stages of a
JAX trace.
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tfinput._src.core._input_iterator import InputIterator
from tfinput._src.core.errors import ConfigError, ResumeError

if TYPE_CHECKING:  # pragma: no cover
    import jax
    import tensorflow as tf

#: The host stages tfinput annotates for xprof's input-pipeline analyzer: name -> (stage
#: id, category). xprof counts three categories: ``read`` ("Demanded file read"),
#: ``preprocessing`` and ``enqueue``; Grain annotates its stages the same way.
INPUT_STAGES = {
    "tfinput/sparsecore/read": (1, "read"),  # a feed worker takes a batch from tf.data
    "tfinput/sparsecore/preprocess": (2, "preprocessing"),  # jax-tpu-embedding, a worker
    "tfinput/sparsecore/wait": (3, "enqueue"),  # the training loop waits for a ready batch
    "tfinput/device_put": (4, "enqueue"),  # a batch moved to the device
}

_END = object()
# Prefetchers whose thread may still run: closed at interpreter exit, because a daemon
# thread still inside TensorFlow while Python finalizes aborts the process.
_LIVE: weakref.WeakSet[DevicePrefetch] = weakref.WeakSet()
_EXIT_HOOK = threading.Lock()
_hooked = False


def _close_all(timeout_s: float = 5.0) -> None:
    """Stop every live prefetcher's thread (registered with `atexit`)."""
    for prefetch in list(_LIVE):
        prefetch.close(timeout_s=timeout_s)


class _Failure:
    """An exception raised by the source, delivered in its place in the stream."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Feed:
    """What one producer thread shares with the consumer: the source, the queue, the
    stop signal and the counts that make `DevicePrefetch.get_state` exact.

    ``pulled`` (batches taken from the source) changes only under ``lock``, together
    with the ``next(source)`` that took the batch; ``delivered`` (batches returned to
    the consumer) only on the consumer's thread.
    """

    def __init__(self, it: Iterator[object], size: int) -> None:
        self.it = it
        self.queue: queue.Queue[object] = queue.Queue(maxsize=size)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.pulled = 0
        self.delivered = 0

    def drain(self) -> None:
        """Empty the queue (unblocks a producer waiting on a full queue)."""
        while True:
            try:
                self.queue.get_nowait()
            except queue.Empty:
                return


@runtime_checkable
class SavesPosition(Protocol):
    """An iterator whose position can be saved and restored
    (`tfinput.resume.InputIterator`): the prefetcher then saves and restores its own."""

    def __iter__(self) -> Iterator[object]: ...
    def __next__(self) -> object: ...
    def get_state(self) -> bytes: ...
    def set_state(self, state: bytes) -> None: ...


def _resumable(source: object) -> bool:
    return isinstance(source, SavesPosition)


class DevicePrefetch(Iterator[object]):
    """An iterator that runs ``put(next(source))`` up to ``size`` batches ahead.

    One producer thread and a FIFO queue: batches come out in the source's order and
    none is dropped. An exception from the source (a `tfinput.DataError` from a bad
    record, say) is raised by the ``next()`` call that would have returned that batch,
    after every earlier batch has been returned. `close()` (also on ``with`` exit, and
    when the iterator is garbage collected) stops the thread and releases the source;
    an idle producer notices within ``poll_s``.

    Over a `tfinput.InputIterator` (``pipeline.iterator(config)``) the position can be
    saved and restored exactly (`get_state` / `set_state`): the batches pulled ahead
    but not yet returned by ``next()`` belong to the future, and a restored prefetcher
    returns them again.

    Args:
      source: Any iterable of batches (a `tf.data.Dataset`'s numpy iterator, a list,
        a `tfinput.InputIterator`...).
      put: Called on the producer thread for each batch (``jax.device_put``, say).
      size: Batches kept ready ahead of the consumer (>= 1).
      poll_s: How often a blocked producer checks whether it should stop.

    Raises:
      ConfigError: ``size`` is not an integer >= 1, or ``source`` is an
        `InputIterator` that keeps fewer than ``size + 2`` delivered batches (its
        ``keep``): it could not hand back the batches in flight in a saved state.
    """

    def __init__(
        self,
        source: Iterable[object],
        *,
        put: Callable[[object], object],
        size: int = 2,
        poll_s: float = 0.05,
    ) -> None:
        if not isinstance(size, int) or size < 1:
            raise ConfigError(f"device prefetch size must be an integer >= 1, got {size!r}")
        # Saved and restored through get_state / set_state (an InputIterator); None for
        # other sources.
        self._source = source if _resumable(source) else None
        keep = source.keep if isinstance(source, InputIterator) else None
        if self._source is not None and keep is not None and keep < size + 2:
            raise ConfigError(
                f"device prefetch size={size} holds up to {size + 2} batches ahead of the "
                f"training step (queued, being moved, being handed over), but the input "
                f"iterator keeps only the last {keep} (keep={keep}), too few to save them "
                f"in its state: make it with pipeline.iterator(config, keep={size + 2}) or "
                "more, or lower size"
            )
        self._put = put
        self._size = size
        self._poll_s = poll_s
        self._closed = False
        self._start(iter(source))
        global _hooked
        with _EXIT_HOOK:
            # Registered after TensorFlow/JAX (imported by now): atexit runs it first.
            if not _hooked:
                atexit.register(_close_all)
                _hooked = True
            _LIVE.add(self)

    def _start(self, it: Iterator[object]) -> None:
        self._done = False
        self._feed = _Feed(it, self._size)
        # The thread holds the feed, not this object, so that an iterator the consumer
        # drops is collected and its __del__ stops the thread.
        self._thread = threading.Thread(
            target=_produce,
            args=(self._feed, self._put, self._poll_s),
            name="tfinput-device-prefetch",
            daemon=True,
        )
        self._thread.start()

    # ------------------------------------------------------------- consumer
    def __iter__(self) -> DevicePrefetch:
        return self

    def __next__(self) -> object:
        if self._done:
            raise StopIteration
        feed = self._feed
        item = feed.queue.get()
        if item is _END:
            self._finish()
            raise StopIteration
        if isinstance(item, _Failure):
            self._finish()
            raise item.error
        feed.delivered += 1
        return item

    def _finish(self) -> None:
        self._done = True
        self._thread.join()

    def close(self, *, timeout_s: float | None = None) -> None:
        """Stop the producer thread and wait for it (idempotent).

        Args:
          timeout_s: Wait at most this long for a producer inside ``next(source)``
            (None: until it returns).
        """
        self._done = True
        self._closed = True
        self._feed.stop.set()
        # Unblock a producer waiting on a full queue at once.
        self._feed.drain()
        self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        """Whether the producer thread is still alive."""
        return self._thread.is_alive()

    # ---------------------------------------------------------------- state
    def get_state(self) -> bytes:
        """The position after the last batch ``next()`` returned, as bytes to store
        next to the model's checkpoint (`tfinput.InputIterator.get_state`).

        The batches the producer has pulled from the source but not yet returned
        (queued, or being moved to the device) are saved as not consumed: a prefetcher
        restored from this state returns them first. Call it from the thread that
        calls ``next()``; it pauses the producer for as long as the save takes.

        Raises:
          ResumeError: the source is not a `tfinput.InputIterator` (pass
            ``pipeline.iterator(config)`` as the source), or the pipeline cannot be
            checkpointed (the message names the source and the remedy).
        """
        source = self._resumable_source("get_state")
        feed = self._feed
        with feed.lock:  # the producer cannot pull while the position is written
            return source.get_state(unconsumed=feed.pulled - feed.delivered)

    def set_state(self, state: bytes) -> None:
        """Continue from ``state`` (`get_state` of a prefetcher, or of an
        `InputIterator`, over the same pipeline): stops the producer, drops the batches
        it had pulled ahead, restores the source and starts again, so the next
        ``next()`` returns the batch after the saved position.

        Raises:
          ResumeError: the source is not a `tfinput.InputIterator`, the prefetcher is
            closed, or the source refuses the state (another pipeline's, not a state).
        """
        source = self._resumable_source("set_state")
        if self._closed:
            raise ResumeError(
                "set_state on a closed device prefetcher: make a new one (to_jax(it)) "
                "and call set_state on it"
            )
        self._feed.stop.set()
        self._feed.drain()
        self._thread.join()
        source.set_state(state)
        self._start(iter(source))

    def _resumable_source(self, method: str) -> SavesPosition:
        if self._source is None:
            raise ResumeError(
                f"{method}: this device prefetcher reads a source without a saveable "
                "position; pass the iterator of a tfinput pipeline as the source, "
                "to_jax(pipeline.iterator(config)), not a dataset, a numpy iterator or a "
                "generator"
            )
        return self._source

    def __enter__(self) -> DevicePrefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_thread", None) is not None and self._thread.is_alive():
            self._feed.stop.set()


def input_stage(name: str) -> contextlib.AbstractContextManager[object]:
    """A span of the host stage ``name`` (`INPUT_STAGES`) in a profile, carrying the
    input-pipeline stage stats that xprof's input-pipeline analyzer reads
    (``_ipl_stage_name``, ``_ipl_stage_id``, ``_ipl_stage_cat``): a
    ``jax.profiler.TraceAnnotation`` when JAX is loaded and a
    ``tf.profiler.experimental.Trace`` when TensorFlow is (each profiler sees only its
    own), so the stage is in the trace whichever profiler runs. Neither library is
    imported here; about a microsecond each when no profile is being taken."""
    stage_id, category = INPUT_STAGES[name]
    stats = {"_ipl_stage_name": name, "_ipl_stage_id": stage_id, "_ipl_stage_cat": category}
    spans = []
    jax_profiler = getattr(sys.modules.get("jax"), "profiler", None)
    if jax_profiler is not None:
        spans.append(jax_profiler.TraceAnnotation(name, **stats))
    # The module behind tf.profiler.experimental.Trace, loaded with TensorFlow.
    tf_trace = sys.modules.get("tensorflow.python.profiler.trace")
    if tf_trace is not None:  # records nothing unless TensorFlow's profiler runs
        spans.append(tf_trace.Trace(name, **stats))
    if len(spans) < 2:
        return spans[0] if spans else contextlib.nullcontext()
    return _together(spans)


@contextlib.contextmanager
def _together(spans: list[contextlib.AbstractContextManager[object]]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for span in spans:
            stack.enter_context(span)
        yield


def _offer(q: queue.Queue[object], stop: threading.Event, item: object, poll_s: float) -> bool:
    """Queue ``item`` unless asked to stop first; False if stopped."""
    while not stop.is_set():
        try:
            q.put(item, timeout=poll_s)
            return True
        except queue.Full:
            continue
    return False


def _produce(feed: _Feed, put: Callable[[object], object], poll_s: float) -> None:
    q, stop = feed.queue, feed.stop
    try:
        while not stop.is_set():
            try:
                with feed.lock:
                    batch = next(feed.it)
                    feed.pulled += 1
                with input_stage("tfinput/device_put"):
                    item = put(batch)
            except StopIteration:
                _offer(q, stop, _END, poll_s)
                return
            except BaseException as e:  # delivered to the consumer, in its place
                _offer(q, stop, _Failure(e), poll_s)
                return
            if not _offer(q, stop, item, poll_s):
                return
    finally:
        # Release a generator source; a resumable one stays open: set_state reuses it.
        close = None if _resumable(feed.it) else getattr(feed.it, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()


def _to_numpy(batch: object) -> object:
    """A batch of TensorFlow tensors (any nest) as numpy arrays; numpy passes through."""
    import tensorflow as tf

    return tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, batch)


def to_jax(
    source: Iterable[object],
    *,
    size: int = 2,
    sharding: jax.sharding.Sharding | None = None,
    device: jax.Device | None = None,
) -> DevicePrefetch:
    """Batches of ``source`` as JAX arrays on the device, ``size`` batches ahead.

    Args:
      source: A `tfinput.InputIterator` (``pipeline.iterator(config)``: the prefetcher
        then has `DevicePrefetch.get_state` / ``set_state`` to resume exactly), a built
        `tf.data.Dataset` (converted with ``as_numpy_iterator``), or any iterable of
        numpy / TensorFlow batches. The conversion to numpy runs on the producer thread.
      size: Batches in flight (see the module docstring for the trade-off). With an
        `InputIterator`, its ``keep`` must be at least ``size + 2`` (the default keep,
        8, covers sizes up to 6).
      sharding: A `jax.sharding.Sharding` applied to every array, e.g.
        ``NamedSharding(mesh, PartitionSpec("data"))`` to split the batch dimension over
        the devices of a data-parallel mesh (the per-host batch must divide evenly).
      device: One `jax.Device` (default: JAX's default device). Ignored with ``sharding``.

    Raises:
      ConfigError: JAX is not installed, or ``size`` does not fit the iterator's
        ``keep``.
    """
    try:
        import jax
    except ImportError as e:
        raise ConfigError(
            "device prefetch to JAX needs JAX: pip install jax (or jax[cuda12] on a GPU host)"
        ) from e
    target = sharding if sharding is not None else device
    numpy_already = False
    if not _resumable(source) and hasattr(source, "as_numpy_iterator"):
        source, numpy_already = source.as_numpy_iterator(), True

    def put(batch: object) -> object:
        out = jax.device_put(batch if numpy_already else _to_numpy(batch), target)
        # Wait for the copy here, on the producer thread, so that the consumer's next()
        # returns arrays that are ready and the step never waits on a transfer.
        jax.block_until_ready(out)
        return out

    return DevicePrefetch(source, put=put, size=size)


def to_tensorflow(
    dataset: tf.data.Dataset, *, device: str | None = None, size: int = 2
) -> tf.data.Dataset:
    """``dataset`` with ``tf.data.experimental.prefetch_to_device`` as its last step.

    Args:
      dataset: A built `tf.data.Dataset`.
      device: A TensorFlow device name (default: the first GPU, else the CPU).
      size: Batches buffered on the device.
    """
    import tensorflow as tf

    if not isinstance(size, int) or size < 1:
        raise ConfigError(f"device prefetch size must be an integer >= 1, got {size!r}")
    if device is None:
        gpus = tf.config.list_logical_devices("GPU")
        device = gpus[0].name if gpus else "/cpu:0"
    return dataset.apply(tf.data.experimental.prefetch_to_device(device, buffer_size=size))
