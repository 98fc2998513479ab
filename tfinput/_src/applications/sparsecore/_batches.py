"""One batch's SparseCore preprocessing for a `SparseCorePlan` (its `inputs`,
`preprocess` and `formatted` delegate here): the batch's ids and weights checked as a
tfinput pipeline checks them, jax-tpu-embedding's preprocessing of the entries fed (weight
not 0) in the cheapest form that holds them, the refusal of a batch beyond the limits
(`LimitsExceeded`), and the plan's output form. `tfinput.sparsecore` is the public API."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from tfinput._src.applications.sparsecore.stacks import embedding_module
from tfinput._src.core.errors import ConfigError, DataError
from tfinput._src.core.layout import is_packed


class LimitsExceeded(DataError):
    """A batch needs more than a stack's SparseCore limits, and the plan does not drop ids.

    Attributes:
      batch_number: The batch's number in the stream.
      stats: jax-tpu-embedding's ``SparseDenseMatmulInputStats`` of the batch: what it
        needs (for `SparseCorePlan.with_limits`; a feed with an FDO client publishes
        them).
    """

    def __init__(self, message: str, *, batch_number: int = -1, stats: Any = None) -> None:
        super().__init__(message)
        self.batch_number = batch_number
        self.stats = stats

    def __reduce__(self) -> tuple[Any, ...]:  # from a worker process, with its stats
        return (type(self), (str(self),), {"batch_number": self.batch_number, "stats": self.stats})


class PlanFields(Protocol):
    """What one batch's preprocessing reads of a plan (`SparseCorePlan`'s fields)."""

    @property
    def feature_specs(self) -> Mapping[str, Any]: ...
    @property
    def local_device_count(self) -> int: ...
    @property
    def global_device_count(self) -> int: ...
    @property
    def num_sc_per_device(self) -> int: ...
    @property
    def allow_id_dropping(self) -> bool: ...
    @property
    def sharding_strategy(self) -> str: ...
    @property
    def has_leading_dimension(self) -> bool: ...
    @property
    def output(self) -> str: ...
    @property
    def minibatching(self) -> bool: ...


class BatchPreprocessor:
    """A plan's per-batch work: `SparseCorePlan.inputs`, `SparseCorePlan.preprocess` and
    `SparseCorePlan.formatted`, over the plan's fields (the plan builds one per call: it
    holds nothing else)."""

    def __init__(self, plan: PlanFields) -> None:
        self.plan = plan

    def inputs(
        self, features: Mapping[str, Any], *, batch_number: int = 0
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """As `SparseCorePlan.inputs`."""
        if is_packed(features):
            raise ConfigError(
                "SparseCore preprocessing needs per_feature batches; this one is packed "
                "(features['ids'] holds every feature's ids in one array). Build the "
                "pipeline with layout='per_feature' (PipelineConfig or "
                "Pipeline.with_layout), or unpack each batch first (tfinput.layout.unpack)"
            )
        try:
            all_ids, all_weights = features["ids"], features.get("weights", {})
            if not isinstance(all_ids, Mapping) or not isinstance(all_weights, Mapping):
                raise TypeError
        except (KeyError, TypeError, AttributeError):
            raise ConfigError(
                "SparseCore preprocessing needs tfinput's per_feature batches with "
                '{"dense", "ids", "weights"} features (layout="per_feature", '
                'multi_hot_format="dense"); got features of type '
                f"{type(features).__name__}"
            ) from None
        ids, weights = {}, {}
        for name, spec in self.plan.feature_specs.items():
            if name not in all_ids:
                raise ConfigError(
                    f"SparseCore feature {name!r} is not in the batch's ids {sorted(all_ids)}"
                )
            x = _checked_ids(name, spec, np.asarray(all_ids[name]), batch_number)
            if x.ndim == 1:
                ids[name] = x[:, None]
                weights[name] = np.ones(ids[name].shape, np.float32)
                continue
            ids[name] = x
            w = all_weights.get(name)
            if w is None:
                weights[name] = np.ones(x.shape, np.float32)
                continue
            w = np.asarray(w)
            if w.shape != x.shape:
                raise DataError(
                    f"SparseCore batch {batch_number}: feature {name!r}: weights of shape "
                    f"{w.shape} for ids of shape {x.shape}; expected one weight per id"
                )
            weights[name] = w.astype(np.float32, copy=False)
        return ids, weights

    def preprocess(
        self,
        features: Mapping[str, Any],
        batch_number: int = 0,
        *,
        all_reduce: Any = None,
        sync_number: int | None = None,
    ) -> tuple[Any, Any]:
        """As `SparseCorePlan.preprocess`."""
        embedding = embedding_module()
        ids, weights = self.inputs(features, batch_number=batch_number)
        out, stats = _preprocess_fed(
            embedding,
            ids,
            weights,
            dict(self.plan.feature_specs),
            local_device_count=self.plan.local_device_count,
            global_device_count=self.plan.global_device_count,
            num_sc_per_device=self.plan.num_sc_per_device,
            sharding_strategy=self.plan.sharding_strategy,
            has_leading_dimension=self.plan.has_leading_dimension,
            allow_id_dropping=True,
            batch_number=batch_number if sync_number is None else sync_number,
            enable_minibatching=self.plan.minibatching,
            all_reduce_interface=all_reduce,
        )
        dropped = {t: int(n) for t, n in stats.id_drop_counters.items() if n}
        if dropped and not self.plan.allow_id_dropping:
            table, count = sorted(dropped.items())[0]
            spec = self.stack_spec(table)
            others = f"; other tables too: {sorted(dropped)[1:]}" if len(dropped) > 1 else ""
            raise LimitsExceeded(
                f"SparseCore batch {batch_number}: table {table!r} has {count} id(s) beyond "
                f"max_ids_per_partition {spec.max_ids_per_partition} / "
                f"max_unique_ids_per_partition {spec.max_unique_ids_per_partition} (the "
                f"batch needed {int(np.max(stats.max_ids_per_partition[table]))} / "
                f"{int(np.max(stats.max_unique_ids_per_partition[table]))} in one "
                f"partition{others}). Raise the limits (tfinput schema sparsecore measures "
                "them from the data; SparseCorePlan.from_schema(limits=stats)), or "
                "allow_id_dropping=True to drop and count them (or let the run learn "
                "them: SparseCorePlan.with_limits, docs/sparsecore.md)",
                batch_number=batch_number,
                stats=stats,
            )
        return out, stats

    def formatted(self, preprocessed: Any) -> Any:
        """As `SparseCorePlan.formatted`."""
        if self.plan.output == "jax_tpu_embedding":
            return preprocessed
        try:
            from keras_rs.src.layers.embedding.jax.embedding_utils import ShardedCooMatrix
        except ImportError as e:
            raise ConfigError(
                "SparseCorePlan(output='keras_rs') needs keras-rs 0.4 with its JAX "
                "embedding (pip install 'tfinput[keras-rs]')"
            ) from e
        matrices = {}
        for stack, ends in preprocessed.lhs_row_pointers.items():
            # As keras-rs 0.4 (embedding_utils.stack_and_shard_samples): a partition
            # starts at the previous one's end rounded up to a multiple of 8.
            starts = np.concatenate([np.asarray([0]), ((ends[:-1] + 7) // 8) * 8])
            matrices[stack] = ShardedCooMatrix(
                shard_starts=starts,
                shard_ends=ends,
                col_ids=preprocessed.lhs_embedding_ids[stack],
                row_ids=preprocessed.lhs_sample_ids[stack],
                values=preprocessed.lhs_gains[stack],
            )
        return {"preprocessed_inputs_per_placement": {"sparsecore": {"inputs": matrices}}}

    def stack_spec(self, stack: str) -> Any:
        """The stacked table spec of stack ``stack``."""
        for f in self.plan.feature_specs.values():
            stacked = f.table_spec.stacked_table_spec
            if stacked is not None and stacked.stack_name == stack:
                return stacked
        raise KeyError(stack)


def _preprocess_fed(
    embedding: Any,
    ids: dict[str, np.ndarray],
    weights: dict[str, np.ndarray],
    specs: dict[str, Any],
    **options: Any,
) -> tuple[Any, Any]:
    """jax-tpu-embedding's preprocessing of the entries of ``ids`` (2-D, checked) whose
    weight is not 0, in the cheapest form that holds them: the dense arrays as they are
    when no entry has weight 0; sparse COO (uniform weights of 1) when every other
    weight is 1; ragged rows otherwise (dense arrays for the features without such
    entries)."""
    fed = {name: w != 0 for name, w in weights.items()}
    if all(f.all() for f in fed.values()):
        return embedding.preprocess_sparse_dense_matmul_input(ids, weights, specs, **options)
    if all((w[fed[name]] == 1).all() for name, w in weights.items()):
        indices, values, shapes = {}, {}, {}
        for name, x in ids.items():
            keep = fed[name]
            full = keep.all()
            # Row-major (rows, then columns, ascending), as jax-tpu-embedding needs them.
            indices[name] = _all_indices(x.shape) if full else np.argwhere(keep)
            values[name] = x.ravel() if full else x[keep]
            shapes[name] = np.asarray(x.shape, np.int64)
        return embedding.preprocess_sparse_dense_matmul_input_from_sparse_tensor(
            indices, values, shapes, specs, **options
        )
    ragged_ids, ragged_weights = dict(ids), dict(weights)
    for name, keep in fed.items():
        if not keep.all():
            ragged_ids[name], ragged_weights[name] = _ragged(ids[name], weights[name], keep)
    return embedding.preprocess_sparse_dense_matmul_input(
        ragged_ids, ragged_weights, specs, **options
    )


@functools.lru_cache(maxsize=64)
def _all_indices(shape: tuple[int, int]) -> np.ndarray:
    """``[rows * cols, 2]`` int64 COO indices of every entry of a ``shape`` array, in
    row-major order (read-only: shared by every batch of that shape)."""
    out = np.argwhere(np.ones(shape, bool))
    out.flags.writeable = False
    return out


def _ragged(
    ids: np.ndarray, weights: np.ndarray, keep: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``[B, max_len]`` ids and weights with only their ``keep`` entries, in
    jax-tpu-embedding's ragged form: object arrays of ``B`` rows, each a contiguous
    int32 (float32) array (a view of one new array per feature; weights all 1 share
    one array of ones per row length)."""
    counts = np.count_nonzero(keep, axis=1)
    ends = np.cumsum(counts)
    bounds = list(map(slice, (ends - counts).tolist(), ends.tolist()))
    values, gains = ids[keep], weights[keep]  # new contiguous arrays, rows in order
    rows = np.fromiter(map(values.__getitem__, bounds), object, len(bounds))
    if (gains == 1).all():
        return rows, _ones_by_length(ids.shape[1])[counts]
    return rows, np.fromiter(map(gains.__getitem__, bounds), object, len(bounds))


