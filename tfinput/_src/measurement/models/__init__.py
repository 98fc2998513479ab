"""Keras 3 layers and a small DCN-style ranking model over tfinput batches.

These consume the ``dense`` multi-hot format (``[B, max_len]`` ids plus float weights
with 0 for padding): plain gathers and reductions, so the whole step compiles with
XLA (``jit_compile=True``) on accelerators and CPU, unlike ``embedding_lookup_sparse`` or
ragged inputs. They are what the tuner's built-in ranking step and the examples use.
`RankingModel` accepts batches in either layout, per-feature or packed
(`tfinput.layout`).

The package holds every Keras model the steps and examples train: this module's ranking
model and layers, the two-tower retrieval model (`_two_tower`, made by
`tfinput.retrieval`) and their embedding-table optimizer (`_table_optimizer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import keras
from keras import layers, ops

from tfinput._src.core.layout import PackedLayout, is_packed, unpack
from tfinput._src.core.schema import Categorical, MultiHot, Schema
from tfinput._src.measurement.models._row_step import ROWS, RowStepModel
from tfinput._src.measurement.models._table_optimizer import SparseTableAdam


@keras.saving.register_keras_serializable(package="tfinput")
class PaddedEmbeddingBag(layers.Layer):
    """An embedding table looked up with padded ids and combined with weights.

    ``call(ids)`` with ids ``[B]`` returns ``[B, dim]``. ``call(ids, weights)`` with ids
    and weights ``[B, L]`` returns the ``combiner`` of the weighted rows, ``[B, dim]``:
    ``sum`` = sum of w·e, ``mean`` = sum / sum(w), ``sqrtn`` = sum / sqrt(sum(w²)). Rows
    whose weights are all 0 (empty lists) give zeros.

    The table is read at the ids only: on TensorFlow a gather on the variable
    (``ResourceGather``, whose gradient is the rows, ``tf.IndexedSlices``) rather than
    a gather on a read of the whole table (``ReadVariableOp``, which TensorFlow copies
    once a scatter has written the table). ``call(ids, weights, rows=block)`` reads
    ``block`` instead of the table, ``ids`` being positions in it: the built-in models'
    JAX train step passes the rows it read from the table (`RowStepModel`).
    """

    def __init__(self, vocabulary_size: int, dim: int, combiner: str = "mean", **kwargs: Any):
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.dim = dim
        self.combiner = combiner
        self.embeddings = self.add_weight(
            shape=(vocabulary_size, dim),
            initializer=keras.initializers.RandomUniform(-0.05, 0.05),
            name="embeddings",
            autocast=False,  # the rows read are cast, not the table (mixed precision)
        )

    def call(self, ids: Any, weights: Any = None, rows: Any = None) -> Any:
        emb = ops.take(rows, ids, axis=0) if rows is not None else self._gather(ids)
        emb = ops.cast(emb, self.compute_dtype)
        if len(ids.shape) == 1:
            return emb
        if weights is None:
            weights = ops.ones(ops.shape(ids), dtype=emb.dtype)
        w = ops.cast(weights, emb.dtype)
        total = ops.sum(emb * ops.expand_dims(w, -1), axis=1)
        if self.combiner == "sum":
            return total
        if self.combiner == "mean":
            norm = ops.sum(w, axis=1, keepdims=True)
        else:
            norm = ops.sqrt(ops.sum(w * w, axis=1, keepdims=True))
        return total / ops.maximum(norm, 1e-12)

    def _gather(self, ids: Any) -> Any:
        """The table's rows at ``ids`` (negative ids count from the end, as
        ``keras.ops.take``'s)."""
        if keras.config.backend() != "tensorflow":
            return ops.take(self.embeddings, ids, axis=0)
        import tensorflow as tf

        table = self.embeddings.value  # the tf.Variable (a tensor in a StatelessScope)
        ids = tf.convert_to_tensor(ids)
        ids = tf.where(ids < 0, ids + tf.cast(self.vocabulary_size, ids.dtype), ids)
        return tf.gather(table, ids)  # a variable's sparse_read: ResourceGather

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "dim": self.dim,
            "combiner": self.combiner,
        }


def embed(tables: dict[str, PaddedEmbeddingBag], features: Any, feature: Any) -> Any:
    """``feature``'s embedding ``[B, dim]`` from a per-feature group ``{"ids",
    "weights"}`` (its table's rows from the group's `ROWS` block when the train step
    passed one)."""
    table = tables[feature.table]
    ids = features["ids"][feature.name]
    rows = features.get(ROWS, {}).get(feature.table)
    if isinstance(feature, MultiHot):
        return table(ids, features["weights"][feature.name], rows=rows)
    return table(ids, rows=rows)


