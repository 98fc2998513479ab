"""`verify`: a pipeline restored from a saved position yields exactly the batches
the uninterrupted run does. `tfinput.resume` is the public API."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from tfinput._src.core.errors import ResumeError

if TYPE_CHECKING:  # pragma: no cover
    from tfinput._src.core._input_iterator import InputIterator
    from tfinput._src.core.config import PipelineConfig

__all__ = ["Resumable", "verify"]


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

    from tfinput._src.core.errors import TfinputError

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
    tick: Callable[[], Any],
    result: dict[str, Any],
) -> dict[str, Any]:
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