@functools.lru_cache(maxsize=64)
def _ones_by_length(max_len: int) -> np.ndarray:
    """``[max_len + 1]`` object array: at ``k``, a read-only float32 array of ``k``
    ones."""
    ones = np.ones(max_len, np.float32)
    ones.flags.writeable = False
    return np.fromiter((ones[:k] for k in range(max_len + 1)), object, max_len + 1)


def _checked_ids(name: str, spec: Any, x: np.ndarray, batch_number: int) -> np.ndarray:
    """Feature ``name``'s ids as int32, after the checks a tfinput pipeline makes: dense
    integer ids ``[B]`` or ``[B, max_len]``, ``B`` the rows of its feature spec, every id
    in its table."""
    where = f"SparseCore batch {batch_number}: feature {name!r}"
    if not np.issubdtype(x.dtype, np.integer) or x.ndim not in (1, 2):
        raise ConfigError(
            f"SparseCore feature {name!r}: expected dense int ids [B] or [B, max_len] "
            f"(multi_hot_format='dense'), got {x.dtype} of shape {x.shape}"
        )
    rows = spec.input_shape[0] if spec.input_shape else None
    if rows is not None and x.shape[0] != rows:
        raise DataError(
            f"{where} has {x.shape[0]} rows; the plan expects {rows} (its input_shape "
            f"{tuple(spec.input_shape)}): SparseCore shapes are static, every batch needs "
            "the same rows (drop_remainder=True, the batch size the plan was made for)"
        )
    table = spec.table_spec
    if x.size:
        lo, hi = int(x.min()), int(x.max())
        bounds = f"expected ids in [0, {table.vocabulary_size}) (table {table.name!r})"
        if lo < 0:
            raise DataError(f"{where}: negative id; {bounds}. Smallest id found: {lo}")
        if hi >= table.vocabulary_size:
            raise DataError(
                f"{where}: id out of range; {bounds}, or fold the ids into the table "
                f"first (a tfinput pipeline does with out_of_range='modulo'). Largest id "
                f"found: {hi}"
            )
    return x.astype(np.int32, copy=False)