def signed_log1p(x: Any) -> Any:
    """``sign(x) · log(1 + |x|)``: identity-like near 0, logarithmic for large
    magnitudes of either sign, finite for every finite float32 (3.4e38 -> 88.7)."""
    return ops.sign(x) * ops.log1p(ops.abs(x))


@keras.saving.register_keras_serializable(package="tfinput")
class RankingModel(RowStepModel):
    """DCN-v2 style: dense features through a bottom MLP, all embeddings and the
    bottom output concatenated, ``cross_layers`` cross layers, then a top MLP to one
    click logit. Features sharing a table share its `PaddedEmbeddingBag`.

    A cross layer is ``x0 · (W x + b) + x`` over the concatenation's width (the sum of
    the features' dims plus the bottom output). ``W`` is low-rank, ``U·V`` through
    ``cross_projection_dim`` units (DCN-v2's low-rank cross, keras-rs
    ``FeatureCross(projection_dim=...)``, as production DCN-v2 models are trained),
    when that is cheaper: wider than twice the projection. Its cost then grows with the
    width, not with its square, so larger embedding dims cost what their lookups and
    the wider layers cost. Narrower concatenations, and ``cross_projection_dim=None``,
    keep ``W`` full-rank.

    Dense inputs go through `signed_log1p` first (``normalize_dense=True``): raw
    magnitudes such as ids near 1e19 or hour stamps near 1.4e7 would otherwise overflow
    the cross layers to inf and the loss to NaN within a few steps. It is stateless (no
    statistics to adapt, the same at training and serving), compiles with XLA, and
    barely changes features the schema already scaled (``log1p`` outputs are small).
    Pass ``normalize_dense=False`` for inputs you have standardised yourself.

    ``call`` takes per-feature batches or packed ones (``Pipeline.with_layout("packed")``),
    which it slices back with `tfinput.layout.unpack` and the schema's `PackedLayout`."""

    def __init__(
        self,
        schema: Schema,
        *,
        bottom: Sequence[int] = (64, 32),
        top: Sequence[int] = (64, 32),
        cross_layers: int = 2,
        cross_projection_dim: int | None = 64,
        normalize_dense: bool = True,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.schema = schema
        self._arch = {
            "bottom": list(bottom),
            "top": list(top),
            "cross_layers": cross_layers,
            "cross_projection_dim": cross_projection_dim,
            "normalize_dense": normalize_dense,
        }
        self.packed_layout = PackedLayout.from_schema(schema)
        self.normalize_dense = normalize_dense
        self.tables = {
            t.name: PaddedEmbeddingBag(t.vocabulary_size, t.dim, t.combiner, name=f"emb_{t.name}")
            for t in schema.tables
        }
        self.bottom = [layers.Dense(n, activation="relu") for n in bottom]
        self.bottom_width = bottom[-1] if bottom else 0
        self.cross_dense: list[layers.Dense] = []  # W (full rank) or U (low rank)
        self.cross_projections: list[layers.Dense] = []  # V (low rank), else empty
        self.cross_layers = cross_layers
        self.cross_projection_dim = cross_projection_dim
        self.top = [layers.Dense(n, activation="relu") for n in top]
        self.logit = layers.Dense(1)

    def build(self, input_shape: Any) -> None:
        # Every sublayer is built here, from the schema, so a loaded model
        # (`keras.saving.load_model`) has all its variables before its weights load.
        width = sum(self.schema.table(f.table).dim for f in self.schema.categorical)
        if self.schema.dense:
            x = sum(f.length or 1 for f in self.schema.dense)
            for layer in self.bottom:
                layer.build((None, x))
                x = layer.units
            width += self.bottom_width
        self.cross_dense = [layers.Dense(width) for _ in range(self.cross_layers)]
        rank = self.cross_projection_dim
        if rank and width > 2 * rank:  # U·V costs 2·width·rank per row, W width²
            self.cross_projections = [
                layers.Dense(rank, use_bias=False) for _ in range(self.cross_layers)
            ]
        for layer in self.cross_projections:
            layer.build((None, width))
        for layer in self.cross_dense:
            layer.build((None, rank if self.cross_projections else width))
        x = width
        for layer in self.top:
            layer.build((None, x))
            x = layer.units
        self.logit.build((None, x))
        super().build(input_shape)

    def get_config(self) -> dict[str, Any]:
        """The schema and the architecture: ``model.save("m.keras")`` and
        ``keras.saving.load_model`` round-trip (``tfinput export`` loads such files)."""
        return {**super().get_config(), "schema": self.schema.to_dict(), **self._arch}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> RankingModel:
        config = dict(config)
        schema = Schema.from_dict(config.pop("schema"), source="RankingModel config")
        config.setdefault("cross_projection_dim", None)  # files saved before it: full rank
        return cls(schema, **config)

    def lookup_groups(self, x: Any) -> tuple[Any, list[Any]]:
        """The per-feature batch (packed ones unpacked) and its one feature group."""
        x = unpack(x, self.packed_layout) if is_packed(x) else x
        return x, [x]

    def regroup(self, x: Any, groups: list[Any]) -> Any:
        return groups[0]

    def call(self, features: dict[str, Any]) -> Any:
        if is_packed(features):
            features = unpack(features, self.packed_layout)
        parts = []
        dense = [
            ops.reshape(features["dense"][f.name], (-1, f.length or 1)) for f in self.schema.dense
        ]
        if dense:
            x = ops.concatenate(dense, axis=1)
            if self.normalize_dense:
                x = signed_log1p(x)
            for layer in self.bottom:
                x = layer(x)
            parts.append(x)
        for f in self.schema.categorical:
            if isinstance(f, (Categorical, MultiHot)):
                parts.append(embed(self.tables, features, f))
        x0 = ops.concatenate(parts, axis=1)
        x = x0
        for i, layer in enumerate(self.cross_dense):
            v = x if not self.cross_projections else self.cross_projections[i](x)
            x = x0 * layer(v) + x
        for layer in self.top:
            x = layer(x)
        return ops.squeeze(self.logit(x), -1)


def ranking_model(
    schema: Schema,
    *,
    learning_rate: float = 1e-3,
    jit_compile: bool | Literal["auto"] = "auto",
    steps_per_execution: int = 1,
    **kwargs: Any,
) -> RankingModel:
    """A compiled `RankingModel` (`SparseTableAdam`, binary cross-entropy on logits, AUC).

    A step reads and updates only the embedding rows its batch's ids select (row-wise
    Adagrad on the tables, Adam on the dense layers), as embedding trainers do, so its
    cost follows the ids per batch, not the tables' sizes, on TensorFlow (lookups
    gather from the table variables, and their gradients are the rows) and on JAX (the
    model's own train step: `RowStepModel`). Compiling it again with an optimizer of
    another class, or a `SparseTableAdam` that clips gradients, gives Keras's dense
    step on JAX (see `SparseTableAdam`). The cross layers are low-rank beyond twice
    ``cross_projection_dim`` wide (`RankingModel`), so the step's cost grows with the
    embedding dims linearly, as a production DCN-v2's.

    Args:
      schema: The features and tables.
      learning_rate: The optimizer's learning rate (tables and dense layers).
      jit_compile: Compile the train step with XLA. ``"auto"`` (the default): on the
        JAX backend, and on TensorFlow where it sees a GPU or TPU; not on a host where
        TensorFlow sees only CPUs, where an XLA compile (several seconds for each input
        signature: each layout, batch size and ``steps_per_execution``) costs more than
        a short run gains, as Keras's own ``"auto"`` decides there.
      steps_per_execution: Training steps per call into the compiled step (``fit``);
        pass a tuned ``PipelineConfig.steps_per_execution``.
      **kwargs: `RankingModel` arguments (``bottom``, ``top``, ``cross_layers``,
        ``cross_projection_dim``, ``normalize_dense``, ``name``).
    """
    kwargs.setdefault("name", "ranking_model")  # stable across instances (reports compare it)
    model = RankingModel(schema, **kwargs)
    model.compile(
        optimizer=SparseTableAdam(learning_rate),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[keras.metrics.AUC(from_logits=True, name="auc")],
        jit_compile=_xla(jit_compile),
        steps_per_execution=steps_per_execution,
    )
    # Every variable is made now, from the schema. On TensorFlow, Keras otherwise makes
    # the optimizer's inside the first traced step, and a step that makes variables is
    # traced again: the first `fit` would trace (and compile) the step twice.
    model.build(None)
    model.optimizer.build(model.trainable_variables)
    return model


def _xla(jit_compile: bool | Literal["auto"]) -> bool:
    """`ranking_model`'s ``jit_compile``, ``"auto"`` resolved."""
    if jit_compile != "auto":
        return bool(jit_compile)
    if keras.config.backend() != "tensorflow":
        return True
    import tensorflow as tf

    return any(d.device_type != "CPU" for d in tf.config.list_physical_devices())
