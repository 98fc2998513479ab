"""`SparseCorePlan`: what a SparseCore feed computes per batch (the stacks, their
buffer sizes and limits), made from a schema. `tfinput.sparsecore` is the public API."""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tfinput._src.applications.sparsecore.results import SparseCoreStats
from tfinput._src.applications.sparsecore.stacks import ALIGNMENT, embedding_module, round_up
from tfinput._src.applications.tpu import checked_limits
from tfinput._src.core.errors import ConfigError, DataError
from tfinput._src.core.layout import is_packed
from tfinput._src.core.schema import MultiHot, Schema

__all__ = ["LimitsExceeded", "SparseCorePlan"]

#: `SparseCorePlan.output`'s forms.
_OUTPUTS = ("jax_tpu_embedding", "keras_rs")


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class SparseCorePlan:
    """What `preprocess` passes to jax-tpu-embedding for every batch.

    Attributes:
      feature_specs: ``{tfinput feature name: jax_tpu_embedding FeatureSpec}``, prepared
        for training (``embedding.prepare_feature_specs_for_training``, or stacked with
        ``auto_stack_tables``; `SparseCorePlan.prepared` does the former).
      local_device_count: TPU chips fed by this host (``mesh.local_mesh.size``).
      global_device_count: TPU chips in all (``mesh.size``).
      num_sc_per_device: SparseCores per chip (4 on v5p, 2 on v6e).
      allow_id_dropping: Drop the ids beyond a table's ``max_ids_per_partition`` /
        ``max_unique_ids_per_partition`` (counted per table in `SparseCoreFeedStats`
        and logged) instead of failing.
      sharding_strategy: jax-tpu-embedding's sharding strategy (``"MOD"``).
      has_leading_dimension: Buffers shaped ``[local devices, ...]`` (for ``pmap``)
        instead of flat (for ``jit``).
      output: The form the feed yields a batch's SparseCore input in:
        ``"jax_tpu_embedding"``, the ``PreprocessedInput`` of
        ``preprocess_sparse_dense_matmul_input`` (for your own jax-tpu-embedding model),
        or ``"keras_rs"``, what keras-rs's ``DistributedEmbedding.preprocess`` returns
        (``{"preprocessed_inputs_per_placement": {"sparsecore": {"inputs": {stack:
        ShardedCooMatrix}}}}``), to pass to the layer or model as its sparse input.
        `SparseCorePlan.from_keras_rs` sets it.
      minibatching: jax-tpu-embedding's minibatching: a batch whose ids in some
        partition exceed ``max_unique_ids_per_partition`` is split (its ids hashed into
        64 buckets) into minibatches the SparseCore runs one after the other, instead of
        dropping or refusing them. The step must run the lookup with
        ``enable_minibatching=True`` too; the COO buffers hold every minibatch (their
        largest size is 64 times that without). On several hosts the hosts agree on
        each batch's split through an all-reduce (``sparsecore_feed(all_reduce=...)``,
        `AllReduce`). Not with keras-rs's output (keras-rs 0.4 does not minibatch).
    """

    feature_specs: Mapping[str, Any]
    local_device_count: int
    global_device_count: int
    num_sc_per_device: int
    allow_id_dropping: bool = False
    sharding_strategy: str = "MOD"
    has_leading_dimension: bool = False
    output: str = "jax_tpu_embedding"
    minibatching: bool = False

    def __post_init__(self) -> None:
        if not self.feature_specs:
            raise ConfigError("SparseCorePlan: feature_specs is empty")
        if self.output not in _OUTPUTS:
            raise ConfigError(
                f"SparseCorePlan.output: expected one of {', '.join(_OUTPUTS)}, got {self.output!r}"
            )
        if self.output == "keras_rs" and (
            self.sharding_strategy != "MOD" or self.has_leading_dimension
        ):
            raise ConfigError(
                "SparseCorePlan(output='keras_rs'): keras-rs preprocesses with "
                "sharding_strategy='MOD' and has_leading_dimension=False; got "
                f"{self.sharding_strategy!r} and {self.has_leading_dimension}"
            )
        if self.output == "keras_rs" and self.minibatching:
            raise ConfigError(
                "SparseCorePlan(output='keras_rs', minibatching=True): keras-rs 0.4 does not "
                "minibatch (its lookup takes one batch per step); use "
                "output='jax_tpu_embedding' with jax-tpu-embedding's own lookup"
            )
        for name in ("local_device_count", "global_device_count", "num_sc_per_device"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"SparseCorePlan.{name}: expected a positive int, got {value!r}")
        if self.local_device_count > self.global_device_count:
            raise ConfigError(
                f"SparseCorePlan: local_device_count {self.local_device_count} exceeds "
                f"global_device_count {self.global_device_count}"
            )

    @classmethod
    def from_keras_rs(cls, layer: Any, *, allow_id_dropping: bool = False) -> SparseCorePlan:
        """The plan that preprocesses every batch as ``layer.preprocess`` would, and
        yields its output form (``output="keras_rs"``): a keras-rs 0.4
        ``DistributedEmbedding`` on the JAX backend whose features are placed on
        SparseCore (on a TPU host; keras-rs refuses that placement elsewhere).

        The plan takes the layer's own feature specs (built here if the layer is not
        yet: its tables, stacking and limits) and the device and SparseCore counts of
        its mesh. The feature names of the layer (the keys of its feature configs,
        joined with "." where nested) must be the pipeline's feature names, as
        `tfinput.keras_rs_configs` makes them.

        Two differences from keras-rs, both on the safe side: keras-rs always drops
        the ids beyond a table's limits without a word; the plan raises, or with
        ``allow_id_dropping`` drops and counts them. And ``preprocess(training=True)``
        with the layer's ``update_stats`` raises the limits as batches need; the plan
        keeps the layer's limits as they are when the plan is made (set them from the
        data: `tfinput.keras_rs_configs` with ``tfinput.sparsecore_stats``'s limits).

        Raises:
          ConfigError: not a keras-rs ``DistributedEmbedding`` on the JAX backend, no
            feature placed on SparseCore, or features on ``default_device`` too.
        """
        import keras

        placements = getattr(layer, "_placement_to_path_to_feature_config", None)
        if placements is None or keras.backend.backend() != "jax":
            raise ConfigError(
                "SparseCorePlan.from_keras_rs: expected a keras_rs.layers.DistributedEmbedding "
                f"on the JAX backend, got {type(layer).__name__} on "
                f"{keras.backend.backend()!r}"
            )
        if "sparsecore" not in placements or "default_device" in placements:
            raise ConfigError(
                "SparseCorePlan.from_keras_rs: the feed preprocesses features placed on "
                f"SparseCore, and only those; this layer places its features on "
                f"{sorted(placements)}. Give every FeatureConfig's table "
                'placement="sparsecore" (default_device features need no preprocessing: '
                "feed those to a layer of their own)"
            )
        if not layer._sparsecore_built:
            layer._sparsecore_build()
        from jax_tpu_embedding.sparsecore.utils import utils as jte_utils

        mesh = layer._sparsecore_layout.device_mesh.backend_mesh
        return cls(
            feature_specs=dict(layer._config.feature_specs),
            local_device_count=int(mesh.local_mesh.devices.size),
            global_device_count=int(mesh.devices.size),
            num_sc_per_device=int(jte_utils.num_sparsecores_per_device(mesh.devices.item(0))),
            allow_id_dropping=allow_id_dropping,
            output="keras_rs",
        )

    @classmethod
    def from_schema(
        cls,
        schema: Schema,
        *,
        batch_size: int,
        local_device_count: int,
        global_device_count: int | None = None,
        num_sc_per_device: int = 4,
        limits: SparseCoreStats | Mapping[str, tuple[int, int]] | None = None,
        stacking: str = "auto",
        optimizer: Any = None,
        allow_id_dropping: bool = False,
        output: str = "jax_tpu_embedding",
        minibatching: bool = False,
    ) -> SparseCorePlan:
        """The plan for a tfinput schema in one call: a jax-tpu-embedding ``TableSpec`` per
        table and a ``FeatureSpec`` per categorical feature (single ids ``[B, 1]``,
        multi-hot ``[B, max_len]``), stacked and prepared for training.

        Args:
          schema: The schema; every categorical feature is fed.
          batch_size: Rows per batch this host feeds (what the pipeline yields).
          local_device_count, global_device_count: Chips on this host and in all
            (default: the same, one host).
          num_sc_per_device: SparseCores per chip.
          limits: ``max_ids_per_partition`` / ``max_unique_ids_per_partition``: None
            (jax-tpu-embedding's default, 256 each), a dict table name -> ``(ids,
            unique ids)``, or `tfinput.sparsecore_stats`'s result: the limits measured
            from the data, and each stack's COO buffer size from the buffer the data
            needed (both with the statistics' margin). Stacked tables share the largest
            limits of their members. Statistics must have been measured with the same
            stacking.
          stacking: ``"auto"`` (jax-tpu-embedding's ``auto_stack_tables``, keras-rs's
            default on JAX) or ``"none"`` (every table its own stack).
          optimizer: A jax-tpu-embedding optimizer spec (default: SGD); preprocessing
            does not depend on it.
          allow_id_dropping, output, minibatching: As the attributes.

        Raises:
          ConfigError: jax-tpu-embedding is missing; an unknown stacking; limits for a
            table the schema lacks; limits beyond int32, or whose COO buffer would be
            (jax-tpu-embedding would abort the process at the first batch).
        """
        embedding = embedding_module()  # a missing library is a ConfigError
        if stacking not in ("auto", "none"):
            raise ConfigError(
                f"SparseCorePlan.from_schema: stacking must be 'auto' or 'none', got {stacking!r}"
            )
        global_count = global_device_count or local_device_count
        per_table = checked_limits(limits, [t.name for t in schema.tables])
        stats = limits if isinstance(limits, SparseCoreStats) else None
        measured = [tuple(s.stack.tables) for s in stats.stacks] if stats else []
        specs = _feature_specs(schema, per_table, batch_size=batch_size, optimizer=optimizer)
        members = (
            _stack_members(specs, global_count, num_sc_per_device)
            if stacking == "auto"
            else {t.name: [t.name] for t in schema.tables}
        )
        _check_measured_stacks(measured, members, stacking)
        if stacking == "auto":
            _auto_stack(embedding, specs, members, per_table, global_count, num_sc_per_device)
        plan = cls(
            feature_specs=specs,
            local_device_count=local_device_count,
            global_device_count=global_count,
            num_sc_per_device=num_sc_per_device,
            allow_id_dropping=allow_id_dropping,
            output=output,
            minibatching=minibatching,
        ).prepared()
        if measured:
            _apply_buffer_sizes(plan, limits)
        _check_sizes_fit(plan, "SparseCorePlan.from_schema")
        return plan

    def prepared(self) -> SparseCorePlan:
        """This plan with its feature specs prepared for training in place
        (``prepare_feature_specs_for_training``: a table left unstacked becomes a stack
        of its own); a no-op for specs already stacked."""
        embedding_module().prepare_feature_specs_for_training(
            dict(self.feature_specs),
            global_device_count=self.global_device_count,
            num_sc_per_device=self.num_sc_per_device,
        )
        return self

    def with_limits(
        self, stats: Any, *, margin: float = 0.2, shrink: bool = False
    ) -> SparseCorePlan:
        """A new plan whose stacks' limits hold what ``stats`` says the batches need:
        the limits learnt from the data as training goes (this plan is unchanged).

        ``stats`` is jax-tpu-embedding's ``SparseDenseMatmulInputStats``: an FDO
        client's ``load()`` (the maxima every host published: a feed with ``fdo=``, or
        ``tfinput schema sparsecore --out fdo_stats_0_0.npz``), or a refused batch's
        `LimitsExceeded.stats`; or `tfinput.sparsecore_stats`'s result (its
        ``input_stats()``). Each stack's ``max_ids_per_partition``,
        ``max_unique_ids_per_partition`` and COO buffer size become the stats' maxima
        times ``1 + margin`` (rounded up to 8, at least 8: a stack whose batches had no
        id gets the smallest limits; the buffer at most what the limits can fill),
        through jax-tpu-embedding's ``update_preprocessing_parameters``. The limits
        only grow, unless ``shrink`` (to start a run from measured statistics: then
        they are what ``stats`` says). The buffers' shapes follow the buffer size, so a
        jitted step compiles again for the new plan's batches. Stacks the statistics
        do not name keep their limits.

        Statistics jax-tpu-embedding would abort the process on, or silently ignore,
        are refused first.

        Raises:
          ConfigError: ``stats`` is not one of those forms (a dict of limits per table
            goes to `from_schema`); names a stack the plan does not have (statistics of
            another stacking); is empty, gives a stack one limit without the other,
            counts that are negative, NaN, infinite, fractional or beyond int32,
            unique ids above ids, a buffer smaller than the ids of one partition, or no
            id in any stack; limits whose COO buffer would pass int32; ``margin`` is
            not a finite number >= 0, or ``shrink`` not a bool. The message names the
            stack, its tables and the field.
        """
        embedding = embedding_module()
        where = "SparseCorePlan.with_limits"
        if isinstance(margin, bool) or not isinstance(margin, numbers.Real):
            raise ConfigError(f"{where}: margin must be a number >= 0, got {margin!r}")
        if not math.isfinite(margin) or margin < 0:
            raise ConfigError(
                f"{where}: margin must be a finite number >= 0 (0.2: 20% above the "
                f"statistics), got {margin!r}"
            )
        if not isinstance(shrink, bool):
            raise ConfigError(f"{where}: shrink must be True or False, got {shrink!r}")
        specs = copy.deepcopy(dict(self.feature_specs))  # shared table specs stay shared
        stacked = {}
        for f in specs.values():
            stacked[f.table_spec.stacked_table_spec.stack_name] = f.table_spec.stacked_table_spec
        maxima = _stat_maxima(stats, specs, where)
        n_sc = self.num_sc_per_device

        def grown(name: str, field: str, value: int, current: int | None) -> int:
            scaled = value * (1 + margin)
            need = (
                max(ALIGNMENT, round_up(math.ceil(scaled), ALIGNMENT))
                if scaled <= _INT32_MAX  # also false for an infinite product
                else _INT32_MAX + 1
            )
            if need > _INT32_MAX:
                raise ConfigError(
                    f"{where}: {_stack_label(specs, name)}: {field} {value:,} times 1 + "
                    f"margin ({1 + margin:.4g}) is {scaled:.4g}, beyond jax-tpu-embedding's "
                    f"int32 sizes ({_INT32_MAX:,}); use a smaller margin"
                )
            return need if shrink else max(need, current or 0)

        limits: dict[str, dict[str, np.ndarray]] = {f: {} for f in _LIMIT_FIELDS}
        buffers = {}
        for name, (ids, unique, buffer) in maxima.items():
            spec = stacked[name]
            for field, value in zip(_LIMIT_FIELDS, (ids, unique), strict=True):
                limits[field][name] = np.array(grown(name, field, value, getattr(spec, field)))
            if buffer is None:
                continue
            current = spec.suggested_coo_buffer_size_per_device
            field = "required_buffer_size_per_sc"
            per_sc = grown(name, field, buffer, None if current is None else -(-current // n_sc))
            # No more than the limits allow (jax-tpu-embedding aborts on a larger one).
            most = embedding.compute_theoretical_max_coo_buffer_size(
                int(limits["max_ids_per_partition"][name]),
                self.global_device_count,
                n_sc,
                enable_minibatching=self.minibatching,
            )
            buffers[name] = np.full(n_sc, min(per_sc, most // n_sc), np.int64)
        embedding.update_preprocessing_parameters(
            specs,
            embedding.SparseDenseMatmulInputStats(**limits, required_buffer_size_per_sc=buffers),
            num_sc_per_device=self.num_sc_per_device,
        )
        plan = dataclasses.replace(self, feature_specs=specs)
        _check_sizes_fit(plan, where)
        return plan

    def inputs(
        self, features: Mapping[str, Any], *, batch_number: int = 0
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(ids, weights)`` of one batch as jax-tpu-embedding takes them: 2-D int32
        ids and float32 weights per feature of the plan, checked first as a tfinput
        pipeline checks them (jax-tpu-embedding takes any ids and any row count without
        a word): the rows its feature spec expects, ids in ``[0, vocabulary_size)`` of
        the table, weights of the ids' shape.

        A multi-hot list's padding is here as it is in the batch (id 0, weight 0);
        `preprocess` leaves every entry of weight 0 out.

        Raises:
          ConfigError: a feature of the plan is not in the batch, or the batch is not
            tfinput's per_feature layout with dense multi-hot ids (a packed batch is
            refused, naming the layout to build).
          DataError: a batch of other rows than the plan's, an id outside its table,
            weights of another shape than the ids; names the batch (``batch_number``),
            the feature, the table and what was expected.
        """
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
        for name, spec in self.feature_specs.items():
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
        """jax-tpu-embedding's ``preprocess_sparse_dense_matmul_input`` for one batch's
        features: ``(PreprocessedInput, SparseDenseMatmulInputStats)``.

        Entries of weight 0 are left out: a multi-hot list's padding (id 0, weight 0)
        takes no SparseCore capacity and is not counted against the limits (fed as it
        is, every padded row sends an id 0 entry to id 0's partition), and a row with
        no id looks nothing up (fed as it is, its padding gets the gain 0 / 0, NaN,
        under the ``mean`` and ``sqrtn`` combiners). Every other entry's gain is the
        same either way. `tfinput.sparsecore_stats` counts the same entries. Such a
        batch goes to jax-tpu-embedding as sparse COO input
        (``preprocess_sparse_dense_matmul_input_from_sparse_tensor``, built with
        vectorized numpy) where every weight left is 1, or else as ragged rows (its
        object arrays: one numpy view per row of a list with padding, built in Python).

        With ``minibatching``, ``all_reduce`` (jax-tpu-embedding's ``AllReduceInterface``)
        makes the hosts agree on the batch's split, keyed by ``sync_number`` (default:
        ``batch_number``; the same on every host, and used once per interface:
        `AllReduce` hands them out).

        It is always called with id dropping on: without it, jax-tpu-embedding 0.2 aborts
        the whole process (a C++ check) on a batch with more ids than a table's limits.
        A batch that needs no dropping gives the same buffers either way; one that
        dropped ids raises here unless ``allow_id_dropping``.

        Raises:
          ConfigError: jax-tpu-embedding is missing, or the batch is not as `inputs`
            expects.
          DataError: a batch `inputs` refuses.
          LimitsExceeded: ids beyond a table's limits, without ``allow_id_dropping``:
            names the batch, the table, the count and the limits, and carries the
            batch's statistics.
        """
        embedding = embedding_module()
        ids, weights = self.inputs(features, batch_number=batch_number)
        out, stats = _preprocess_fed(
            embedding,
            ids,
            weights,
            dict(self.feature_specs),
            local_device_count=self.local_device_count,
            global_device_count=self.global_device_count,
            num_sc_per_device=self.num_sc_per_device,
            sharding_strategy=self.sharding_strategy,
            has_leading_dimension=self.has_leading_dimension,
            allow_id_dropping=True,
            batch_number=batch_number if sync_number is None else sync_number,
            enable_minibatching=self.minibatching,
            all_reduce_interface=all_reduce,
        )
        dropped = {t: int(n) for t, n in stats.id_drop_counters.items() if n}
        if dropped and not self.allow_id_dropping:
            table, count = sorted(dropped.items())[0]
            spec = self._stack_spec(table)
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
        """``preprocessed`` (`preprocess`'s ``PreprocessedInput``) in the plan's
        ``output`` form: itself, or keras-rs's ``preprocess`` structure around the same
        arrays (keras-rs's ``stack_and_shard_samples``: each stack's buffers as a
        ``ShardedCooMatrix``, its shard starts each partition's start)."""
        if self.output == "jax_tpu_embedding":
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

    def _stack_spec(self, stack: str) -> Any:
        """The stacked table spec of stack ``stack``."""
        for f in self.feature_specs.values():
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


def _check_measured_stacks(
    measured: list[tuple[str, ...]], members: dict[str, list[str]], stacking: str
) -> None:
    """Raise `ConfigError` when limits measured for other stacks are applied."""
    if measured and sorted(map(sorted, measured)) != sorted(map(sorted, members.values())):
        raise ConfigError(
            "SparseCorePlan.from_schema: the limits were measured for the stacks "
            f"{[list(m) for m in measured]}, but stacking={stacking!r} gives "
            f"{list(members.values())}: a stack's limits cover its tables together. "
            "Measure with the same stacking (tfinput.sparsecore_stats(..., stacking="
            + ("'auto'" if stacking == "auto" else "'none'")
            + "))"
        )


#: jax-tpu-embedding keeps the limits and buffer sizes in C++ ints.
_INT32_MAX = 2**31 - 1
#: The limits of a stack, in `SparseDenseMatmulInputStats`'s field names.
_LIMIT_FIELDS = ("max_ids_per_partition", "max_unique_ids_per_partition")
#: What `SparseCorePlan.with_limits` takes.
_STATS_FORMS = (
    "jax-tpu-embedding's SparseDenseMatmulInputStats (an FDO client's load(), "
    "LimitsExceeded.stats) or tfinput.sparsecore_stats's result"
)


def _stack_tables(specs: Mapping[str, Any]) -> dict[str, list[str]]:
    """Each stack's tables, by stack name."""
    out: dict[str, list[str]] = {}
    for f in specs.values():
        tables = out.setdefault(f.table_spec.stacked_table_spec.stack_name, [])
        if f.table_spec.name not in tables:
            tables.append(f.table_spec.name)
    return out


def _stack_label(specs: Mapping[str, Any], stack: str) -> str:
    """``stack 'a_b' (tables a, b)``."""
    return f"stack {stack!r} (tables {', '.join(_stack_tables(specs).get(stack, []))})"


def _stat_maxima(
    stats: Any, specs: Mapping[str, Any], where: str
) -> dict[str, tuple[int, int, int | None]]:
    """``stack -> (max ids, max unique ids, max buffer per SparseCore or None)`` of
    ``stats``, checked: a known form naming stacks of ``specs``, both limits of each,
    whole counts from 0 to int32, unique ids at most the ids, a buffer holding the ids,
    and an id in some stack."""
    if isinstance(stats, SparseCoreStats):
        stats = stats.input_stats()
    stacks = _stack_tables(specs)
    ids_, unique_, buffer_ = (
        getattr(stats, f, None) for f in (*_LIMIT_FIELDS, "required_buffer_size_per_sc")
    )
    if not (
        isinstance(ids_, Mapping)
        and isinstance(unique_, Mapping)
        and isinstance(buffer_ or {}, Mapping)
    ):
        hint = ""
        if isinstance(stats, Mapping):
            hint = (
                "; limits per table go to SparseCorePlan.from_schema(limits={table: "
                "(max_ids, max_unique)}). This plan's stacks and their tables: "
                + "; ".join(f"{s}: {', '.join(t)}" for s, t in sorted(stacks.items()))
            )
        raise ConfigError(f"{where}: expected {_STATS_FORMS}, got {type(stats).__name__}{hint}")
    buffer_ = buffer_ or {}
    named = {*ids_, *unique_, *buffer_}
    if not named:
        raise ConfigError(
            f"{where}: the statistics are empty (they name no stack); expected the counts "
            f"of the plan's stacks {sorted(stacks)}"
        )
    if unknown := sorted(named - set(stacks), key=str):
        raise ConfigError(
            f"{where}: the statistics name stack(s) {unknown} the plan does not have (its "
            f"stacks: {sorted(stacks)}); they were taken with another stacking"
        )
    out = {}
    for name in sorted(named):
        label = _stack_label(specs, name)
        for field, given in zip(_LIMIT_FIELDS, (ids_, unique_), strict=True):
            if name not in given:
                raise ConfigError(
                    f"{where}: {label} has no {field} in the statistics; a stack needs "
                    "both max_ids_per_partition and max_unique_ids_per_partition"
                )
        ids = _stat_max(ids_[name], label, "max_ids_per_partition", where)
        unique = _stat_max(unique_[name], label, "max_unique_ids_per_partition", where)
        buffer = (
            _stat_max(buffer_[name], label, "required_buffer_size_per_sc", where)
            if name in buffer_
            else None
        )
        if unique > ids:
            raise ConfigError(
                f"{where}: {label}: max_unique_ids_per_partition {unique:,} is above "
                f"max_ids_per_partition {ids:,}; the distinct ids of a partition are "
                "among its ids"
            )
        if buffer is not None and buffer < ids:
            raise ConfigError(
                f"{where}: {label}: required_buffer_size_per_sc {buffer:,} cannot hold "
                f"the {ids:,} ids of one partition (max_ids_per_partition); a "
                "SparseCore's buffer holds the ids of all its partitions"
            )
        out[name] = (ids, unique, buffer)
    if not any(ids for ids, _, _ in out.values()):
        raise ConfigError(
            f"{where}: the statistics count no id in any stack ({', '.join(sorted(out))}): "
            "statistics of batches with no ids (or all zeros) say nothing about the limits"
        )
    return out


def _stat_max(value: Any, label: str, field: str, where: str) -> int:
    """The largest of one stack's counts (per partition or per SparseCore), checked."""
    what = f"{where}: {label}: {field}"
    try:
        a = np.asarray(value)
    except (TypeError, ValueError):  # ragged nesting, say
        raise ConfigError(f"{what}: expected whole numbers, got {value!r:.80}") from None
    if a.size == 0:
        raise ConfigError(f"{what} is empty; expected a count per partition (or one count)")
    if a.dtype.kind not in "iuf":
        raise ConfigError(f"{what}: expected whole numbers, got {a.dtype} ({value!r:.80})")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise ConfigError(f"{what}: expected whole numbers, got NaN or infinity ({value!r:.80})")
    low, top = a.min(), a.max()
    if low < 0:
        raise ConfigError(f"{what}: expected counts >= 0, got {low}")
    if a.dtype.kind == "f" and not np.array_equal(a, np.floor(a)):
        raise ConfigError(f"{what}: expected whole numbers, got fractions ({value!r:.80})")
    if top > _INT32_MAX:
        raise ConfigError(
            f"{what}: {int(top):,} is beyond jax-tpu-embedding's int32 sizes ({_INT32_MAX:,})"
        )
    return int(top)


def _check_sizes_fit(plan: SparseCorePlan, where: str) -> None:
    """Raise `ConfigError` for a stack whose limits or COO buffer size jax-tpu-embedding
    would abort the process on at the first batch: limits below 1 or beyond int32, or a
    buffer per device (the one given, or else the largest the limits can fill) of int32
    entries or more."""
    embedding = embedding_module()
    seen = set()
    for f in plan.feature_specs.values():
        spec = f.table_spec.stacked_table_spec
        if spec is None or spec.stack_name in seen:
            continue
        seen.add(spec.stack_name)
        label = _stack_label(plan.feature_specs, spec.stack_name)
        for field in _LIMIT_FIELDS:
            value = getattr(spec, field)
            if not 1 <= value <= _INT32_MAX:
                raise ConfigError(
                    f"{where}: {label}: {field} {value:,}; jax-tpu-embedding takes 1 to "
                    f"{_INT32_MAX:,}"
                )
        most = embedding.compute_theoretical_max_coo_buffer_size(
            spec.max_ids_per_partition,
            plan.global_device_count,
            plan.num_sc_per_device,
            enable_minibatching=plan.minibatching,
        )
        given = spec.suggested_coo_buffer_size_per_device
        if (given if given is not None else most) >= _INT32_MAX:
            raise ConfigError(
                f"{where}: {label}: max_ids_per_partition {spec.max_ids_per_partition:,} "
                f"makes a COO buffer of {most:,} entries per device (the limit rounded up "
                f"to 8, x {plan.num_sc_per_device} SparseCores per device x "
                f"{plan.num_sc_per_device * plan.global_device_count} SparseCores"
                + (" x 64 minibatches" if plan.minibatching else "")
                + f"), beyond jax-tpu-embedding's int32 sizes ({_INT32_MAX:,}): it would "
                "abort the process. Lower the limit, or size the buffer from the data "
                "(SparseCorePlan.from_schema(limits=tfinput.sparsecore_stats(...)))"
            )


def _auto_stack(
    embedding: Any,
    specs: dict[str, Any],
    members: dict[str, list[str]],
    per_table: dict[str, tuple[int, int]],
    global_count: int,
    num_sc_per_device: int,
) -> None:
    """jax-tpu-embedding's ``auto_stack_tables`` on ``specs``, each stack with the
    largest limits of its members."""

    def limit(index: int) -> Callable[[str, int], int]:
        def of_stack(stack: str, _: int) -> int:
            return max(per_table.get(t, (256, 256))[index] for t in members[stack])

        return of_stack

    # jax-tpu-embedding warns, for every stack of several tables, that it ignores the
    # tables' own limits and uses "default limits": the limits it uses are the ones
    # given here. That one record is dropped; any other passes.
    absl = logging.getLogger("absl")
    absl.addFilter(_not_default_limits)
    try:
        embedding.auto_stack_tables(
            specs,
            global_device_count=global_count,
            num_sc_per_device=num_sc_per_device,
            stack_to_max_ids_per_partition=limit(0),
            stack_to_max_unique_ids_per_partition=limit(1),
        )
    finally:
        absl.removeFilter(_not_default_limits)


def _not_default_limits(record: logging.LogRecord) -> bool:
    """False for jax-tpu-embedding's warning that a stack of several tables gets
    default limits (`_auto_stack` passes the stack's limits)."""
    return not str(record.msg).startswith("Stacking multiple tables together:")


def _feature_specs(
    schema: Schema, per_table: dict[str, tuple[int, int]], *, batch_size: int, optimizer: Any
) -> dict[str, Any]:
    """A jax-tpu-embedding ``FeatureSpec`` per categorical feature, over a ``TableSpec``
    per table with its limits (256 each where none is given)."""
    import jax
    from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec

    tables = {}
    for t in schema.tables:
        ids, unique = per_table.get(t.name, (256, 256))
        tables[t.name] = embedding_spec.TableSpec(
            name=t.name,
            vocabulary_size=t.vocabulary_size,
            embedding_dim=t.dim,
            initializer=jax.nn.initializers.truncated_normal(stddev=1 / t.dim**0.5),
            optimizer=optimizer or embedding_spec.SGDOptimizerSpec(),
            combiner=t.combiner,
            max_ids_per_partition=ids,
            max_unique_ids_per_partition=unique,
        )
    specs = {}
    for f in schema.categorical:
        length = f.max_len if isinstance(f, MultiHot) else 1
        specs[f.name] = embedding_spec.FeatureSpec(
            name=f.name,
            table_spec=tables[f.table],
            input_shape=(batch_size, length),
            output_shape=(batch_size, tables[f.table].embedding_dim),
        )
    return specs


def _apply_buffer_sizes(plan: SparseCorePlan, stats: SparseCoreStats) -> None:
    """Each stack's COO buffer sized from the data: the measured limits and the
    ``required_buffer_size_per_sc`` `tfinput.sparsecore_stats` observed (plus its
    margin) times the SparseCores per device, through jax-tpu-embedding's
    ``update_preprocessing_parameters`` (without it the buffer is sized for the worst
    case of the limits in every partition at once), at most what the limits can fill
    (jax-tpu-embedding aborts the process on a larger buffer: the one-entry-per-SparseCore
    rule and the margin can pass it where the limits are small)."""
    embedding = embedding_module()
    by_tables = {frozenset(s.stack.tables): s.limits(stats.margin) for s in stats.stacks}
    ids, unique, buffer = {}, {}, {}
    for f in plan.feature_specs.values():
        stacked = f.table_spec.stacked_table_spec
        tables = frozenset(
            g.table_spec.name
            for g in plan.feature_specs.values()
            if g.table_spec.stacked_table_spec.stack_name == stacked.stack_name
        )
        lim = by_tables[tables]
        ids[stacked.stack_name] = np.array(lim.max_ids_per_partition)
        unique[stacked.stack_name] = np.array(lim.max_unique_ids_per_partition)
        most = embedding.compute_theoretical_max_coo_buffer_size(
            int(lim.max_ids_per_partition),
            plan.global_device_count,
            plan.num_sc_per_device,
            enable_minibatching=plan.minibatching,
        )
        per_sc = min(lim.required_buffer_size_per_sc, most // plan.num_sc_per_device)
        buffer[stacked.stack_name] = np.full(plan.num_sc_per_device, per_sc, dtype=np.int64)
    embedding.update_preprocessing_parameters(
        dict(plan.feature_specs),
        embedding.SparseDenseMatmulInputStats(
            max_ids_per_partition=ids,
            max_unique_ids_per_partition=unique,
            required_buffer_size_per_sc=buffer,
        ),
        num_sc_per_device=plan.num_sc_per_device,
    )


def _stack_members(
    specs: Mapping[str, Any], global_count: int, num_sc: int
) -> dict[str, list[str]]:
    """Which tables ``auto_stack_tables`` puts in each stack, by stack name (a dry run on
    copies of the specs)."""
    trial = copy.deepcopy(dict(specs))
    absl = logging.getLogger("absl")  # its warnings about default limits: not the real run
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        embedding_module().auto_stack_tables(
            trial, global_device_count=global_count, num_sc_per_device=num_sc
        )
    finally:
        absl.setLevel(level)
    members: dict[str, list[str]] = {}
    for f in trial.values():
        stack = f.table_spec.setting_in_stack.stack_name
        if f.table_spec.name not in members.setdefault(stack, []):
            members[stack].append(f.table_spec.name)
    return members
