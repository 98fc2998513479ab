"""The shuffle of rows already in batches, shared by the sources that batch by
themselves (pyarrow Parquet, columnar records, a wrapped dataset of batches): windows of
whole batches whose rows are permuted, seeded by ``shuffle_seed``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tfinput._src.core.errors import ConfigError
from tfinput._src.core.sources.protocol import deterministic_arg, parallel_calls, traced

if TYPE_CHECKING:
    import tensorflow as tf

    from tfinput._src.core.config import PipelineConfig


def shuffle_window(shuffle_buffer: int, batch_size: int) -> int:
    """Rows a window of a batch-level shuffle holds for ``shuffle_buffer``: the buffer
    rounded up to whole batches, at least two, so that rows cross batch boundaries
    whatever the buffer (a window of one batch would only reorder its rows)."""
    return max(2, math.ceil(shuffle_buffer / batch_size)) * batch_size


def shuffle_row_windows(
    groups: tf.data.Dataset, *, window_rows: int, config: PipelineConfig
) -> tf.data.Dataset:
    """The rows of ``groups`` permuted window by window: the record shuffle of a source
    whose elements are already rows in batches (a tf.data shuffle of them would move
    whole batches and keep each batch's rows together).

    Each element of ``groups`` is a structure (a dict, usually) of tensors and ragged
    tensors whose first dimension is rows. An element of ``window_rows`` rows or more is
    a window, whose rows leave in a random permutation. An element of fewer rows (the
    end of the input, or of one of its files) joins the window before it, and the two
    leave permuted together: every window holds at least ``window_rows`` rows unless the
    whole input holds fewer, so with a window of more than one batch every batch cut
    from the result (``rebatch``) draws rows from more than one batch of the input.
    Windows are permuted on ``map_parallelism`` threads; one window is held back
    (memory: one window of rows more).

    The permutations are keyed by a ``Dataset.random`` stream seeded by
    ``shuffle_seed`` (a new order every iteration, a fixed sequence of orders for a
    fixed seed); tf.data saves the stream and the window held back with the iterator,
    so a restored iterator goes on exactly.

    Raises:
      ConfigError: an element holds something other than tensors and ragged tensors.
    """
    import tensorflow as tf

    spec = groups.element_spec
    for path, leaf in _leaves(spec):
        if not isinstance(leaf, (tf.TensorSpec, tf.RaggedTensorSpec)) or not leaf.shape.rank:
            raise ConfigError(
                f"shuffle_buffer={config.shuffle_buffer}: the batches' {path or 'element'} "
                f"is {leaf}; the shuffle of batched rows permutes tensors and ragged "
                "tensors with a batch dimension only: give it as one of these, or set "
                "shuffle_buffer=0 and shuffle the rows before batching them"
            )
    keys = tf.data.Dataset.random(seed=config.shuffle_seed, rerandomize_each_iteration=True)
    parallel = parallel_calls(config.map_parallelism)

    def permuted(group: Any, key: tf.Tensor) -> tuple[tuple[tf.Tensor, ...], tf.Tensor, tf.Tensor]:
        return _components(_permute(group, key)), key, tf.constant(False)

    windows = tf.data.Dataset.zip((groups, keys)).map(
        traced(permuted),
        num_parallel_calls=parallel,
        deterministic=deterministic_arg(config) if parallel else None,
        name="shuffle_rows",
    )
    empty = _components(_empty(spec))
    end = (empty, tf.constant(0, tf.int64), tf.constant(True))
    windows = windows.concatenate(tf.data.Dataset.from_tensors(end))

    def step(
        held: tuple[tf.Tensor, ...], element: Any
    ) -> tuple[tuple[tf.Tensor, ...], tuple[tf.Tensor, ...]]:
        window, key, last = element
        whole = tf.logical_and(tf.logical_not(last), _rows(_pack(spec, window)) >= window_rows)

        def hand_over() -> tuple[tuple[tf.Tensor, ...], tuple[tf.Tensor, ...]]:
            return window, held  # hold this window, hand over the one held

        def join() -> tuple[tuple[tf.Tensor, ...], tuple[tf.Tensor, ...]]:
            def concat() -> tuple[tf.Tensor, ...]:
                return _components(
                    tf.nest.map_structure(
                        lambda a, b: tf.concat([a, b], 0), _pack(spec, held), _pack(spec, window)
                    )
                )

            # Nothing held: the window alone (an empty held window's unknown inner
            # dimensions are 0, which would not concatenate).
            both = tf.cond(_rows(_pack(spec, held)) > 0, concat, lambda: window)
            return empty, _components(_permute(_pack(spec, both), key))

        return tf.cond(whole, hand_over, join)

    out = windows.scan(empty, traced(step)).map(traced(lambda *parts: _pack(spec, parts)))
    return out.filter(traced(lambda rows: _rows(rows) > 0))


def _leaves(spec: Any, path: str = "") -> list[tuple[str, Any]]:
    """``(path, spec)`` of each leaf of an element spec, composites kept whole."""
    if isinstance(spec, Mapping):
        return [item for k in sorted(spec) for item in _leaves(spec[k], f"{path}/{k}")]
    if isinstance(spec, (tuple, list)):
        return [item for i, s in enumerate(spec) for item in _leaves(s, f"{path}/{i}")]
    return [(path.lstrip("/"), spec)]


def _components(rows: Any) -> tuple[tf.Tensor, ...]:
    """A structure of tensors and ragged tensors as a tuple of plain tensors (a
    ``scan`` state cannot hold ragged tensors)."""
    import tensorflow as tf

    return tuple(tf.nest.flatten(rows, expand_composites=True))


def _pack(spec: Any, components: tuple[tf.Tensor, ...]) -> Any:
    """`_components` back into the structure of ``spec``."""
    import tensorflow as tf

    return tf.nest.pack_sequence_as(spec, components, expand_composites=True)


def _empty(spec: Any) -> Any:
    """A structure of ``spec`` with no rows."""
    import tensorflow as tf

    def empty(leaf: Any) -> Any:
        if isinstance(leaf, tf.RaggedTensorSpec):
            ragged = leaf.ragged_rank
            inner = [d or 0 for d in leaf.shape[ragged + 1 :].as_list()]
            dense = tf.zeros([0] * (ragged + 1) + inner, leaf.dtype)
            return tf.RaggedTensor.from_tensor(
                dense, ragged_rank=ragged, row_splits_dtype=leaf.row_splits_dtype
            )
        return tf.zeros([0, *(d or 0 for d in leaf.shape[1:].as_list())], leaf.dtype)

    return tf.nest.map_structure(empty, spec)


def _rows(rows: Any) -> tf.Tensor:
    """The rows of a structure of tensors and ragged tensors (its first leaf's)."""
    import tensorflow as tf

    first = tf.nest.flatten(rows)[0]
    if isinstance(first, tf.RaggedTensor):
        return tf.cast(first.nrows(), tf.int64)
    return tf.shape(first, out_type=tf.int64)[0]


def _permute(rows: Any, key: tf.Tensor) -> Any:
    """``rows`` in the stateless permutation of ``key`` (one gather per leaf)."""
    import tensorflow as tf

    order = tf.random.experimental.stateless_shuffle(
        tf.range(_rows(rows)), seed=tf.stack([key, tf.constant(0, tf.int64)])
    )
    return tf.nest.map_structure(lambda v: tf.gather(v, order), rows)
