"""`SparseTableAdam`: Adam for the dense weights, row-wise Adagrad on the rows of the
embedding tables that a batch touches.

Keras imports this module with `tfinput.models` (it subclasses a Keras optimizer).
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tfinput")
class SparseTableAdam(keras.optimizers.Adam):
    """Adam for dense weights; row-wise Adagrad, applied sparsely, for embedding tables.

    Keras's Adam keeps two slots as large as every weight and updates them in full at
    every step, so a step's cost grows with the size of the embedding tables even though
    a batch reads only a few of their rows. Embedding trainers (TPU embedding,
    SparseCore, FBGEMM/TorchRec) update only the rows a batch touches; this optimizer
    does the same, so a training step costs what the batch's ids cost:

    * Tables (2-D weights named ``table_variable_name``, the ``embeddings`` of
      `PaddedEmbeddingBag` and ``keras.layers.Embedding``) keep one accumulator per row
      (``[rows, 1]``: a table's size / dim, not twice the table as Adam's slots) and
      take row-wise Adagrad: for each gradient slice ``g`` of a touched row,
      ``acc += mean(g²)``, then ``row -= rate · g / (sqrt(acc) + table_epsilon)``, the
      rate being ``table_learning_rate`` (or ``learning_rate``).
    * Every other weight takes Adam with the given ``beta_1``, ``beta_2``, ``epsilon``.

    On the TensorFlow backend a table's gradient arrives as ``tf.IndexedSlices`` (the
    gradient of a gather), one slice per id of the batch; the update writes those rows
    with scatters (an id met k times adds k slices), so its cost follows the ids per
    batch. On JAX, Keras's train step hands an optimizer a gradient as large as the
    table (JAX's derivative of a gather, the slices of a row summed): applied to such a
    gradient, the rule runs over every row (untouched rows get zero and do not move),
    its cost following the table's size. The built-in models (`RankingModel`,
    `tfinput.retrieval.TwoTowerModel`) have a JAX train step of their own that reads
    only the batch's rows and calls `update_rows` with them, so there too a step costs
    what its ids cost; it falls back to Keras's step when this optimizer clips,
    accumulates or averages gradients, decays weights or scales the loss (a warning
    says so). A model of your own on JAX gets the dense update.

    Args:
      learning_rate: Adam's learning rate (a float or a schedule), and the tables'
        unless ``table_learning_rate`` is given.
      beta_1: Adam's first-moment decay.
      beta_2: Adam's second-moment decay.
      epsilon: Adam's epsilon.
      table_learning_rate: The tables' learning rate (a float; None: ``learning_rate``).
        Row-wise Adagrad's steps shrink as a row's accumulator grows, and a row moves
        only in the steps that read it (Adam's momentum keeps moving a weight after its
        gradient is gone), so tables usually take a larger rate than Adam's dense
        weights: faster learning of rare rows, at the price of noisier frequent ones.
      table_epsilon: Added to the row-wise root mean square before dividing.
      table_initial_accumulator: The tables' accumulators' starting value; larger
        values make the first steps on a row smaller.
      table_variable_name: The name of the weights updated row-wise.
      **kwargs: Other `keras.optimizers.Optimizer` arguments (``name``, clipping).
    """

    def __init__(
        self,
        learning_rate: Any = 1e-3,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        *,
        table_learning_rate: float | None = None,
        table_epsilon: float = 1e-8,
        table_initial_accumulator: float = 0.0,
        table_variable_name: str = "embeddings",
        name: str = "sparse_table_adam",
        **kwargs: Any,
    ):
        kwargs.pop("amsgrad", None)  # not supported: Adam's get_config carries it
        super().__init__(
            learning_rate=learning_rate,
            beta_1=beta_1,
            beta_2=beta_2,
            epsilon=epsilon,
            name=name,
            **kwargs,
        )
        self.table_learning_rate = table_learning_rate
        self.table_epsilon = table_epsilon
        self.table_initial_accumulator = table_initial_accumulator
        self.table_variable_name = table_variable_name

    def is_table(self, variable: Any) -> bool:
        """Whether ``variable`` takes the row-wise rule."""
        return len(variable.shape) == 2 and variable.name == self.table_variable_name

    def build(self, var_list: list[Any]) -> None:
        """Adam's two slots for dense weights, one ``[rows, 1]`` accumulator per table."""
        if self.built:
            return
        keras.optimizers.Optimizer.build(self, var_list)
        self._momentums, self._velocities, self._row_accumulators = [], [], []
        for v in var_list:
            if self.is_table(v):
                self._momentums.append(None)
                self._velocities.append(None)
                self._row_accumulators.append(
                    self.add_variable(
                        shape=(v.shape[0], 1),
                        initializer=keras.initializers.Constant(self.table_initial_accumulator),
                        dtype=v.dtype,
                        name=f"row_accumulator_{v.name}",
                    )
                )
            else:
                self._momentums.append(self.add_variable_from_reference(v, "momentum"))
                self._velocities.append(self.add_variable_from_reference(v, "velocity"))
                self._row_accumulators.append(None)

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        accumulator = self._row_accumulators[self._get_variable_index(variable)]
        if accumulator is None:
            super().update_step(gradient, variable, learning_rate)
            return
        rows = _touched_rows(gradient)
        if rows is None:  # a dense gradient (Keras's JAX or torch step): every row
            lr = ops.cast(self._table_rate(learning_rate), variable.dtype)
            g = ops.cast(gradient, variable.dtype)
            acc = ops.add(accumulator, ops.mean(ops.square(g), axis=1, keepdims=True))
            self.assign(accumulator, acc)
            self.assign_sub(
                variable, ops.divide(ops.multiply(lr, g), ops.sqrt(acc) + self.table_epsilon)
            )
            return
        self.update_rows(variable, *rows, learning_rate)

    def update_rows(self, variable: Any, ids: Any, gradient_rows: Any, learning_rate: Any) -> None:
        """The row-wise rule on the rows ``ids`` of the table ``variable`` only.

        Each gradient row adds its mean square to its table row's accumulator (an id
        met k times adds k times), then moves its table row by
        ``learning_rate · g / (sqrt(acc) + table_epsilon)``, ``acc`` after every
        addition: scatters and a gather of ``ids``, nothing as large as the table. On
        TensorFlow (a ``tf.IndexedSlices`` gradient's ``indices`` and ``values``) and
        on JAX (the built-in models' train step there, which passes each row once
        with its slices summed); ids out of the table's range are dropped on JAX.

        Args:
          variable: A table (`is_table`) this optimizer was built with.
          ids: ``[n]`` row numbers (they may repeat).
          gradient_rows: ``[n, dim]``, one gradient row per id.
          learning_rate: This step's learning rate (``table_learning_rate`` replaces
            it when given).
        """
        accumulator = self._row_accumulators[self._get_variable_index(variable)]
        lr = ops.cast(self._table_rate(learning_rate), variable.dtype)
        g = ops.cast(gradient_rows, variable.dtype)
        square = ops.mean(ops.square(g), axis=1, keepdims=True)
        if keras.config.backend() == "jax":
            acc = _value(accumulator).at[ids].add(square, mode="drop")
            self.assign(accumulator, acc)
            step = lr * g / (ops.sqrt(ops.take(acc, ids, axis=0)) + self.table_epsilon)
            self.assign(variable, _value(variable).at[ids].add(-step, mode="drop"))
            return
        import tensorflow as tf

        # Scatters and a gather of the batch's ids, no sort (XLA's unique is one).
        self.assign_add(accumulator, tf.IndexedSlices(square, ids))
        acc = tf.gather(_value(accumulator), ids)
        self.assign_sub(
            variable, tf.IndexedSlices(lr * g / (tf.sqrt(acc) + self.table_epsilon), ids)
        )

    def _table_rate(self, learning_rate: Any) -> Any:
        rate = self.table_learning_rate
        return learning_rate if rate is None else rate

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.pop("amsgrad", None)
        return {
            **config,
            "table_learning_rate": self.table_learning_rate,
            "table_epsilon": self.table_epsilon,
            "table_initial_accumulator": self.table_initial_accumulator,
            "table_variable_name": self.table_variable_name,
        }


def _touched_rows(gradient: Any) -> tuple[Any, Any] | None:
    """``(ids, gradient rows)`` of a ``tf.IndexedSlices`` gradient (ids may repeat), or
    None for a dense one."""
    if keras.config.backend() != "tensorflow":
        return None
    import tensorflow as tf

    if not isinstance(gradient, tf.IndexedSlices):
        return None
    return gradient.indices, gradient.values


def _value(variable: Any) -> Any:
    """The backend variable behind a Keras variable."""
    return getattr(variable, "value", variable)
