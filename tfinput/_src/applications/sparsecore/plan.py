"""`SparseCorePlan`: what a SparseCore feed computes per batch (the stacks, their
buffer sizes and limits), made from a schema or a keras-rs layer, checked, and given
limits learnt from the data. Its per-batch work is `_batches.BatchPreprocessor`'s, the
limits from statistics `_limits`'. `tfinput.sparsecore` is the public API."""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from tfinput._src.applications.sparsecore._batches import BatchPreprocessor
from tfinput._src.applications.sparsecore._limits import (
    apply_buffer_sizes,
    check_sizes_fit,
    grown_specs,
)
from tfinput._src.applications.sparsecore.results import SparseCoreStats
from tfinput._src.applications.sparsecore.stacks import embedding_module
from tfinput._src.applications.tpu import checked_limits
from tfinput._src.core.errors import ConfigError
from tfinput._src.core.schema import MultiHot, Schema

#: `SparseCorePlan.output`'s forms.
_OUTPUTS = ("jax_tpu_embedding", "keras_rs")


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
            apply_buffer_sizes(plan, limits)
        check_sizes_fit(plan, "SparseCorePlan.from_schema")
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
        embedding_module()  # a missing library is a ConfigError first
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
        specs = grown_specs(self, stats, margin=margin, shrink=shrink, where=where)
        plan = dataclasses.replace(self, feature_specs=specs)
        check_sizes_fit(plan, where)
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
        return BatchPreprocessor(self).inputs(features, batch_number=batch_number)

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
        return BatchPreprocessor(self).preprocess(
            features, batch_number, all_reduce=all_reduce, sync_number=sync_number
        )

    def formatted(self, preprocessed: Any) -> Any:
        """``preprocessed`` (`preprocess`'s ``PreprocessedInput``) in the plan's
        ``output`` form: itself, or keras-rs's ``preprocess`` structure around the same
        arrays (keras-rs's ``stack_and_shard_samples``: each stack's buffers as a
        ``ShardedCooMatrix``, its shard starts each partition's start)."""
        return BatchPreprocessor(self).formatted(preprocessed)


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
