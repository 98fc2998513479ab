"""TPU embedding glue: `TableConfig` / `FeatureConfig` from a schema, and where to
place each table.

    tables, features = tfinput.embedding_configs(schema, per_replica_batch_size=512)
    embedding = tf.tpu.experimental.embedding.TPUEmbedding(features, optimizer)

Feeding the TPU embedding layer (on the host, never fetched to the device)::

    pipeline = tfinput.tfrecord(files, schema).with_multi_hot_format("sparse")
    dist = strategy.distribute_datasets_from_function(
        lambda ctx: pipeline.build(config, ctx),
        options=tf.distribute.InputOptions(experimental_fetch_to_device=False))
    features, labels = next(iter(dist))
    embedding.enqueue(features["ids"], weights=tfinput.tpu.enqueue_weights(schema, features))

Single-id features are dense ``[B]`` int32; multi-hot features are SparseTensor (or
RaggedTensor) int32 with their weights. The TPU casts ids to int32: tfinput's tables
are capped at 2**31 - 1 rows, so every id fits.

Keras 3 (keras-rs ``DistributedEmbedding``, TensorFlow or JAX backend)::

    tables, features = tfinput.tpu.keras_rs_configs(schema, per_replica_batch_size=512,
                                                     replicas=strategy.num_replicas_in_sync)
    embedding = keras_rs.layers.DistributedEmbedding(features)
    ids = batch["ids"]
    activations = embedding(ids, {name: batch["weights"].get(name) for name in ids})
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tfinput._src.core.errors import ConfigError
from tfinput._src.core.schema import MultiHot, Schema

if TYPE_CHECKING:
    from collections.abc import Callable

    import keras
    import keras_rs
    import tensorflow as tf

    _emb = tf.tpu.experimental.embedding
    _TpuOptimizer = _emb.SGD | _emb.Adagrad | _emb.Adam | _emb.FTRL

#: Tables up to this many rows are better replicated on every core than sharded
#: (TFRS ``PartialTPUEmbedding`` uses the same idea with ``size_threshold``).
MIRROR_THRESHOLD = 10_000
#: Above this many rows the TPU embedding (SparseCore) path clearly pays off.
SHARD_THRESHOLD = 100_000
#: The keras-rs ``TableConfig.placement`` each `Placement.decision` maps to.
KERAS_RS_PLACEMENT = {"mirror": "default_device", "shard": "sparsecore"}
#: Optimizers keras-rs accepts for a table, by name (TensorFlow and JAX backends).
_KERAS_RS_OPTIMIZERS = ("sgd", "adagrad", "adam", "ftrl")
_KERAS_RS_PLACEMENTS = ("auto", "default_device", "sparsecore")
_INSTALL_HINT = "pip install 'tfinput[keras-rs]' (keras-rs needs Python >= 3.11 and Keras 3)"


def embedding_configs(
    schema: Schema,
    *,
    per_replica_batch_size: int,
    initializer: Callable[..., tf.Tensor] | None = None,
    optimizer: _TpuOptimizer | None = None,
) -> tuple[dict[str, _emb.TableConfig], dict[str, _emb.FeatureConfig]]:
    """Build `tf.tpu.experimental.embedding` configs from the schema.

    Args:
      schema: The schema; every categorical feature gets a `FeatureConfig`, every table
        one `TableConfig` shared by the features that name it.
      per_replica_batch_size: Batch size each replica enqueues; becomes each feature's
        ``output_shape`` (required by SparseCore / `TPUEmbeddingV2`, and it pins shapes).
      initializer: Table initializer (TensorFlow's default when None).
      optimizer: Optional per-table optimizer.

    Returns:
      ``(tables, features)``: dicts of `TableConfig` by table name and `FeatureConfig` by
      feature name (the keys match ``features["ids"]`` of the built batches).
    """
    import tensorflow as tf

    if not isinstance(per_replica_batch_size, int) or per_replica_batch_size < 1:
        raise ConfigError(
            f"per_replica_batch_size: expected a positive int, got {per_replica_batch_size!r}"
        )
    emb = tf.tpu.experimental.embedding
    tables = {
        t.name: emb.TableConfig(
            vocabulary_size=t.vocabulary_size,
            dim=t.dim,
            initializer=initializer,
            optimizer=optimizer,
            combiner=t.combiner,
            name=t.name,
        )
        for t in schema.tables
    }
    features = {
        f.name: emb.FeatureConfig(
            table=tables[f.table],
            max_sequence_length=0,
            output_shape=[per_replica_batch_size],
            name=f.name,
        )
        for f in schema.categorical
    }
    return tables, features


def keras_rs_configs(
    schema: Schema,
    *,
    per_replica_batch_size: int,
    replicas: int = 1,
    optimizer: str
    | keras.optimizers.Optimizer
    | Mapping[str, str | keras.optimizers.Optimizer] = "adam",
    initializer: str | keras.initializers.Initializer | None = None,
    placement: str | Mapping[str, str] = "auto",
    limits: TableLimits | Mapping[str, tuple[int, int]] | None = None,
) -> tuple[dict[str, keras_rs.layers.TableConfig], dict[str, keras_rs.layers.FeatureConfig]]:
    """Build keras-rs `DistributedEmbedding` configs from the schema (docs/tpu.md).

    One ``keras_rs.layers.TableConfig`` per table, shared by every feature that names
    it, and one ``keras_rs.layers.FeatureConfig`` per categorical feature, shaped like
    tfinput's batches at the per-host batch ``G = per_replica_batch_size * replicas``:
    single ids ``input_shape=(G,)``, multi-hot ``(G, max_len)`` (dense ids plus
    weights, or sparse / ragged ids), ``output_shape=(G, dim)``.

    Args:
      schema: The schema; every categorical feature gets a `FeatureConfig`.
      per_replica_batch_size: Batch size of one replica (what
        ``pipeline.build(config, input_context)`` yields per replica).
      replicas: Replicas fed by this host (``strategy.num_replicas_in_sync`` on one host).
      optimizer: The tables' optimizer, applied by keras-rs on SparseCore (on
        ``default_device``, the model's trains them): ``"sgd"``, ``"adagrad"``,
        ``"adam"``, ``"ftrl"`` or such a `keras.optimizers` object; or a dict table
        name -> optimizer (others: Adam).
      initializer: A Keras initializer or its name (None: keras-rs's default).
      placement: ``"auto"`` (keras-rs decides: SparseCore when there is one),
        ``"advice"`` (`placement`'s advice: ``default_device`` for small tables,
        ``sparsecore`` for big ones), ``"default_device"`` / ``"sparsecore"`` for
        every table, or a dict table name -> placement (others: ``"auto"``).
      limits: SparseCore buffer limits: None (keras-rs's, 256 and 256), a dict table
        name -> ``(max_ids_per_partition, max_unique_ids_per_partition)``, or an
        object whose ``table_limits()`` returns one (the SparseCore statistics pass).
        Too small drops or fails on ids; too large wastes SparseCore memory.

    Returns:
      ``(tables, features)``: ``TableConfig`` by table name and ``FeatureConfig`` by
      feature name (the keys of ``features["ids"]`` of the built batches).

    Raises:
      ConfigError: keras-rs is missing (``pip install 'tfinput[keras-rs]'``, Python
        >= 3.11); a bad batch size or replica count, optimizer, placement, table name
        or limits (two positive ints, unique ids <= ids).
    """
    try:
        import keras_rs
    except ImportError as e:
        raise ConfigError(f"keras_rs_configs needs keras-rs: {_INSTALL_HINT}") from e
    for name, value in (("per_replica_batch_size", per_replica_batch_size), ("replicas", replicas)):
        _check_positive_int(name, value)
    names = [t.name for t in schema.tables]
    optimizers = _keras_rs_optimizers(optimizer, names)
    placements = _keras_rs_placements(schema, placement)
    table_limits = checked_limits(limits, names)
    layers = keras_rs.layers
    tables = {
        t.name: layers.TableConfig(
            name=t.name,
            vocabulary_size=t.vocabulary_size,
            embedding_dim=t.dim,
            optimizer=optimizers[t.name],
            combiner=t.combiner,
            placement=placements[t.name],
            **_table_extras(initializer, table_limits.get(t.name)),
        )
        for t in schema.tables
    }
    return tables, _feature_configs(schema, tables, per_replica_batch_size * replicas)


def _feature_configs(
    schema: Schema, tables: Mapping[str, keras_rs.layers.TableConfig], g: int
) -> dict[str, keras_rs.layers.FeatureConfig]:
    """One keras-rs ``FeatureConfig`` per categorical feature at the per-host batch
    ``g``: single ids ``(g,)``, multi-hot ``(g, max_len)``."""
    import keras_rs

    return {
        f.name: keras_rs.layers.FeatureConfig(
            name=f.name,
            table=tables[f.table],
            input_shape=(g, f.max_len) if isinstance(f, MultiHot) else (g,),
            output_shape=(g, tables[f.table].embedding_dim),
        )
        for f in schema.categorical
    }


def _keras_rs_optimizers(
    optimizer: str | keras.optimizers.Optimizer | Mapping[str, str | keras.optimizers.Optimizer],
    names: list[str],
) -> dict[str, str | keras.optimizers.Optimizer]:
    """Each table's keras-rs optimizer (see `keras_rs_configs`), checked."""
    optimizers = _per_table("optimizer", optimizer, names, default="adam")
    for table, opt in optimizers.items():
        _check_optimizer(table, opt)
    return optimizers


def _table_extras(
    initializer: str | keras.initializers.Initializer | None, limits: tuple[int, int] | None
) -> dict[str, object]:
    """A keras-rs ``TableConfig``'s optional keywords: the initializer, when given, and
    the SparseCore buffer limits, when known."""
    extras: dict[str, object] = {"initializer": initializer} if initializer is not None else {}
    if limits is not None:
        extras.update(max_ids_per_partition=limits[0], max_unique_ids_per_partition=limits[1])
    return extras


def _keras_rs_placements(schema: Schema, placement: str | Mapping[str, str]) -> dict[str, str]:
    """Each table's keras-rs placement (see `keras_rs_configs`), checked."""
    if placement == "advice":
        placements = _keras_rs_advice(schema)
    else:
        names = [t.name for t in schema.tables]
        placements = _per_table("placement", placement, names, default="auto")
    for table, where in placements.items():
        if where not in _KERAS_RS_PLACEMENTS:
            raise ConfigError(
                f"placement for table {table!r}: expected one of "
                f"{['advice', *_KERAS_RS_PLACEMENTS]}, got {where!r}"
            )
    return placements


def _check_positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}: expected a positive int, got {value!r}")


def _per_table(
    what: str, value: object, tables: list[str], *, default: object
) -> dict[str, object]:
    """One value for every table, or a dict by table name (others get ``default``)."""
    if not isinstance(value, Mapping):
        return dict.fromkeys(tables, value)
    unknown = sorted(set(value) - set(tables))
    if unknown:
        raise ConfigError(f"{what}: unknown table(s) {unknown}; the schema's tables are {tables}")
    return {t: value.get(t, default) for t in tables}


def _check_optimizer(table: str, optimizer: str | keras.optimizers.Optimizer) -> None:
    if isinstance(optimizer, str):
        if optimizer in _KERAS_RS_OPTIMIZERS:
            return
    else:
        import keras

        opts = keras.optimizers
        if isinstance(optimizer, (opts.SGD, opts.Adagrad, opts.Adam, opts.Ftrl)):
            return
    raise ConfigError(
        f"optimizer for table {table!r}: keras-rs supports {list(_KERAS_RS_OPTIMIZERS)} "
        f"(names or keras.optimizers instances), got {optimizer!r}"
    )


@runtime_checkable
class TableLimits(Protocol):
    """Measured per-table limits (`tfinput.sparsecore_stats`'s result has them)."""

    def table_limits(self) -> Mapping[str, tuple[int, int]]:
        """``table -> (max_ids_per_partition, max_unique_ids_per_partition)``."""
        ...


def checked_limits(
    limits: TableLimits | Mapping[str, tuple[int, int]] | None, tables: list[str]
) -> dict[str, tuple[int, int]]:
    """``limits`` as a checked dict table -> (max ids, max unique ids) per partition."""
    if limits is None:
        return {}
    if isinstance(limits, TableLimits):
        limits = limits.table_limits()
    if not isinstance(limits, Mapping):
        raise ConfigError(
            "limits: expected None, a dict table -> (max_ids_per_partition, "
            "max_unique_ids_per_partition) or an object with a table_limits() "
            f"method, got {type(limits).__name__}"
        )
    unknown = sorted(set(limits) - set(tables))
    if unknown:
        raise ConfigError(f"limits: unknown table(s) {unknown}; the schema's tables are {tables}")
    out = {}
    for table, pair in limits.items():
        ok = isinstance(pair, (tuple, list)) and len(pair) == 2
        ok = ok and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1 for v in pair
        )
        if not ok or pair[1] > pair[0]:
            raise ConfigError(
                f"limits for table {table!r}: expected (max_ids_per_partition, "
                "max_unique_ids_per_partition), two positive ints with unique <= ids, "
                f"got {pair!r}"
            )
        out[table] = (int(pair[0]), int(pair[1]))
    return out


def enqueue_weights(
    schema: Schema,
    features: Mapping[str, Mapping[str, tf.Tensor | tf.SparseTensor | tf.RaggedTensor]],
) -> dict[str, tf.Tensor | tf.SparseTensor | tf.RaggedTensor | None]:
    """The ``weights`` argument matching ``features["ids"]``: multi-hot weights where
    the pipeline produced them, None for single ids.

    Raises:
      ConfigError: the multi-hot features are in the default ``dense`` format, which
        TPUEmbedding refuses with weights ("Weight specified for X, but input is
        dense"); build the pipeline with ``with_multi_hot_format("sparse")`` or
        ``"ragged"``.
    """
    import tensorflow as tf

    dense = [
        name
        for name in features["ids"]
        if isinstance(schema.feature(name), MultiHot)
        and isinstance(features["ids"][name], tf.Tensor)
    ]
    if dense:
        raise ConfigError(
            f"enqueue_weights: multi-hot feature(s) {dense} are dense [B, max_len] tensors; "
            "TPUEmbedding accepts weights only with sparse or ragged ids. Build the pipeline "
            'with .with_multi_hot_format("sparse") (or "ragged") for TPU enqueue'
        )
    return {
        name: features["weights"].get(name) if isinstance(schema.feature(name), MultiHot) else None
        for name in features["ids"]
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Placement:
    """Where one table should live.

    Attributes:
      table: Table name.
      rows: Vocabulary size.
      bytes: Size of the float32 table.
      decision: ``mirror`` (replicate on every core, e.g. a Keras `Embedding`) or
        ``shard`` (TPU embedding / SparseCore, sharded across cores).
      reason: One sentence why.
      keras_rs_placement: The keras-rs ``TableConfig.placement`` the decision maps to
        (`KERAS_RS_PLACEMENT`): ``default_device`` for ``mirror`` (the table lives
        with the dense model, on the TensorCore / GPU), ``sparsecore`` for ``shard``.
        Derived from ``decision``; ``keras_rs_configs(..., placement="advice")``
        applies it.
    """

    table: str
    rows: int
    bytes: int
    decision: str
    reason: str
    keras_rs_placement: str = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        if self.decision not in KERAS_RS_PLACEMENT:
            raise ConfigError(
                f"Placement {self.table!r}: decision must be one of "
                f"{sorted(KERAS_RS_PLACEMENT)}, got {self.decision!r}"
            )
        object.__setattr__(self, "keras_rs_placement", KERAS_RS_PLACEMENT[self.decision])


def placement(
    schema: Schema,
    *,
    mirror_threshold: int = MIRROR_THRESHOLD,
    shard_threshold: int = SHARD_THRESHOLD,
) -> list[Placement]:
    """Suggest mirroring or sharding each table by its size.

    The advice holds for both TPU embedding APIs: with TensorFlow's mid-level API a
    mirrored table is a plain Keras embedding outside `TPUEmbedding`; with keras-rs it
    is ``TableConfig(placement="default_device")`` and a sharded one
    ``placement="sparsecore"`` (`Placement.keras_rs_placement`).

    Args:
      schema: The schema whose tables to place.
      mirror_threshold: Tables with at most this many rows are mirrored.
      shard_threshold: Tables with at least this many rows are sharded; between the
        two thresholds the advice is ``shard`` with a reason that says either works.

    Returns:
      One `Placement` per table, in schema order.
    """
    out = []
    for t in schema.tables:
        size = t.vocabulary_size * t.dim * 4
        if t.vocabulary_size <= mirror_threshold:
            decision = "mirror"
            reason = f"<= {mirror_threshold:,} rows: cheaper to replicate than to shard"
        elif t.vocabulary_size >= shard_threshold:
            decision = "shard"
            reason = f">= {shard_threshold:,} rows: the TPU embedding path pays off"
        else:
            decision = "shard"
            reason = (
                f"between {mirror_threshold:,} and {shard_threshold:,} rows: either works; "
                "shard to save HBM, mirror if lookups dominate"
            )
        out.append(
            Placement(
                table=t.name, rows=t.vocabulary_size, bytes=size, decision=decision, reason=reason
            )
        )
    return out


def _keras_rs_advice(schema: Schema) -> dict[str, str]:
    return {p.table: p.keras_rs_placement for p in placement(schema)}
