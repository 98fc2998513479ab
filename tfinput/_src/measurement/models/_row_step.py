"""The built-in models' train step on the JAX backend: each embedding table is read and
updated only at the rows of the batch's ids.

Keras's JAX trainer differentiates the loss with respect to every trainable variable, and
JAX's derivative of a gather is as large as the table it gathers from, so its step
writes every row of every table, and its time follows the tables' size. `RowStepModel`
gives the models of this package a train step of their own there: it reads the rows the
batch's ids select from each table (one block per table, however many features share
it), differentiates the loss with respect to those rows and the other weights, and
scatters `SparseTableAdam`'s row-wise update into the table and its accumulator. Keras's
jitted train function donates the state, so XLA updates the tables in place. ``fit``,
``train_on_batch``, ``steps_per_execution``, metrics and saving are Keras's own.

What is learnt is what Keras's step learns: a row met k times in a batch takes the sum
of its k gradient slices, as JAX's table-shaped gradient holds it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import keras

from tfinput._src.measurement.models._table_optimizer import SparseTableAdam

#: The key of a feature group that carries the rows the train step read for it:
#: ``{table name: [n, dim]}``, the group's ids then being positions in those blocks.
ROWS = "table_rows"

_SETTINGS = {
    "clipnorm": "clips gradients (clipnorm)",
    "clipvalue": "clips gradients (clipvalue)",
    "global_clipnorm": "clips gradients (global_clipnorm)",
    "gradient_accumulation_steps": "accumulates gradients",
    "use_ema": "keeps a moving average of the weights (use_ema)",
    "weight_decay": "decays weights",
    "loss_scale_factor": "scales the loss",
}


def dense_step_reason(model: keras.Model) -> str | None:
    """Why ``model``'s JAX train step is Keras's (every table row written each step), or
    None when it updates only the batch's rows.

    The row step applies `SparseTableAdam`'s rules and nothing else: an optimizer of
    another class (Adam's slots are as large as the tables), or one that clips,
    accumulates, averages, decays or scales, is Keras's to run.
    """
    opt = getattr(model, "optimizer", None)
    if not isinstance(opt, SparseTableAdam):
        return f"its optimizer is {type(opt).__name__}, not SparseTableAdam"
    for name, what in _SETTINGS.items():
        if getattr(opt, name, None):
            return f"its optimizer {what}"
    for name, bag in model.tables.items():
        v = bag.embeddings
        if not v.trainable or v.constraint is not None or not opt.is_table(v):
            return f"table {name!r} is frozen, constrained or not updated row-wise"
    return None


class RowStepModel(keras.Model):
    """A Keras model whose embedding tables (``self.tables``: `PaddedEmbeddingBag`s by
    table name, ``self.schema``'s features reading them) train row by row on JAX.

    Subclasses say where the ids are (`lookup_groups`, `regroup`) and pass each group's
    ``ROWS`` entry to their tables (``table(ids, weights, rows=...)``). On TensorFlow
    the train step is Keras's: a gather's gradient there is already the rows of the
    batch (``tf.IndexedSlices``). `dense_step_reason` says when JAX's is Keras's too.
    """

    def lookup_groups(self, x: Any) -> tuple[Any, list[Mapping[str, Any]]]:
        """The batch as ``call`` reads it per feature, and its feature groups: dicts
        with ``ids`` (and ``weights``), as `tfinput.Pipeline` batches hold them."""
        raise NotImplementedError

    def regroup(self, x: Any, groups: list[Mapping[str, Any]]) -> Any:
        """``x`` with its feature groups replaced by ``groups`` (same order)."""
        raise NotImplementedError

    def train_step(self, *args: Any) -> Any:
        if keras.config.backend() == "jax":
            reason = dense_step_reason(self)
            if reason is None:
                return _jax_row_step(self, *args)
            if isinstance(self.optimizer, SparseTableAdam):
                warnings.warn(
                    f"{self.name}: every embedding row is written at each step on JAX, "
                    f"because {reason}: the step's time follows the tables' size",
                    stacklevel=2,
                )
        return super().train_step(*args)


def _jax_row_step(model: RowStepModel, state: Any, data: Any) -> Any:
    """Keras's JAX ``train_step(state, data)``, with each table read and written at the
    batch's rows only."""
    import jax
    import jax.numpy as jnp

    trainable, non_trainable, optimizer_values, metrics_values = state
    batch, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    x, groups = model.lookup_groups(batch)
    variables = model.trainable_variables
    position = {id(v): i for i, v in enumerate(variables)}
    table_of = {f.name: f.table for f in model.schema.categorical}

    # Every read of each table, over all features and groups: (group, feature, ids).
    reads: dict[str, list[tuple[int, str, Any]]] = {}
    for g, group in enumerate(groups):
        for name, ids in group.get("ids", {}).items():
            if table_of.get(name) in model.tables:
                reads.setdefault(table_of[name], []).append((g, name, ids))
    # One block per table: the batch's ids sorted, duplicates kept; each id reads the
    # block at its first occurrence, so a row's slices sum there (the rest get zero).
    local = [dict(group["ids"]) for group in groups]
    sorted_ids, slots = {}, {}
    for table, table_reads in reads.items():
        flat = jnp.concatenate([jnp.reshape(ids, (-1,)) for _, _, ids in table_reads])
        sorted_ids[table] = jnp.sort(flat)
        first = jnp.searchsorted(sorted_ids[table], flat, method="scan").astype("int32")
        start = 0
        for g, name, ids in table_reads:
            size = math.prod(ids.shape)
            local[g][name] = jnp.reshape(first[start : start + size], ids.shape)
            start += size
        slots[table] = position[id(model.tables[table].embeddings)]
    rows = {t: jnp.take(trainable[i], sorted_ids[t], axis=0) for t, i in slots.items()}
    dense = [i for i in range(len(variables)) if i not in set(slots.values())]

    def loss_fn(dense_values: list[Any], rows: dict[str, Any]) -> Any:
        values = list(trainable)
        for i, value in zip(dense, dense_values, strict=True):
            values[i] = value
        regrouped = [{**gr, "ids": local[g], ROWS: rows} for g, gr in enumerate(groups)]
        return model.compute_loss_and_updates(
            values,
            non_trainable,
            metrics_values,
            model.regroup(x, regrouped),
            y,
            sample_weight,
            training=True,
            optimizer_variables=optimizer_values,
        )

    grad_fn = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)
    (_, aux), (dense_grads, row_grads) = grad_fn([trainable[i] for i in dense], rows)
    unscaled_loss, y_pred, non_trainable, metrics_values = aux
    grads: list[Any] = [None] * len(variables)
    for i, grad in zip(dense, dense_grads, strict=True):
        grads[i] = grad
    updates = {slots[t]: (sorted_ids[t], row_grads[t]) for t in slots}
    trainable, optimizer_values = _apply(model, optimizer_values, trainable, grads, updates)
    logs, metrics_values = model._update_metrics_variables(
        metrics_values, unscaled_loss, batch, y, y_pred, sample_weight
    )
    return logs, (trainable, non_trainable, optimizer_values, metrics_values)


def _apply(
    model: RowStepModel,
    optimizer_values: list[Any],
    trainable: list[Any],
    grads: list[Any],
    rows: dict[int, tuple[Any, Any]],
) -> tuple[list[Any], list[Any]]:
    """`SparseTableAdam` on values (Keras's ``stateless_apply``): ``rows`` (variable
    position -> ids, gradient rows) row-wise, the other weights by ``grads`` (None for
    the tables)."""
    opt = model.optimizer
    variables = model.trainable_variables
    mapping = [*zip(variables, trainable, strict=True)]
    mapping += zip(opt.variables, optimizer_values, strict=True)
    with keras.StatelessScope(state_mapping=mapping) as scope:
        learning_rate = opt.learning_rate  # this step's: before apply counts it
        for i, (ids, gradient_rows) in rows.items():
            opt.update_rows(variables[i], ids, gradient_rows, learning_rate)
        if any(g is not None for g in grads):
            with warnings.catch_warnings():  # the tables' None: updated above
                warnings.filterwarnings("ignore", message="Gradients do not exist")
                opt.apply(grads)
        else:
            opt.iterations.assign_add(1)
    return (
        [scope.get_current_value(v) for v in variables],
        [scope.get_current_value(v) for v in opt.variables],
    )
