"""The record shuffle of TFRecord input read in mini-batches (``read_batch``): a
shuffle buffer of single records, run a window of records at a time.

tf.data's ``shuffle`` takes and gives one element at a time. With ``read_batch`` the
elements are mini-batches of consecutive records of one file, and shuffling them leaves
each run of consecutive records whole in the batches. `window_shuffle` shuffles the
records themselves, with vectorized ops: a buffer of ``hold`` records takes a window of
new records, and a random ``len(window)`` of the pool leave (the same draw as tf.data's
shuffle, a window at a time), so no single record crosses the consumer side. The buffer
is the state of a ``scan``: tf.data saves it with the iterator, and the draws are
stateless, keyed by a ``Dataset.random`` stream, so a restored iterator continues
exactly.
"""

from __future__ import annotations

import logging

import tensorflow as tf

from tfinput._src.core.config import PipelineConfig

__all__ = ["log_difference_once", "mini_batch", "window_shuffle", "window_size"]

log = logging.getLogger("tfinput")
_LOGGED: set[tuple[int, int, int]] = set()

#: Fewest records a window brings into the pool (a smaller shuffle buffer would pay the
#: per-window cost every few records).
MIN_WINDOW = 256
#: Fewest mini-batches the pool holds: mini-batches shrink for small shuffle buffers,
#: so that a batch still draws from many runs and files.
POOL_MINI_BATCHES = 32


def window_size(shuffle_buffer: int) -> int:
    """Records per window for a buffer of ``shuffle_buffer`` records."""
    return max(shuffle_buffer // 2, MIN_WINDOW)


def mini_batch(config: PipelineConfig) -> int:
    """Records per mini-batch the file branches hand over (0: single records):
    ``read_batch``, and with a shuffle buffer at most ``(shuffle_buffer +
    window_size(shuffle_buffer)) // POOL_MINI_BATCHES``. A function of config knobs
    alone (a saved position must mean the same in a rebuilt pipeline)."""
    if config.read_batch <= 1:
        return 0
    if not config.shuffle_buffer:
        return config.read_batch
    pool = config.shuffle_buffer + window_size(config.shuffle_buffer)
    return min(config.read_batch, max(1, pool // POOL_MINI_BATCHES))


def log_difference_once(*, shuffle_buffer: int, read_batch: int, mini: int, window: int) -> None:
    """Log, once per process and sizes, how the shuffle differs from ``read_batch=0``'s:
    up to one window more records held, mini-batches of ``mini`` records, and the
    setting that restores tf.data's own record shuffle (docs/bench.md)."""
    key = (shuffle_buffer, read_batch, window)
    if key in _LOGGED:
        return
    _LOGGED.add(key)
    log.info(
        "tfinput: shuffle_buffer=%d with read_batch=%d shuffles single records a window "
        "of %d at a time (file branches hand over mini-batches of %d): it holds up to %d "
        "records, not %d; read_batch=0 gives tf.data's record shuffle of exactly "
        "shuffle_buffer records, at the per-record cost (docs/bench.md, 'read_batch')",
        shuffle_buffer, read_batch, window, mini, shuffle_buffer + window, shuffle_buffer,
    )  # fmt: skip


def window_shuffle(
    records: tf.data.Dataset, *, hold: int, window: int, seed: int | None
) -> tf.data.Dataset:
    """Shuffle the records of ``records`` (batches of records of any size): windows of
    ``window`` records enter a buffer of ``hold`` records, and each step hands out as
    many as came in, drawn uniformly from buffer and window; the end of the input hands
    out the rest. Elements are the records each step hands out (none while the buffer
    fills). A new order every iteration (``seed`` fixes the sequence of orders)."""
    keys = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
    steps = tf.data.Dataset.zip((records.rebatch(window), keys))
    steps = steps.map(lambda x, key: (x, key, tf.constant(False)))
    last = (tf.zeros([0], records.element_spec.dtype), tf.constant(0, tf.int64), tf.constant(True))
    steps = steps.concatenate(tf.data.Dataset.from_tensors(last))

    def step(buffer: tf.Tensor, step_input: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, tf.Tensor]:
        new, key, end = step_input
        pool = tf.concat([buffer, new], 0)
        size = tf.size(pool)
        out = tf.where(end, size, tf.maximum(size - hold, 0))
        order = tf.random.experimental.stateless_shuffle(
            tf.range(size), seed=tf.stack([key, tf.constant(0, tf.int64)])
        )
        return tf.gather(pool, order[out:]), tf.gather(pool, order[:out])

    empty = tf.zeros([0], records.element_spec.dtype)
    return steps.scan(empty, step).filter(lambda x: tf.size(x) > 0)
