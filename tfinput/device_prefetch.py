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

What ``size`` trades: each batch in flight holds device memory (a criteo-like batch of
4096 is about 3 MiB packed); 2 hides one transfer behind one step, more only helps when
transfer times vary.
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tfinput.errors import ConfigError

__all__ = ["DevicePrefetch", "to_jax", "to_tensorflow"]

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


class DevicePrefetch(Iterator[Any]):
    """An iterator that runs ``put(next(source))`` up to ``size`` batches ahead.

    One producer thread and a FIFO queue: batches come out in the source's order and
    none is dropped. An exception from the source (a `tfinput.DataError` from a bad
    record, say) is raised by the ``next()`` call that would have returned that batch,
    after every earlier batch has been returned. `close()` (also on ``with`` exit, and
    when the iterator is garbage collected) stops the thread and releases the source;
    an idle producer notices within ``poll_s``.

    Args:
      source: Any iterable of batches (a `tf.data.Dataset`'s numpy iterator, a list...).
      put: Called on the producer thread for each batch (``jax.device_put``, say).
      size: Batches kept ready ahead of the consumer (>= 1).
      poll_s: How often a blocked producer checks whether it should stop.
    """

    def __init__(
        self,
        source: Iterable[Any],
        *,
        put: Callable[[Any], Any],
        size: int = 2,
        poll_s: float = 0.05,
    ) -> None:
        if not isinstance(size, int) or size < 1:
            raise ConfigError(f"device prefetch size must be an integer >= 1, got {size!r}")
        self._it = iter(source)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=size)
        self._stop = threading.Event()
        self._done = False
        # The thread holds the queue, not this object, so that an iterator the consumer
        # drops is collected and its __del__ stops the thread.
        self._thread = threading.Thread(
            target=_produce,
            args=(self._it, put, self._queue, self._stop, poll_s),
            name="tfinput-device-prefetch",
            daemon=True,
        )
        self._thread.start()
        global _hooked
        with _EXIT_HOOK:
            # Registered after TensorFlow/JAX (imported by now): atexit runs it first.
            if not _hooked:
                atexit.register(_close_all)
                _hooked = True
            _LIVE.add(self)

    # ------------------------------------------------------------- consumer
    def __iter__(self) -> DevicePrefetch:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        item = self._queue.get()
        if item is _END:
            self._finish()
            raise StopIteration
        if isinstance(item, _Failure):
            self._finish()
            raise item.error
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
        self._stop.set()
        # Unblock a producer waiting on a full queue at once.
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        """Whether the producer thread is still alive."""
        return self._thread.is_alive()

    def __enter__(self) -> DevicePrefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_thread", None) is not None and self._thread.is_alive():
            self._stop.set()


def _offer(q: queue.Queue[Any], stop: threading.Event, item: Any, poll_s: float) -> bool:
    """Queue ``item`` unless asked to stop first; False if stopped."""
    while not stop.is_set():
        try:
            q.put(item, timeout=poll_s)
            return True
        except queue.Full:
            continue
    return False


def _produce(
    it: Iterator[Any],
    put: Callable[[Any], Any],
    q: queue.Queue[Any],
    stop: threading.Event,
    poll_s: float,
) -> None:
    try:
        while not stop.is_set():
            try:
                item = put(next(it))
            except StopIteration:
                _offer(q, stop, _END, poll_s)
                return
            except BaseException as e:  # delivered to the consumer, in its place
                _offer(q, stop, _Failure(e), poll_s)
                return
            if not _offer(q, stop, item, poll_s):
                return
    finally:
        close = getattr(it, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()


def _numpy_batches(source: Any) -> Iterable[Any]:
    """numpy batches from a `tf.data.Dataset` or any iterable of (possibly TF) batches."""
    if hasattr(source, "as_numpy_iterator"):
        return source.as_numpy_iterator()

    def convert(batch: Any) -> Any:
        import tensorflow as tf

        return tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, batch)

    return (convert(b) for b in source)


def to_jax(
    source: Any,
    *,
    size: int = 2,
    sharding: Any = None,
    device: Any = None,
) -> DevicePrefetch:
    """Batches of ``source`` as JAX arrays on the device, ``size`` batches ahead.

    Args:
      source: A built `tf.data.Dataset` (converted with ``as_numpy_iterator``, which
        runs on the producer thread) or any iterable of numpy / TensorFlow batches.
      size: Batches in flight (see the module docstring for the trade-off).
      sharding: A `jax.sharding.Sharding` applied to every array, e.g.
        ``NamedSharding(mesh, PartitionSpec("data"))`` to split the batch dimension over
        the devices of a data-parallel mesh (the per-host batch must divide evenly).
      device: One `jax.Device` (default: JAX's default device). Ignored with ``sharding``.

    Raises:
      ConfigError: JAX is not installed.
    """
    try:
        import jax
    except ImportError as e:
        raise ConfigError(
            "device prefetch to JAX needs JAX: pip install jax (or jax[cuda12] on a GPU host)"
        ) from e
    target = sharding if sharding is not None else device

    def put(batch: Any) -> Any:
        out = jax.device_put(batch, target)
        # Wait for the copy here, on the producer thread, so that the consumer's next()
        # returns arrays that are ready and the step never waits on a transfer.
        jax.block_until_ready(out)
        return out

    return DevicePrefetch(_numpy_batches(source), put=put, size=size)


def to_tensorflow(dataset: Any, *, device: str | None = None, size: int = 2) -> Any:
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
