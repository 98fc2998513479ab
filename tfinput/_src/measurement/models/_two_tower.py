"""The two-tower retrieval model's Keras classes (`tfinput.retrieval`): in a module of
their own so that Keras is imported only when a model is made."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import layers, ops

from tfinput._src.core.errors import ConfigError
from tfinput._src.core.schema import Categorical, MultiHot, Schema
from tfinput._src.measurement.models import PaddedEmbeddingBag, embed, signed_log1p
from tfinput._src.measurement.models._row_step import RowStepModel


class Tower(keras.Model):
    """One tower: each feature's embedding (dense features through `signed_log1p`),
    concatenated, an MLP, then a projection to ``embedding_dim``, L2-normalised.

    ``call`` takes one tower's per-feature group ``{"dense", "ids", "weights"}``
    and returns ``[B, embedding_dim]`` unit vectors."""

    def __init__(
        self,
        schema: Schema,
        side: str,
        tables: dict[str, Any],
        *,
        embedding_dim: int,
        hidden: Sequence[int],
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.features = schema.tower(side)
        self.schema = schema
        self.tables = tables
        self.hidden = [layers.Dense(n, activation="relu") for n in hidden]
        self.project = layers.Dense(embedding_dim)

    def build(self, input_shape: Any = None) -> None:
        width = 0
        for f in self.features:
            if isinstance(f, (Categorical, MultiHot)):
                width += self.schema.table(f.table).dim
            else:
                width += f.length or 1
        for layer in self.hidden:
            layer.build((None, width))
            width = layer.units
        self.project.build((None, width))
        super().build(input_shape)

    def call(self, features: dict[str, Any]) -> Any:
        parts = []
        for f in self.features:
            if isinstance(f, (Categorical, MultiHot)):
                parts.append(embed(self.tables, features, f))
            else:
                x = ops.cast(features["dense"][f.name], "float32")
                parts.append(signed_log1p(ops.reshape(x, (-1, f.length or 1))))
        x = ops.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
        for layer in self.hidden:
            x = layer(x)
        x = self.project(x)
        return x / ops.sqrt(ops.maximum(ops.sum(x * x, axis=1, keepdims=True), 1e-12))


@keras.saving.register_keras_serializable(package="tfinput")
class TwoTowerModel(RowStepModel):
    """A two-tower retrieval model trained with an in-batch softmax.

    ``call(features)`` takes a `Pipeline.with_towers` batch ``{"query": ...,
    "candidate": ...}`` and returns the in-batch logits ``[B, B]``: query ``i``
    against candidate ``j``, ``q @ c.T / temperature`` of L2-normalised tower
    outputs. The loss (`compute_loss`) is the softmax cross-entropy of each query
    against its own row's candidate (labels ``arange(B)``; the pipeline's labels
    are ignored). Another row holding the same candidate (same
    ``Schema.candidate_id``) is not counted as a negative (accidental hits are
    masked). ``query_tower`` and ``candidate_tower`` are Keras models of their own:
    ``model.candidate_tower(corpus_features)`` embeds a corpus,
    ``model.query_tower(batch["query"])`` a request. Features that share a table
    share its embeddings, also across towers.
    """

    def __init__(
        self,
        schema: Schema,
        *,
        embedding_dim: int = 32,
        hidden: Sequence[int] = (64,),
        temperature: float = 0.05,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if not temperature > 0:
            raise ConfigError(f"TwoTowerModel: temperature must be > 0, got {temperature}")
        for side in ("query", "candidate"):
            if not schema.tower(side):
                raise ConfigError(
                    f"TwoTowerModel: the schema marks no {side} feature; set "
                    f'tower="{side}" on its features (Schema.with_towers)'
                )
        self.schema = schema
        self.temperature = float(temperature)
        self._arch = {
            "embedding_dim": embedding_dim,
            "hidden": list(hidden),
            "temperature": self.temperature,
        }
        used = {f.table for f in schema.categorical if f.tower is not None}
        tables = {
            t.name: PaddedEmbeddingBag(t.vocabulary_size, t.dim, t.combiner, name=f"emb_{t.name}")
            for t in schema.tables
            if t.name in used
        }
        self.tables = tables
        arch = {"embedding_dim": embedding_dim, "hidden": hidden}
        self.query_tower = Tower(schema, "query", tables, name="query_tower", **arch)
        self.candidate_tower = Tower(schema, "candidate", tables, name="candidate_tower", **arch)

    def build(self, input_shape: Any = None) -> None:
        # Every variable is made here, from the schema, so a loaded model
        # (`keras.saving.load_model`) has them before its weights load.
        for tower in (self.query_tower, self.candidate_tower):
            if not tower.built:
                tower.build(None)
        super().build(input_shape)

    def lookup_groups(self, x: Any) -> tuple[Any, list[Any]]:
        """The batch and its two feature groups, the query's and the candidate's."""
        return x, [x["query"], x["candidate"]]

    def regroup(self, x: Any, groups: list[Any]) -> Any:
        return {**x, "query": groups[0], "candidate": groups[1]}

    def call(self, features: dict[str, Any]) -> Any:
        q = self.query_tower(features["query"])
        c = self.candidate_tower(features["candidate"])
        return ops.matmul(q, ops.transpose(c)) / self.temperature

    def compute_loss(
        self,
        x: Any = None,
        y: Any = None,
        y_pred: Any = None,
        sample_weight: Any = None,
        training: bool = True,
    ) -> Any:
        del y, training  # in-batch softmax: row i's positive is candidate i
        logits = y_pred
        n = ops.shape(logits)[0]
        cid = self.schema.candidate_id
        if cid is not None and x is not None:
            ids = x["candidate"]["ids"][cid]
            same = ops.equal(ops.expand_dims(ids, 1), ops.expand_dims(ids, 0))
            hit = ops.logical_and(same, ops.logical_not(ops.eye(n, dtype="bool")))
            logits = ops.where(hit, ops.full_like(logits, -1e9), logits)
        labels = ops.arange(n)
        per_row = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        if sample_weight is not None:
            per_row = per_row * ops.cast(ops.reshape(sample_weight, (-1,)), per_row.dtype)
        loss = ops.mean(per_row)
        for extra in self.losses:
            loss = loss + ops.cast(extra, loss.dtype)
        return loss

    def get_config(self) -> dict[str, Any]:
        """The schema and the architecture (``model.save`` / ``load_model``)."""
        return {**super().get_config(), "schema": self.schema.to_dict(), **self._arch}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        config = dict(config)
        schema = Schema.from_dict(config.pop("schema"), source="TwoTowerModel config")
        return cls(schema, **config)
