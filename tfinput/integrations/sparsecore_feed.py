"""SparseCore-ready batches: jax-tpu-embedding's input preprocessing off the training thread.

On TPUs with SparseCore (v5p, v6e and later) on JAX, every batch is first turned on the
host into SparseCore's input form: per device and per SparseCore partition, sorted and
grouped COO buffers (row pointers, embedding ids, sample ids, gains) of static sizes.
jax-tpu-embedding's ``preprocess_sparse_dense_matmul_input`` does it; keras-rs's
``DistributedEmbedding.preprocess`` calls it on JAX. Called before each step on the
training thread (keras-rs's own JAX example wraps the dataset in a Python generator), its
whole time adds to every step.

`sparsecore_feed` calls it for each batch of a tfinput pipeline on background worker
threads, up to ``prefetch`` batches ahead, and hands the batches over in order::

    plan = SparseCorePlan(feature_specs=specs, local_device_count=8,
                          global_device_count=8, num_sc_per_device=4)
    with sparsecore_feed(pipeline.build(config), plan, workers=2) as feed:
        for (dense, sparse), labels in feed:
            state = train_step(state, dense, sparse, labels)
    print(feed.stats.to_dict())   # COO buffer usage and dropped ids, per table

``sparse`` is exactly what ``preprocess_sparse_dense_matmul_input`` returns for that
batch (a ``PreprocessedInput``), called with the plan's arguments and the batch's number
in the stream (`SparseCorePlan.preprocess`); the tests compare every buffer with a serial
call, bit for bit. With keras-rs (``SparseCorePlan.from_keras_rs(layer)``), it is what
``layer.preprocess`` returns instead. ``dense`` is the batch's ``features["dense"]``.

The input: tfinput's ``per_feature`` batches with the ``dense`` multi-hot format.
``features["ids"][name]`` is ``[B]`` for a single id (fed as ``[B, 1]`` with weight 1) or
``[B, max_len]`` for a multi-hot list (padded with id 0 and weight 0, weights in
``features["weights"][name]``); the plan's ``feature_specs`` name the features it feeds.

Resuming: feed from a `tfinput.resume.InputIterator` (``pipeline.iterator(config)``)
and save ``feed.get_state()``: the position after the last batch the training loop
took, not after what the workers ran ahead to. A new feed over an iterator restored
from it (``iterator.set_state(state)``) continues with the next batch, and numbers the
batches from the iterator's position, so every batch is preprocessed as before::

    it = pipeline.iterator(config)
    it.set_state(saved)                      # when resuming
    with sparsecore_feed(it, plan) as feed:
        for step, ((dense, sparse), labels) in enumerate(feed):
            ...
            if step % 1000 == 0:
                save(feed.get_state())
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import pickle
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import numpy as np

from tfinput.errors import ConfigError, DataError, ResumeError
from tfinput.schema import MultiHot, Schema

__all__ = [
    "SparseCoreFeed",
    "SparseCoreFeedStats",
    "SparseCorePlan",
    "TableUsage",
    "sparsecore_feed",
    "sparsecore_step",
]

log = logging.getLogger("tfinput")

#: `SparseCorePlan.output`'s forms.
_OUTPUTS = ("jax_tpu_embedding", "keras_rs")

_INSTALL = (
    "pip install 'tfinput[sparsecore]' (jax-tpu-embedding; wheels for CPython 3.12+ on "
    "x86-64 Linux)"
)


def _embedding_module() -> Any:
    try:
        from jax_tpu_embedding.sparsecore.lib.nn import embedding
    except ImportError as e:
        raise ConfigError(f"SparseCore preprocessing needs jax-tpu-embedding: {_INSTALL}") from e
    return embedding


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
    """

    feature_specs: Mapping[str, Any]
    local_device_count: int
    global_device_count: int
    num_sc_per_device: int
    allow_id_dropping: bool = False
    sharding_strategy: str = "MOD"
    has_leading_dimension: bool = False
    output: str = "jax_tpu_embedding"

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
        limits: Any = None,
        stacking: str = "auto",
        optimizer: Any = None,
        allow_id_dropping: bool = False,
        output: str = "jax_tpu_embedding",
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
          allow_id_dropping, output: As the attributes.

        Raises:
          ConfigError: jax-tpu-embedding is missing; an unknown stacking; limits for a
            table the schema lacks.
        """
        embedding = _embedding_module()  # a missing library is a ConfigError
        import jax
        from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec

        if stacking not in ("auto", "none"):
            raise ConfigError(
                f"SparseCorePlan.from_schema: stacking must be 'auto' or 'none', got {stacking!r}"
            )
        global_count = global_device_count or local_device_count
        per_table = _limits_by_table(limits, [t.name for t in schema.tables])
        measured = [tuple(s.stack.tables) for s in getattr(limits, "stacks", ())]
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
        members = (
            _stack_members(specs, global_count, num_sc_per_device)
            if stacking == "auto"
            else {t: [t] for t in tables}
        )
        if measured and sorted(map(sorted, measured)) != sorted(map(sorted, members.values())):
            raise ConfigError(
                "SparseCorePlan.from_schema: the limits were measured for the stacks "
                f"{[list(m) for m in measured]}, but stacking={stacking!r} gives "
                f"{list(members.values())}: a stack's limits cover its tables together. "
                "Measure with the same stacking (tfinput.sparsecore_stats(..., stacking="
                + ("'auto'" if stacking == "auto" else "'none'")
                + "))"
            )
        if stacking == "auto":

            def limit(index: int) -> Callable[[str, int], int]:
                def of_stack(stack: str, _: int) -> int:
                    return max(per_table.get(t, (256, 256))[index] for t in members[stack])

                return of_stack

            embedding.auto_stack_tables(
                specs,
                global_device_count=global_count,
                num_sc_per_device=num_sc_per_device,
                stack_to_max_ids_per_partition=limit(0),
                stack_to_max_unique_ids_per_partition=limit(1),
            )
        plan = cls(
            feature_specs=specs,
            local_device_count=local_device_count,
            global_device_count=global_count,
            num_sc_per_device=num_sc_per_device,
            allow_id_dropping=allow_id_dropping,
            output=output,
        ).prepared()
        if measured:
            _apply_buffer_sizes(plan, limits)
        return plan

    def prepared(self) -> SparseCorePlan:
        """This plan with its feature specs prepared for training in place
        (``prepare_feature_specs_for_training``: a table left unstacked becomes a stack
        of its own); a no-op for specs already stacked."""
        _embedding_module().prepare_feature_specs_for_training(
            dict(self.feature_specs),
            global_device_count=self.global_device_count,
            num_sc_per_device=self.num_sc_per_device,
        )
        return self

    def inputs(self, features: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(ids, weights)`` of one batch as jax-tpu-embedding takes them: 2-D int32
        ids and float32 weights per feature of the plan.

        Raises:
          ConfigError: a feature of the plan is not in the batch, or the batch is not
            tfinput's per_feature layout with dense multi-hot ids.
        """
        try:
            all_ids, all_weights = features["ids"], features.get("weights", {})
        except (KeyError, TypeError):
            raise ConfigError(
                "SparseCore preprocessing needs tfinput's per_feature batches with "
                '{"dense", "ids", "weights"} features (layout="per_feature", '
                'multi_hot_format="dense"); got features of type '
                f"{type(features).__name__}"
            ) from None
        ids, weights = {}, {}
        for name in self.feature_specs:
            if name not in all_ids:
                raise ConfigError(
                    f"SparseCore feature {name!r} is not in the batch's ids {sorted(all_ids)}"
                )
            x = np.asarray(all_ids[name])
            if x.dtype == object or x.ndim not in (1, 2):
                raise ConfigError(
                    f"SparseCore feature {name!r}: expected dense int ids [B] or [B, max_len] "
                    f"(multi_hot_format='dense'), got {x.dtype} of shape {x.shape}"
                )
            x = x.astype(np.int32, copy=False)
            if x.ndim == 1:
                ids[name] = x[:, None]
                weights[name] = np.ones(ids[name].shape, np.float32)
            else:
                ids[name] = x
                w = all_weights.get(name)
                weights[name] = (
                    np.ones(x.shape, np.float32)
                    if w is None
                    else np.asarray(w).astype(np.float32, copy=False)
                )
        return ids, weights

    def preprocess(self, features: Mapping[str, Any], batch_number: int = 0) -> tuple[Any, Any]:
        """jax-tpu-embedding's ``preprocess_sparse_dense_matmul_input`` for one batch's
        features: ``(PreprocessedInput, SparseDenseMatmulInputStats)``.

        It is always called with id dropping on: without it, jax-tpu-embedding 0.2 aborts
        the whole process (a C++ check) on a batch with more ids than a table's limits.
        A batch that needs no dropping gives the same buffers either way; one that
        dropped ids raises here unless ``allow_id_dropping``.

        Raises:
          ConfigError: jax-tpu-embedding is missing, or the batch is not as `inputs`
            expects.
          DataError: ids beyond a table's limits, without ``allow_id_dropping``: names
            the batch, the table, the count and the limits.
        """
        embedding = _embedding_module()
        ids, weights = self.inputs(features)
        out, stats = embedding.preprocess_sparse_dense_matmul_input(
            ids,
            weights,
            dict(self.feature_specs),
            local_device_count=self.local_device_count,
            global_device_count=self.global_device_count,
            num_sc_per_device=self.num_sc_per_device,
            sharding_strategy=self.sharding_strategy,
            has_leading_dimension=self.has_leading_dimension,
            allow_id_dropping=True,
            batch_number=batch_number,
        )
        dropped = {t: int(n) for t, n in stats.id_drop_counters.items() if n}
        if dropped and not self.allow_id_dropping:
            table, count = sorted(dropped.items())[0]
            spec = self._stack_spec(table)
            others = f"; other tables too: {sorted(dropped)[1:]}" if len(dropped) > 1 else ""
            raise DataError(
                f"SparseCore batch {batch_number}: table {table!r} has {count} id(s) beyond "
                f"max_ids_per_partition {spec.max_ids_per_partition} / "
                f"max_unique_ids_per_partition {spec.max_unique_ids_per_partition} (the "
                f"batch needed {int(np.max(stats.max_ids_per_partition[table]))} / "
                f"{int(np.max(stats.max_unique_ids_per_partition[table]))} in one "
                f"partition{others}). Raise the limits (tfinput schema sparsecore measures "
                "them from the data; SparseCorePlan.from_schema(limits=stats)), or "
                "allow_id_dropping=True to drop and count them"
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


def _limits_by_table(limits: Any, tables: list[str]) -> dict[str, tuple[int, int]]:
    if limits is None:
        return {}
    if hasattr(limits, "table_limits"):
        limits = limits.table_limits()
    unknown = set(limits) - set(tables)
    if unknown:
        raise ConfigError(
            f"SparseCore limits name table(s) {sorted(unknown)} not in the schema {tables}"
        )
    return {t: (int(v[0]), int(v[1])) for t, v in limits.items()}


def _apply_buffer_sizes(plan: SparseCorePlan, stats: Any) -> None:
    """Each stack's COO buffer sized from the data: the measured limits and the
    ``required_buffer_size_per_sc`` `tfinput.sparsecore_stats` observed (plus its
    margin) times the SparseCores per device, through jax-tpu-embedding's
    ``update_preprocessing_parameters`` (without it the buffer is sized for the worst
    case of the limits in every partition at once)."""
    embedding = _embedding_module()
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
        buffer[stacked.stack_name] = np.full(
            plan.num_sc_per_device, lim.required_buffer_size_per_sc, dtype=np.int64
        )
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
        _embedding_module().auto_stack_tables(
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


@dataclasses.dataclass
class TableUsage:
    """One stacked table's COO buffers over the batches fed so far.

    Attributes:
      batches: Batches preprocessed.
      buffer_entries: Entries of the table's static COO buffers, summed over batches.
      used_entries: Entries that carry an id (the rest is padding).
      dropped_ids: Ids dropped because a partition overflowed (``allow_id_dropping``).
      max_ids_per_partition: The most ids one partition needed in one batch.
      max_unique_ids_per_partition: The most distinct ids one partition needed.
    """

    batches: int = 0
    buffer_entries: int = 0
    used_entries: int = 0
    dropped_ids: int = 0
    max_ids_per_partition: int = 0
    max_unique_ids_per_partition: int = 0

    @property
    def usage(self) -> float:
        """The share of the buffers that carried ids."""
        return self.used_entries / self.buffer_entries if self.buffer_entries else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "usage": round(self.usage, 4)}


@dataclasses.dataclass
class SparseCoreFeedStats:
    """What a `SparseCoreFeed` did.

    Attributes:
      batches: Batches handed to the training loop.
      tables: `TableUsage` per stacked table.
      preprocess_seconds: Wall time of the preprocessing calls, summed over workers.
      wait_seconds: Time the training loop waited in ``next()`` for a ready batch.
    """

    batches: int = 0
    tables: dict[str, TableUsage] = dataclasses.field(default_factory=dict)
    preprocess_seconds: float = 0.0
    wait_seconds: float = 0.0

    @property
    def dropped_ids(self) -> int:
        """Ids dropped over every table."""
        return sum(t.dropped_ids for t in self.tables.values())

    def add(self, other: SparseCoreFeedStats) -> None:
        """Add another feed's statistics to these (maxima: the larger)."""
        self.batches += other.batches
        self.preprocess_seconds += other.preprocess_seconds
        self.wait_seconds += other.wait_seconds
        for name, t in other.tables.items():
            mine = self.tables.setdefault(name, TableUsage())
            for field in ("batches", "buffer_entries", "used_entries", "dropped_ids"):
                setattr(mine, field, getattr(mine, field) + getattr(t, field))
            for field in ("max_ids_per_partition", "max_unique_ids_per_partition"):
                setattr(mine, field, max(getattr(mine, field), getattr(t, field)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "preprocess_seconds": round(self.preprocess_seconds, 4),
            "wait_seconds": round(self.wait_seconds, 4),
            "dropped_ids": self.dropped_ids,
            "tables": {name: t.to_dict() for name, t in sorted(self.tables.items())},
        }


def _used_entries(row_pointers: np.ndarray, buffer_size: int, partitions: int) -> int:
    """Ids in one table's flat COO buffer: per SparseCore, its partitions' row pointers
    are running ends, and each partition starts at the previous end rounded up to 8."""
    ends = np.asarray(row_pointers, dtype=np.int64).reshape(-1)
    if ends.size == 0:
        return 0
    per_sc = ends.reshape(-1, partitions) if ends.size % partitions == 0 else ends[None, :]
    starts = np.zeros_like(per_sc)
    starts[:, 1:] = -(-per_sc[:, :-1] // 8) * 8  # the previous end rounded up to 8
    return min(int(np.clip(per_sc - starts, 0, None).sum()), buffer_size)


class _Result:
    """A batch's preprocessed input (``item``) with its buffer usage and statistics, or
    the error preprocessing it raised. Returned by worker processes too (pickled)."""

    __slots__ = ("error", "item", "number", "seconds", "stats")

    def __init__(self, number: int, *, error: BaseException | None = None) -> None:
        self.number = number
        self.item: Any = None
        self.stats: Any = None
        self.error = error
        self.seconds = 0.0


#: The plan of a worker process (`_start_worker`).
_WORKER_PLAN: SparseCorePlan | None = None


def _shippable(plan: SparseCorePlan) -> bytes:
    """The plan pickled for worker processes. The table specs' initializers (closures
    that do not pickle, and that preprocessing never reads) are left out of a copy."""
    specs = copy.deepcopy(dict(plan.feature_specs))  # shared table specs stay shared
    for f in specs.values():
        # jax-tpu-embedding refuses setattr on a stacked table spec; the copy is ours.
        object.__setattr__(f.table_spec, "initializer", None)
    return pickle.dumps(dataclasses.replace(plan, feature_specs=specs))


def _start_worker(plan: bytes) -> None:
    global _WORKER_PLAN
    _WORKER_PLAN = pickle.loads(plan)


def _job(
    plan: SparseCorePlan | None, number: int, features: Mapping[str, Any], in_process: bool
) -> _Result:
    """Preprocess batch ``number`` (with ``plan``, or the worker process's own): the
    input, its buffer usage per table and jax-tpu-embedding's statistics."""
    plan = plan if plan is not None else _WORKER_PLAN
    assert plan is not None
    result = _Result(number)
    start = time.perf_counter()
    try:
        sparse, stats = plan.preprocess(features, batch_number=number)
        partitions = plan.num_sc_per_device * plan.global_device_count
        used = {
            table: (
                int(np.size(ids)),
                _used_entries(sparse.lhs_row_pointers[table], int(np.size(ids)), partitions),
            )
            for table, ids in sparse.lhs_embedding_ids.items()
        }
        result.item, result.stats = plan.formatted(sparse), (used, stats)
    except BaseException as e:  # raised in next(), in order
        # From a process, as tfinput's own error: any exception pickles as that.
        result.error = _explain(e, number) if in_process else e
    result.seconds = time.perf_counter() - start
    return result


_END = object()


class SparseCoreFeed(Iterator[Any]):
    """Batches with their SparseCore preprocessing done ahead on worker threads, in
    order (`sparsecore_feed`). Iterate it, then `close` it (or use it as a context
    manager); `stats` says what it did."""

    def __init__(
        self,
        batches: Iterable[Any],
        plan: SparseCorePlan,
        *,
        workers: int,
        prefetch: int,
        processes: bool = False,
        warned: set[str] | None = None,
    ) -> None:
        for name, value, least in (("workers", workers, 0), ("prefetch", prefetch, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(
                    f"sparsecore_feed: {name} must be an int >= {least}, got {value!r}"
                )
        _embedding_module()  # a missing library fails here, not in a worker
        self.plan = plan
        self.stats = SparseCoreFeedStats()
        # An InputIterator (tfinput.resume): batches are numbered from its position, and
        # get_state() saves the position after the last batch the training loop took.
        self._iterator = batches if callable(getattr(batches, "state_at", None)) else None
        self._start = int(getattr(self._iterator, "position", 0))
        self._taken = 0  # batches next() returned since _start
        self._workers, self._prefetch = workers, prefetch
        if workers and self._iterator is not None and self._iterator.keep < prefetch + 1:
            raise ConfigError(
                f"sparsecore_feed: the iterator keeps {self._iterator.keep} batch(es), but "
                f"the feed may hold {prefetch + 1} it delivered and the training loop has "
                f"not taken (prefetch {prefetch} + 1): get_state() needs them. Make the "
                f"iterator with keep >= {prefetch + 1} (pipeline.iterator(config, keep=...))"
            )
        self._batches = batches
        # Tables whose drops were logged (shared by the feeds of one sparsecore_step).
        self._warned: set[str] = warned if warned is not None else set()
        self._serial = workers == 0  # each batch on the training thread, when asked
        self._processes = bool(processes) and not self._serial
        self._begin()

    def _begin(self) -> None:
        """Start a generation: the source read from its current position, a fresh queue
        and stop flag (a feeder of an earlier generation only sees its own), workers."""
        self._source = _numpy_batches(self._batches)
        self._stop = threading.Event()
        self._ready: queue.Queue[Any] = queue.Queue(maxsize=self._prefetch)
        if self._serial:
            return
        self._pool: Executor
        if self._processes:
            import multiprocessing

            # spawn: the training process has TensorFlow's and JAX's threads running, which
            # a fork would copy mid-state. A worker imports numpy and jax-tpu-embedding only.
            self._pool = ProcessPoolExecutor(
                self._workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(_shippable(self.plan),),
            )
        else:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="tfinput-sparsecore")
        self._feeder = threading.Thread(
            target=self._feed,
            args=(self._source, self._ready, self._stop, self._pool, self._start),
            name="tfinput-sparsecore-feeder",
            daemon=True,
        )
        self._feeder.start()

    # ------------------------------------------------------------- the feeder
    def _feed(
        self,
        source: Iterator[Any],
        ready: queue.Queue[Any],
        stop: threading.Event,
        pool: Executor,
        start: int,
    ) -> None:
        """Reads the batches and hands each to a worker; the bounded queue of futures
        keeps at most ``prefetch`` batches ahead of the training loop."""

        def put(item: Any) -> bool:
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        try:
            for number, batch in enumerate(source, start=start):
                if stop.is_set() or not put((batch, self._submit(pool, number, batch))):
                    return
        except BaseException as e:  # the source's own error, raised in next()
            put(e)
            return
        put(_END)

    def _submit(self, pool: Executor, number: int, batch: Any) -> Future[_Result]:
        """Batch ``number`` handed to a worker: the whole features to a thread, only the
        ids and weights (what preprocessing reads) to a process."""
        try:
            features, _labels = batch
            if self._processes:
                features = {"ids": features["ids"], "weights": features.get("weights", {})}
        except (TypeError, ValueError, KeyError) as e:
            done: Future[_Result] = Future()
            done.set_result(_Result(number, error=e))  # raised in next(), in order
            return done
        plan = None if self._processes else self.plan
        return pool.submit(_job, plan, number, features, self._processes)

    @staticmethod
    def _item(batch: Any, result: _Result) -> Any:
        features, labels = batch
        return (features["dense"], result.item), labels

    # ------------------------------------------------------------- the consumer
    def __iter__(self) -> SparseCoreFeed:
        return self

    def __next__(self) -> Any:
        start = time.perf_counter()
        if self._serial:
            if self._stop.is_set():
                raise StopIteration
            batch = next(self._source)  # the source's errors and its end, as they are
            number = self.position
            try:
                features, _labels = batch
            except (TypeError, ValueError) as e:
                raise _explain(e, number) from e
            result = _job(self.plan, number, features, False)
            self.stats.wait_seconds += time.perf_counter() - start
            if result.error is not None:
                raise _explain(result.error, result.number) from result.error
            self._record(result)
            return self._item(batch, result)
        item = self._ready.get()
        if item is _END:
            self._ready.put(_END)  # later calls end too
            raise StopIteration
        if isinstance(item, BaseException):
            self.close()
            raise item
        batch, future = item
        try:
            result = future.result()
        except BaseException:  # a worker process died (BrokenProcessPool): as it is
            self.close()
            raise
        self.stats.wait_seconds += time.perf_counter() - start
        if result.error is not None:
            self.close()
            raise _explain(result.error, result.number) from result.error
        self._record(result)
        return self._item(batch, result)

    def _record(self, result: _Result) -> None:
        used, stats = result.stats
        self._taken += 1
        self.stats.batches += 1
        self.stats.preprocess_seconds += result.seconds
        for table, (size, entries) in used.items():
            usage = self.stats.tables.setdefault(table, TableUsage())
            usage.batches += 1
            usage.buffer_entries += size
            usage.used_entries += entries
            dropped = int(stats.id_drop_counters.get(table, 0))
            usage.dropped_ids += dropped
            usage.max_ids_per_partition = max(
                usage.max_ids_per_partition, int(np.max(stats.max_ids_per_partition[table]))
            )
            usage.max_unique_ids_per_partition = max(
                usage.max_unique_ids_per_partition,
                int(np.max(stats.max_unique_ids_per_partition[table])),
            )
            if dropped and table not in self._warned:
                self._warned.add(table)
                log.warning(
                    "tfinput: SparseCore table %s: %d id(s) dropped in batch %d (beyond "
                    "max_ids_per_partition / max_unique_ids_per_partition; this batch "
                    "needed %d / %d); every drop is counted in the feed's stats. Raise "
                    "the limits (tfinput schema sparsecore measures them)",
                    table, dropped, result.number,
                    int(np.max(stats.max_ids_per_partition[table])),
                    int(np.max(stats.max_unique_ids_per_partition[table])),
                )  # fmt: skip

    @property
    def position(self) -> int:
        """Batches taken by the training loop, counted from the start of the data when
        the feed reads an `InputIterator` (from the feed's start otherwise)."""
        return self._start + self._taken

    @property
    def keep(self) -> int | None:
        """Batches taken from the feed that `get_state` can still hand back as not
        consumed (``unconsumed``): the iterator's ``keep`` less what the feed itself
        may hold. None without an `InputIterator`."""
        if self._iterator is None:
            return None
        return self._iterator.keep - (self._prefetch + 1 if self._workers else 0)

    def _resumable(self, method: str) -> Any:
        if self._iterator is None:
            raise ResumeError(
                f"sparsecore_feed.{method}(): the feed reads a plain iterable; feed it "
                "pipeline.iterator(config) (a tfinput.resume.InputIterator) to save and "
                "restore its position"
            )
        return self._iterator

    def get_state(self, *, unconsumed: int = 0) -> bytes:
        """The input position after the last batch the training loop took (the batches
        the workers ran ahead to are read again after a restore): the feed's
        `InputIterator`'s state at `position`.

        Args:
          unconsumed: The last ``unconsumed`` batches taken from the feed were not
            trained on (a device prefetcher holds them: `tfinput.device_prefetch.to_jax`
            over the feed saves through this); they come again after a restore.

        Raises:
          ResumeError: the feed does not read an `InputIterator`; ``unconsumed`` is not
            between 0 and the batches taken, or more than `keep`.
        """
        iterator = self._resumable("get_state")
        if isinstance(unconsumed, bool) or not isinstance(unconsumed, int) or unconsumed < 0:
            raise ResumeError(f"unconsumed must be an integer >= 0, got {unconsumed!r}")
        return iterator.state_at(self.position - unconsumed)

    def set_state(self, state: bytes) -> None:
        """Continue from ``state`` (`get_state` of a feed or an `InputIterator` of the
        same pipeline): stops the workers, drops what they ran ahead to, restores the
        iterator and starts again from its position; batches keep their numbers.

        Raises:
          ResumeError: the feed does not read an `InputIterator`, or it refuses the state.
        """
        iterator = self._resumable("set_state")
        self.close()
        iterator.set_state(state)
        self._start, self._taken = iterator.position, 0
        self._begin()

    def close(self) -> None:
        """Stop the feeder and the workers (batches not yet taken are discarded)."""
        self._stop.set()
        if self._serial:
            return
        while True:
            try:
                self._ready.get_nowait()
            except queue.Empty:
                break
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> SparseCoreFeed:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _explain(error: BaseException, number: int) -> BaseException:
    """A preprocessing error with the batch it happened in (tfinput's own errors name
    it already, or get it prefixed)."""
    if isinstance(error, DataError):
        return error
    if isinstance(error, ConfigError):
        return ConfigError(f"batch {number}: {error}")
    return DataError(
        f"SparseCore preprocessing of batch {number} failed: {type(error).__name__}: {error}"
    )


def _numpy_batches(batches: Iterable[Any]) -> Iterator[Any]:
    """The batches as numpy: a `tf.data.Dataset` through ``as_numpy_iterator``, other
    iterables (an `InputIterator` yields TensorFlow tensors) converted batch by batch."""
    as_numpy = getattr(batches, "as_numpy_iterator", None)
    if callable(as_numpy):
        return iter(as_numpy())
    return (_to_numpy(batch) for batch in batches)


def _to_numpy(tree: Any) -> Any:
    """Tensors (anything with ``.numpy()``) in dicts, tuples and lists as numpy."""
    if isinstance(tree, Mapping):
        return {k: _to_numpy(v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_to_numpy(v) for v in tree)
    to_numpy = getattr(tree, "numpy", None)
    return to_numpy() if callable(to_numpy) else tree


def sparsecore_feed(
    batches: Iterable[Any],
    plan: SparseCorePlan,
    *,
    workers: int = 2,
    prefetch: int | None = None,
    processes: bool = False,
) -> SparseCoreFeed:
    """Feed ``batches`` with their SparseCore preprocessing done ahead, in order.

    Args:
      batches: ``(features, labels)`` batches: a tfinput pipeline's built dataset, its
        `InputIterator` (``pipeline.iterator(config)``: the feed can then save its
        position, `SparseCoreFeed.get_state`), or any iterable of batches of the same
        structure.
      plan: The `SparseCorePlan` (feature specs, device and SparseCore counts).
      workers: Threads preprocessing batches at once; 0 preprocesses each batch on the
        calling thread in ``next()`` (keras-rs's generator pattern: the baseline).
      prefetch: Preprocessed batches held ready (default: ``2 * workers``); bounds the
        memory and how far the feed runs ahead of training.
      processes: Workers are processes (started with ``spawn``; each imports
        jax-tpu-embedding, a few seconds, and gets the ids and weights of its batches
        pickled) instead of threads. jax-tpu-embedding serialises concurrent calls in one
        process, so threads beyond one do not add throughput; processes do
        (benchmarks/RESULTS.md, "SparseCore preprocessing"). Worth it on a many-core host
        whose steps need more than one process preprocesses.

    Returns:
      A `SparseCoreFeed` of ``((dense, preprocessed), labels)``.

    Raises:
      ConfigError: jax-tpu-embedding is missing; a bad worker or prefetch count; an
        `InputIterator` that keeps fewer than ``prefetch + 1`` batches.
    """
    return SparseCoreFeed(
        batches,
        plan,
        workers=workers,
        prefetch=prefetch if prefetch else max(1, 2 * workers),
        processes=processes,
    )


def sparsecore_step(plan: SparseCorePlan, step: Any = None, *, processes: bool = False) -> Any:
    """A step that feeds SparseCore: each batch preprocessed by `sparsecore_feed` (with
    ``config.sparsecore_workers`` and ``config.sparsecore_prefetch``), then ``step``
    run on ``((dense, preprocessed), labels)``. For `tfinput.bench` and `tuners.tune`:
    the tuner searches the two knobs with the tf.data ones, and its baselines
    preprocess on the training thread (``sparsecore_workers=0``).

    Args:
      plan: The `SparseCorePlan`.
      step: A `tfinput.steps.Step` taking the preprocessed batches (for example
        `tfinput.steps.simulated_step`: the device time of a TPU step, or
        `tfinput.steps.function_step` around your own); None measures the input side
        alone (the preprocessing included).
      processes: The feed's workers are processes (`sparsecore_feed`).

    Returns:
      A `tfinput.steps.Step` with ``feeds_sparsecore``. Its ``describe()["sparsecore"]``
      holds the feed statistics summed over every measurement (`SparseCoreFeedStats`:
      ids dropped and COO buffer usage per stacked table), which `tuners.tune` stores
      in its result's ``step``.

    Raises:
      ConfigError: jax-tpu-embedding is missing; ``step`` owns its training loop
        (``model.fit``), so it cannot take the preprocessed batches from the feed.
    """
    from tfinput.steps._feed import loop_windows
    from tfinput.steps.base import Step

    _embedding_module()
    if step is not None and getattr(step, "owns_loop", False):
        raise ConfigError(
            f"sparsecore_step: step {step.name!r} runs its own loop ({step.kind}); pass a "
            "step called on each batch (simulated_step, function_step)"
        )
    run = step.fn if step is not None else (lambda batch: None)
    totals = SparseCoreFeedStats()
    summary: dict[str, Any] = totals.to_dict()  # shared by every prepared step, updated
    warned: set[str] = set()  # a table's drops are logged once, not once per measurement

    def account(stats: SparseCoreFeedStats) -> None:
        totals.add(stats)
        summary.clear()
        summary.update(totals.to_dict())

    def make(workers: int, prefetch: int) -> Any:
        def feed(source: Any) -> Iterator[Any]:
            fed = SparseCoreFeed(
                source,
                plan,
                workers=workers,
                prefetch=prefetch or max(1, 2 * workers),
                processes=processes,
                warned=warned,
            )
            try:
                yield from fed
            finally:
                fed.close()
                account(fed.stats)

        def one(batch: Any) -> Any:
            # One batch: preprocessed on this thread (no pool to start and stop for it).
            with SparseCoreFeed([batch], plan, workers=0, prefetch=1, warned=warned) as fed:
                item = next(fed)
            account(fed.stats)
            return run(item)

        inner = f" + {step.name}" if step is not None else " (input only)"
        return Step(
            kind=step.kind if step is not None else "input_only",
            name=f"SparseCore preprocessing, {workers} worker(s){inner}",
            fn=one,
            device_time_s=getattr(step, "device_time_s", None),
            backend=getattr(step, "backend", None),
            feeds_sparsecore=True,
            prepare_fn=lambda config: make(config.sparsecore_workers, config.sparsecore_prefetch),
            run_windows=lambda source, **kw: loop_windows(
                source, feed=feed, run=run, sync=None, **kw
            ),
            details={
                "sparsecore_workers": workers,
                "sparsecore_prefetch": prefetch or max(1, 2 * workers),
                "sparsecore": summary,
            },
        )

    return make(2, 0)
