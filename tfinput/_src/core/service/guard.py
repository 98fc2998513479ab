"""The guarded read of tf.data service (`GuardedRead`): a worker that died becomes a
`ServiceError` after ``stall_timeout_s`` instead of an endless wait, and an epoch that
came back short is counted. Re-exported by `tfinput.service`."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tfinput._src.core._python_calls import python_call
from tfinput._src.core.errors import ConfigError, ServiceError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import tensorflow as tf

log = logging.getLogger("tfinput.service")  # the public module's name

# The longest wait for one batch of a service read before it is called a stall. The
# first batch includes the workers' start of the job (graph transfer, file listing):
# minutes on a cold fleet, so the default leaves room.
DEFAULT_STALL_TIMEOUT_S = 300.0

_END = object()


class GuardedRead:
    """Iterate a tf.data service read with a bounded wait and a row count.

    tf.data service keeps retrying a worker that stopped answering until a worker comes
    back at its address (a cluster manager restarts it), so a worker that died for good
    stalls its clients forever. This iterator raises `ServiceError` instead once no batch
    has arrived for ``stall_timeout_s``, and counts the rows of the epoch: with
    ``expected_rows`` it reports, at the end of the epoch, how many rows a worker that
    died took with it (`lost`; dynamic sharding loses the unread part of that worker's
    files, and never delivers a row twice).

    Batches come from a background thread one ahead of the consumer, in order. For a
    custom training loop that wants `lost` and `summary`; the datasets `distribute`
    and `Pipeline.with_service` return carry the same checks (`guarded_dataset`).

    Args:
      dataset: The distributed dataset (`distribute`, or a service pipeline's build).
      expected_rows: Rows in one epoch (for example a columnar manifest's row count),
        or a function returning them (None where unknown), called in a background
        thread when the read starts; None: rows are counted, not compared.
      tail_rows: Rows an epoch may end short by without a loss: with
        ``drop_remainder``, up to ``batch_size - 1`` per worker that read a part.
      stall_timeout_s: Longest wait for one batch. Leave room for the first batch,
        which includes the workers' start of the job.
      address: The dispatcher, named in errors.
    """

    def __init__(
        self,
        dataset: tf.data.Dataset,
        *,
        expected_rows: int | Callable[[], int | None] | None = None,
        tail_rows: int = 0,
        stall_timeout_s: float = 120.0,
        address: str | None = None,
    ) -> None:
        if stall_timeout_s <= 0:
            raise ConfigError(f"guarded: stall_timeout_s must be > 0, got {stall_timeout_s}")
        if tail_rows < 0:
            raise ConfigError(f"guarded: tail_rows must be >= 0, got {tail_rows}")
        self.dataset = dataset
        self._expected = expected_rows
        self.expected_rows: int | None = expected_rows if isinstance(expected_rows, int) else None
        self.tail_rows = tail_rows
        self.stall_timeout_s = stall_timeout_s
        self.address = address
        self.rows = 0
        self.batches = 0
        self.finished = False
        self._queue: queue.Queue[object] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def missing(self) -> int | None:
        """Rows of the epoch that did not arrive, drop_remainder tails included (once
        the epoch ended; None before, or without ``expected_rows``)."""
        if not self.finished or self.expected_rows is None:
            return None
        return max(self.expected_rows - self.rows, 0)

    @property
    def lost(self) -> int | None:
        """Rows of the epoch lost: the missing rows, where more are missing than the
        drop_remainder tails (``tail_rows``) account for; else 0. None before the epoch
        ended, or without ``expected_rows``."""
        missing = self.missing
        if missing is None:
            return None
        return missing if missing > self.tail_rows else 0

    def summary(self) -> str:
        """One line: batches, rows, and the rows lost where known."""
        line = f"tf.data service read: {self.batches} batches, {self.rows:,} rows"
        if self.lost:
            line += f"; {self.lost:,} of {self.expected_rows:,} rows lost"
            if self.tail_rows:
                line += (
                    f" (at least {self.lost - self.tail_rows:,}; up to "
                    f"{self.tail_rows:,} may be the workers' drop_remainder tails)"
                )
            line += (
                ": a worker stopped mid-epoch, and dynamic sharding drops what it had not "
                "delivered (the unread part of its files, its batches in flight)"
            )
        elif self.missing:
            line += (
                f" of {self.expected_rows:,}; the {self.missing:,} missing are the workers' "
                "drop_remainder tails, none lost"
            )
        elif self.missing == 0:
            line += f" of {self.expected_rows:,} expected, none lost"
        return line

    def __iter__(self) -> GuardedRead:
        if self._thread is None:
            self._thread = threading.Thread(target=self._produce, daemon=True, name="tfinput-svc")
            self._thread.start()
        return self

    def _count_expected(self) -> None:
        try:
            self.expected_rows = self._expected()  # type: ignore[operator]
        except Exception as e:  # the read goes on; only the count is unknown
            log.warning("tf.data service read: could not count the epoch's rows: %s", e)

    def _produce(self) -> None:
        counter = None
        if callable(self._expected):
            counter = threading.Thread(target=self._count_expected, daemon=True)
            counter.start()
        try:
            for element in self.dataset:
                while not self._stop.is_set():
                    try:
                        self._queue.put(element, timeout=0.5)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            if counter is not None:
                counter.join()
            self._queue.put(_END)
        except BaseException as e:  # handed to the consumer, in order
            self._queue.put(e)

    def __next__(self) -> object:
        if self._thread is None:
            iter(self)
        if self.finished:
            raise StopIteration
        started = time.monotonic()
        try:
            item = self._queue.get(timeout=self.stall_timeout_s)
        except queue.Empty:
            self._stop.set()
            raise _stalled(
                self.address,
                time.monotonic() - started,
                self.batches,
                self.rows,
                self.expected_rows,
            ) from None
        if item is _END:
            self.finished = True
            if self.lost:
                log.warning("%s", self.summary())
            raise StopIteration
        if isinstance(item, BaseException):
            self._stop.set()
            raise item
        self.batches += 1
        self.rows += _batch_rows(item)
        return item

    def close(self) -> None:
        """Stop the background thread once its current batch arrives."""
        self._stop.set()


def _stalled(
    address: str | None, waited: float, batches: int, rows: int, expected: int | None
) -> ServiceError:
    """The error of a read with no batch for ``waited`` seconds."""
    where = f" from {address}" if address else ""
    of = f" of {expected:,} expected" if expected else ""
    return ServiceError(
        f"no batch{where} in {waited:.0f} s after {batches} batches ({rows:,} rows{of}): "
        "a tf.data service worker probably died. Restart it on the same address (its "
        "clients reconnect), or start the job again; raise stall_timeout_s if batches are "
        "just slow"
    )


def _batch_rows(element: object) -> int:
    import tensorflow as tf

    first = tf.nest.flatten(element)[0]
    return int(first.shape[0]) if first.shape.rank else 1


#: ``guarded(dataset, ...)``: ``dataset``'s batches with a bounded wait and a row count,
#: a `GuardedRead` (the name `tfinput.service` gives its constructor).
guarded = GuardedRead


def guarded_dataset(
    dataset: tf.data.Dataset,
    *,
    expected_rows: int | Callable[[], int | None] | None = None,
    tail_rows: int = 0,
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
    address: str | None = None,
) -> tf.data.Dataset:
    """``dataset`` with `GuardedRead`'s checks, as a `tf.data.Dataset` (what
    `distribute` returns by default, so that ``model.fit`` gets them too).

    Each pass (iteration) of the result is checked on its own: no batch for
    ``stall_timeout_s`` raises (an op error whose message is the `ServiceError`'s), and
    a pass that ends with more rows missing than ``tail_rows`` logs a warning counting
    them (`GuardedRead.summary`).

    The batches stay in tf.data: a watchdog stream (a Python call that waits at most
    half a second, then yields nothing) is raced against the read in a parallel
    ``interleave``, so that a read blocked for good inside tf.data service still
    surfaces its error; each batch costs one small Python call (its row count).

    Raises:
      ConfigError: a non-positive ``stall_timeout_s`` or a negative ``tail_rows``.
    """
    import numpy as np
    import tensorflow as tf

    GuardedRead(dataset, stall_timeout_s=stall_timeout_s, tail_rows=tail_rows)  # checks the args
    passes = _Passes(
        expected_rows=expected_rows,
        tail_rows=tail_rows,
        stall_timeout_s=stall_timeout_s,
        address=address,
    )
    spec = dataset.element_spec
    flat_specs = tf.nest.flatten(spec, expand_composites=True)

    def placeholder() -> tuple[tf.Tensor, ...]:
        return _placeholder(flat_specs)

    # At the interpreter's exit the calls return at once: a batch counts nothing, the
    # watchdog's stream ends (3), so an iterator still alive then lets the exit go on.
    beat_call = python_call(passes.beat, refused=lambda rows: np.int64(0))
    watch_call = python_call(passes.watch, refused=lambda: np.int32(3))

    def beat(*element: tf.Tensor) -> tuple[tf.Tensor, tuple[tf.Tensor, ...]]:
        value = element[0] if len(element) == 1 else element
        seen = tf.numpy_function(
            beat_call, [_rows_of(value)], tf.int64, stateful=True, name="svc_beat"
        )
        kind = tf.cast(seen, tf.int32) * 0  # 0: a batch (after its count)
        return kind, tuple(tf.nest.flatten(value, expand_composites=True))

    def marker(call: Callable[[], object], kind: int, name: str) -> tf.data.Dataset:
        return _marker(call, kind, name, flat_specs)

    def watch(_: tf.Tensor) -> tuple[tf.Tensor, tuple[tf.Tensor, ...]]:
        kind = tf.numpy_function(watch_call, [], tf.int32, stateful=True, name="svc_watch")
        return tf.reshape(kind, []), placeholder()  # 2: nothing, 3: the pass ended

    # Each pass: a start marker (1), then the read (batches 0, then an end marker 1)
    # raced against the watchdog (2: nothing yet, 3: the pass ended). The service read
    # is an element of the race, not captured in a function (a tf.data service read
    # nested in flat_map kept its job alive past the end, and the worker's stop waited).
    data = dataset.map(beat).concatenate(marker(passes.end, 1, "svc_end"))
    watchdog = tf.data.Dataset.range(1).repeat().map(watch).take_while(lambda k, _: k != 3)
    passes_ds = marker(passes.start, 1, "svc_start").concatenate(_race(data, watchdog))

    def unpack(kind: tf.Tensor, flat: tuple[tf.Tensor, ...]) -> object:
        # The placeholders have the batches' static shapes (0 where unknown), so the
        # race keeps the element spec: no shape to set again.
        del kind
        return tf.nest.pack_sequence_as(spec, list(flat), expand_composites=True)

    out = passes_ds.filter(lambda k, _: k == 0).map(unpack)
    out._tfinput_unguarded = dataset  # for `unguarded`
    return out


def _race(data: tf.data.Dataset, watchdog: tf.data.Dataset) -> tf.data.Dataset:
    """The elements of ``data`` and ``watchdog`` as each comes, the two pulled in
    parallel (an ``interleave`` of the two streams, not deterministic)."""
    import tensorflow as tf

    streams = tf.data.Dataset.from_tensors(data).concatenate(tf.data.Dataset.from_tensors(watchdog))
    return streams.interleave(
        lambda stream: stream,
        cycle_length=2,
        block_length=1,
        num_parallel_calls=2,
        deterministic=False,
    )


def _placeholder(flat_specs: list[tf.TypeSpec]) -> tuple[tf.Tensor, ...]:
    """What the watchdog's elements carry in place of a batch (filtered out): zeros of
    the batches' static shapes (0 where unknown)."""
    import tensorflow as tf

    out = []
    for s in flat_specs:
        if s.shape.rank is None:
            out.append(tf.zeros([], s.dtype))
        else:
            out.append(tf.zeros([d if d is not None else 0 for d in s.shape], s.dtype))
    return tuple(out)


def _marker(
    call: Callable[[], object], kind: int, name: str, flat_specs: list[tf.TypeSpec]
) -> tf.data.Dataset:
    """A one-element dataset of ``kind`` that runs ``call`` (a pass's start or end;
    nothing at the interpreter's exit)."""
    import numpy as np
    import tensorflow as tf

    marked = python_call(call, refused=lambda: np.int64(0))

    def element(_: tf.Tensor) -> tuple[tf.Tensor, tuple[tf.Tensor, ...]]:
        done = tf.numpy_function(marked, [], tf.int64, stateful=True, name=name)
        return tf.cast(done, tf.int32) * 0 + kind, _placeholder(flat_specs)

    return tf.data.Dataset.range(1).map(element)


def _rows_of(element: object) -> tf.Tensor:
    """Rows of one batch, as a scalar int64 tensor (its first component's leading dim)."""
    import tensorflow as tf

    first = tf.nest.flatten(element)[0]
    if isinstance(first, tf.RaggedTensor):
        return tf.cast(first.nrows(), tf.int64)
    if isinstance(first, tf.SparseTensor):
        return first.dense_shape[0]
    if first.shape.rank == 0:
        return tf.constant(1, tf.int64)
    return tf.shape(first, out_type=tf.int64)[0]


class _Pass:
    """One pass of a `guarded_dataset`: its counts and clocks."""

    def __init__(self, expected: int | Callable[[], int | None] | None) -> None:
        self.started = self.last = time.monotonic()
        self.rows = 0
        self.batches = 0
        self.done = threading.Event()
        self.expected: int | None = expected if isinstance(expected, int) else None
        self.counter: threading.Thread | None = None
        if callable(expected):
            self.counter = threading.Thread(target=self._count, args=(expected,), daemon=True)
            self.counter.start()

    def _count(self, expected: Callable[[], int | None]) -> None:
        try:
            self.expected = expected()
        except Exception as e:  # the read goes on; only the count is unknown
            log.warning("tf.data service read: could not count the epoch's rows: %s", e)


class _Passes:
    """The pass in flight of one `guarded_dataset` (called from tf.data's threads
    through ``numpy_function``). A pass starts when an iterator is made (a start marker
    before the read); one iterator of a guarded dataset at a time is checked (a second
    one, made while the first is read, starts a new pass for both)."""

    def __init__(
        self,
        *,
        expected_rows: int | Callable[[], int | None] | None,
        tail_rows: int,
        stall_timeout_s: float,
        address: str | None,
    ) -> None:
        self.expected_rows = expected_rows
        self.tail_rows = tail_rows
        self.stall_timeout_s = stall_timeout_s
        self.address = address
        self._lock = threading.Lock()
        self._current = _Pass(None)

    def _pass(self) -> _Pass:
        with self._lock:
            return self._current

    def start(self) -> np.int64:
        import numpy as np

        with self._lock:
            self._current = _Pass(self.expected_rows)
        return np.int64(0)

    def beat(self, rows: np.int64) -> np.int64:
        import numpy as np

        p = self._pass()
        p.rows += int(rows)
        p.batches += 1
        p.last = time.monotonic()
        return np.int64(0)

    def end(self) -> np.int64:
        import numpy as np

        p = self._pass()
        if p.counter is not None:
            p.counter.join()
        read = GuardedRead(
            None, expected_rows=p.expected, tail_rows=self.tail_rows, address=self.address
        )
        read.rows, read.batches, read.finished = p.rows, p.batches, True
        if read.lost:
            log.warning("%s", read.summary())
        p.done.set()
        return np.int64(0)

    def watch(self) -> np.int32:
        import numpy as np

        p = self._pass()
        if p.done.wait(min(0.5, self.stall_timeout_s)):
            return np.int32(3)
        waited = time.monotonic() - p.last
        if waited > self.stall_timeout_s:
            raise _stalled(self.address, waited, p.batches, p.rows, p.expected)
        return np.int32(2)


def unguarded(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The tf.data service read inside a `guarded_dataset` (``dataset`` itself if it
    is not one)."""
    return getattr(dataset, "_tfinput_unguarded", dataset)
