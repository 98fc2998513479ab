"""A Parquet batch of many columns handed from Python to TensorFlow as a few arrays.

``tf.numpy_function`` converts each array it returns, under the GIL, and each output
then costs the graph an op or two: at a thousand columns that per-column cost, not the
rows, is most of a small batch's time, and it holds the GIL the consumer needs. So the
reader's columns cross as: the one-value-per-row columns of a dtype stacked ``[n, rows]``
(dense scalars, labels, single ids, list lengths), and the list values of a dtype joined
end to end with their sizes. `Packing.unpack` splits them again in the graph with one op
per group. The values are the same arrays, bit for bit: only how they cross changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow as tf

from tfinput._src.core.sources._arrow import LIST_VALUES

#: Columns of a dtype and kind below which they cross one array each: stacking and
#: splitting copy the batch twice, which a narrow schema's few arrays do not repay (the
#: criteo-like read at batch 4,096 ran at 0.84x packed; benchmarks/RESULTS.md).
PACK_MIN = 64


class Packing:
    """How the columns of ``signature`` (key -> ``TensorSpec``) cross as few arrays.

    Columns of shape ``[None]`` group by dtype: row columns (every one has a value per
    row) are stacked, list values (``.../values``, lengths differ) are joined. Other
    columns (fixed-length vectors) and groups of fewer than ``min_group`` cross as they
    are.
    """

    def __init__(self, signature: Mapping[str, tf.TensorSpec], min_group: int = PACK_MIN) -> None:
        self.signature = dict(signature)
        rows: dict[tf.DType, list[str]] = {}
        joined: dict[tf.DType, list[str]] = {}
        self.single: list[str] = []
        for key, spec in self.signature.items():
            if spec.shape.rank != 1:
                self.single.append(key)
            elif key.endswith(LIST_VALUES):
                joined.setdefault(spec.dtype, []).append(key)
            else:
                rows.setdefault(spec.dtype, []).append(key)
        for groups in (rows, joined):
            for dtype in [d for d, keys in groups.items() if len(keys) < max(2, min_group)]:
                self.single += groups.pop(dtype)
        self.rows: list[tuple[tf.DType, list[str]]] = list(rows.items())
        self.joined: list[tuple[tf.DType, list[str]]] = list(joined.items())

    @property
    def dtypes(self) -> list[tf.DType]:
        """The dtypes of the arrays `pack` returns, in order."""
        out = [self.signature[k].dtype for k in self.single]
        out += [dtype for dtype, _ in self.rows]
        for dtype, _ in self.joined:
            out += [dtype, tf.int64]
        return out

    def pack(self, batch: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The arrays of one batch (``batch``: one array per key of the signature)."""
        out = [batch[k] for k in self.single]
        out += [np.stack([batch[k] for k in keys]) for _, keys in self.rows]
        for _, keys in self.joined:
            parts = [batch[k] for k in keys]
            out += [np.concatenate(parts), np.array([len(p) for p in parts], np.int64)]
        return out

    def empty(self) -> list[np.ndarray]:
        """The arrays of a batch of no rows (what a failed read hands over)."""
        return self.pack({k: _empty(spec) for k, spec in self.signature.items()})

    def unpack(self, arrays: Sequence[tf.Tensor]) -> dict[str, tf.Tensor]:
        """The graph side: one tensor per key of the signature, with its static shape."""
        out: dict[str, tf.Tensor] = dict(zip(self.single, arrays))
        i = len(self.single)
        for _, keys in self.rows:
            out.update(zip(keys, tf.unstack(arrays[i], num=len(keys))))
            i += 1
        for _, keys in self.joined:
            values, sizes = arrays[i], arrays[i + 1]
            out.update(zip(keys, tf.split(values, sizes, num=len(keys))))
            i += 2
        for key, spec in self.signature.items():
            out[key].set_shape(spec.shape)
        return {key: out[key] for key in self.signature}


def _empty(spec: tf.TensorSpec) -> np.ndarray:
    """A 0-row array of ``spec``'s dtype and inner shape."""
    shape = [0, *spec.shape[1:]]
    return np.zeros(shape, object if spec.dtype == tf.string else spec.dtype.as_numpy_dtype)
