"""A tiny Keras model for ``tfinput profile --step keras`` on datasets that are not
tfinput pipelines (tfinput pipelines get the built-in ranking model). The ``--demo``
pipeline itself is tfinput's built-in default (`tfinput.cli.demo`)."""

from __future__ import annotations

from typing import Any

__all__ = ["demo_keras_model"]


def demo_keras_model(element_spec: Any) -> Any:
    """A tiny compiled Keras model accepting any batch of dense numeric features.

    Every feature is cast to float, flattened and concatenated into one dense layer:
    it only exists to exercise the Keras step path (``--step keras``) on an arbitrary
    pipeline; pass your own model with ``--model module:function``.

    Raises:
      ConfigError: A feature is not a dense numeric tensor.
    """
    import keras
    import tensorflow as tf

    from tfinput.errors import ConfigError

    if not (isinstance(element_spec, tuple) and len(element_spec) == 2):
        raise ConfigError(
            "--step keras needs a pipeline of (features, labels) batches; got element_spec "
            f"{element_spec}; pass your own model with --model module:function"
        )
    features, _ = element_spec
    named = features if isinstance(features, dict) else {"x": features}
    inputs, flat = {}, []
    for name, spec in named.items():
        if not isinstance(spec, tf.TensorSpec) or not (
            spec.dtype.is_floating or spec.dtype.is_integer or spec.dtype.is_bool
        ):
            raise ConfigError(
                f"--step keras: feature {name!r} is {spec}; the built-in model takes dense "
                "numeric tensors only: pass your own model with --model module:function"
            )
        inp = keras.Input(shape=tuple(spec.shape[1:]), dtype=spec.dtype.name, name=name)
        inputs[name] = inp
        x = keras.ops.cast(inp, "float32")
        flat.append(
            keras.layers.Flatten()(x) if len(spec.shape) > 1 else keras.ops.expand_dims(x, -1)
        )
    x = keras.layers.Concatenate()(flat) if len(flat) > 1 else flat[0]
    x = keras.layers.Dense(32, activation="relu")(x)
    out = keras.layers.Dense(1)(x)
    model = keras.Model(inputs if isinstance(features, dict) else inputs["x"], out)
    model.compile(optimizer="adam", loss="mse")
    return model
