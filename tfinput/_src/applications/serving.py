"""Serve a model from raw requests with exactly the transforms it was trained with.

The transforms of a pipeline (hashing, clipping, ``log1p``, padding, id checks,
packing) are TensorFlow ops in one function, `tfinput.transforms.transform_batch`.
Serving runs that same function, so a served model sees what the trained model saw:

- `serving_fn` returns a `tf.function` taking either serialized ``tf.train.Example``
  bytes (``inputs="examples"``: one ``tf.io.parse_example`` with the pipeline's parse
  spec, as the TFRecord source does) or a dict of raw feature tensors
  (``inputs="raw"``), applying the transforms with the pipeline's multi-hot format and
  layout, then the model. Without a model it returns the model inputs.
- `export` writes a SavedModel (Keras 3 ``ExportArchive``) with the signatures
  ``serving_default`` (examples), ``serve_raw`` (raw tensors) and ``transform``
  (examples -> the model inputs, flattened), and the schema and layout JSON under
  ``assets.extra/``. ``tfinput export`` runs it on a saved ``.keras`` model.

Raw inputs, keyed by source column (the tf.Example key):

- a dense scalar or a categorical feature: ``[B]`` of its dtype (``float32``,
  ``int64`` or ``string``); a dense vector of length L: ``[B, L]``;
- a multi-hot feature: its ids flat, ``[N]``, under the column name, and the number of
  ids of each row, ``[B]`` int64, under ``<column>_row_lengths``; its weights column
  (when the schema has one) flat ``[N]`` with the same row lengths.

Labels are not served: the schema's labels are dropped.

Bad requests fail the call with a clear message, as bad records fail a pipeline:

- a feature missing from a tf.Example takes the schema's ``default`` (dense and
  categorical features) or is an empty list (multi-hot), exactly as in training;
  a missing key in a raw request is a `TypeError` from the signature naming it;
- a value of the wrong type fails ``parse_example`` (``InvalidArgumentError`` naming
  the key and the expected type); a raw tensor of the wrong dtype is refused by the
  signature;
- an id out of its table's range under ``out_of_range="error"`` fails with
  ``tfinput DataError: ... feature ... id ... outside table ...``, the message training
  gives; under ``modulo``, ``clip`` or ``default`` it is mapped as in training.

The model is called on the TensorFlow backend (`export` needs Keras on TensorFlow; a
model trained on JAX is saved as ``.keras`` and exported with
``KERAS_BACKEND=tensorflow tfinput export ...``: the weights are the same).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tfinput._src.core.config import LAYOUTS
from tfinput._src.core.errors import ConfigError, SchemaError
from tfinput._src.core.files import StagedDir
from tfinput._src.core.schema import Categorical, Dense, MultiHot, Schema

if TYPE_CHECKING:
    import types
    from collections.abc import Callable

    import keras
    import tensorflow as tf

    from tfinput._src.core.layout import PackedLayout
    from tfinput._src.core.pipeline import Pipeline

    Tensors = Mapping[str, tf.Tensor | tf.RaggedTensor | tf.SparseTensor]
    #: Model inputs as a pipeline yields them: a tensor or a dict of tensors per group.
    Features = Mapping[str, tf.Tensor | tf.RaggedTensor | tf.SparseTensor | Tensors]

#: The raw input holding a multi-hot column's ids per row: ``<column>_row_lengths``.
ROW_LENGTHS_SUFFIX = "_row_lengths"
#: The signatures `export` writes, and what each takes.
SIGNATURES = {
    "serving_default": "examples: serialized tf.train.Example [B] -> model outputs",
    "serve_raw": "raw feature tensors by column -> model outputs",
    "transform": "examples: serialized tf.train.Example [B] -> the model inputs, flattened",
}
#: Where `export` puts the schema and the layout inside the SavedModel directory.
ASSETS_DIR = "assets.extra"
_OP_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/]*$")


class ServingSpec:
    """What serving must reproduce of a pipeline: its schema (labels dropped), multi-hot
    format and layout.

    Args:
      source: A `tfinput.Pipeline` (its schema, ``multi_hot_format`` and ``layout``) or
        a `tfinput.Schema`.
      multi_hot_format: Overrides the pipeline's (default ``dense``).
      layout: ``per_feature`` or ``packed``; overrides the pipeline's.

    Raises:
      ConfigError: an unknown format or layout, the packed layout with a multi-hot
        format other than ``dense``, or ``source`` is neither a pipeline nor a schema.
    """

    def __init__(
        self,
        source: Pipeline | Schema,
        *,
        multi_hot_format: str | None = None,
        layout: str | None = None,
    ):
        from tfinput._src.core.pipeline import Pipeline
        from tfinput._src.core.transforms import MULTI_HOT_FORMATS

        if isinstance(source, Schema):
            schema, fmt, lay = source, "dense", "per_feature"
        elif isinstance(source, Pipeline):
            schema, fmt, lay = source.schema, source.multi_hot_format, source.layout
        else:
            raise ConfigError(
                f"serving: expected a tfinput.Pipeline or tfinput.Schema, got "
                f"{type(source).__name__}"
            )
        fmt = multi_hot_format or fmt
        lay = layout or lay
        if fmt not in MULTI_HOT_FORMATS:
            raise ConfigError(
                f"multi_hot_format: expected one of {list(MULTI_HOT_FORMATS)}, got {fmt!r}"
            )
        if lay not in LAYOUTS:
            raise ConfigError(f"layout: expected one of {list(LAYOUTS)}, got {lay!r}")
        if lay == "packed" and fmt != "dense":
            raise ConfigError(f'layout "packed" needs multi_hot_format "dense", got {fmt!r}')
        self.training_schema = schema
        self.schema = schema.replace(labels=())
        self.multi_hot_format = fmt
        self.layout = lay

    @property
    def packed_layout(self) -> PackedLayout | None:
        from tfinput._src.core.layout import PackedLayout

        return PackedLayout.from_schema(self.schema) if self.layout == "packed" else None

    def transform(self, raw: Tensors) -> Features:
        """Raw batch by column -> the model inputs (the training pipeline's features)."""
        from tfinput._src.core.transforms import transform_batch

        features, _ = transform_batch(
            dict(raw),
            self.schema,
            batch_size=None,
            multi_hot_format=self.multi_hot_format,
            layout=self.packed_layout,
        )
        return features

    def parse(
        self, examples: tf.Tensor
    ) -> dict[str, tf.Tensor | tf.RaggedTensor | tf.SparseTensor]:
        """Serialized ``tf.train.Example`` ``[B]`` -> raw batch, as the TFRecord source
        decodes it."""
        import tensorflow as tf

        from tfinput._src.core.transforms import parse_spec

        return tf.io.parse_example(examples, parse_spec(self.schema))

    def raw_from_tensors(
        self, tensors: Mapping[str, tf.Tensor]
    ) -> dict[str, tf.Tensor | tf.RaggedTensor]:
        """The raw signature's flat tensors -> the raw batch `transform` takes (multi-hot
        columns become ragged rows)."""
        import tensorflow as tf

        raw = {k: v for k, v in tensors.items() if not k.endswith(ROW_LENGTHS_SUFFIX)}
        for f in self.schema.multi_hot:
            lengths = tf.cast(tensors[f.source + ROW_LENGTHS_SUFFIX], tf.int64)
            raw[f.source] = tf.RaggedTensor.from_row_lengths(tensors[f.source], lengths)
            if f.weights:
                raw[f.weights] = tf.RaggedTensor.from_row_lengths(tensors[f.weights], lengths)
        return raw

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": self.training_schema.to_dict(),
            "multi_hot_format": self.multi_hot_format,
            "layout": self.layout,
        }


def raw_signature(schema: Schema) -> dict[str, tf.TensorSpec]:
    """The `tf.TensorSpec` of every raw input, by name (see the module docstring).

    Raises:
      ConfigError: a column name is not a valid signature input name, or a column's
        ``<column>_row_lengths`` collides with another column.
    """
    import tensorflow as tf

    from tfinput._src.core.transforms import TF_DTYPES

    specs: dict[str, tf.TensorSpec] = {}

    def add(name: str, shape: list, dtype: tf.DType) -> None:
        if not _OP_NAME.match(name):
            raise ConfigError(
                f"serving: column {name!r} cannot name a signature input (letters, "
                "digits, '.', '_', '-', '/'); rename it in the data and the schema"
            )
        if name in specs:
            raise ConfigError(
                f"serving: raw input {name!r} is needed twice (a column named like "
                f"another multi-hot column's '{ROW_LENGTHS_SUFFIX}' input); rename it"
            )
        specs[name] = tf.TensorSpec(shape, dtype, name=name)

    for f in schema.features:
        if isinstance(f, Dense):
            add(f.source, [None] if f.length is None else [None, f.length], TF_DTYPES[f.dtype])
        elif isinstance(f, Categorical):
            add(f.source, [None], TF_DTYPES[f.dtype])
        elif isinstance(f, MultiHot):
            add(f.source, [None], TF_DTYPES[f.dtype])
            add(f.source + ROW_LENGTHS_SUFFIX, [None], tf.int64)
            if f.weights:
                add(f.weights, [None], tf.float32)
    return specs


def flatten_features(features: Features) -> dict[str, tf.Tensor]:
    """Model inputs as one flat dict a signature can return: ``"dense/I1"``,
    ``"ids/C1"``, ``"weights/genres"`` (per-feature layout) or ``"dense"``, ``"ids"``,
    ``"weights"`` (packed). Sparse and ragged values are densified with 0."""
    import tensorflow as tf

    out: dict[str, tf.Tensor] = {}
    for group, value in features.items():
        if isinstance(value, Mapping):
            for name, tensor in value.items():
                out[f"{group}/{name}"] = _dense(tensor, tf)
        else:
            out[group] = _dense(value, tf)
    return out


def _dense(
    tensor: tf.Tensor | tf.RaggedTensor | tf.SparseTensor, tf: types.ModuleType
) -> tf.Tensor:
    if isinstance(tensor, tf.SparseTensor):
        return tf.sparse.to_dense(tensor)
    if isinstance(tensor, tf.RaggedTensor):
        return tensor.to_tensor()
    return tensor


def _outputs(value: object) -> dict[str, object]:
    """A model's outputs as the flat dict a signature returns (``predictions`` for a
    single tensor)."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (list, tuple)):
        return {f"predictions_{i}": v for i, v in enumerate(value)}
    return {"predictions": value}


def serving_fn(
    source: Pipeline | Schema,
    model: keras.Model | None = None,
    *,
    inputs: str = "examples",
    multi_hot_format: str | None = None,
    layout: str | None = None,
) -> tf.types.experimental.PolymorphicFunction:
    """A `tf.function` from a raw request to the model's outputs, through exactly the
    training transforms.

    Args:
      source: The training `tfinput.Pipeline` (its schema, multi-hot format and layout
        are used) or a `tfinput.Schema` (``dense`` multi-hot, ``per_feature``).
      model: A Keras model (TensorFlow backend) or any callable taking the model
        inputs; None returns the model inputs themselves (the pipeline's features).
      inputs: ``examples`` (a ``[B]`` string tensor of serialized ``tf.train.Example``)
        or ``raw`` (a dict of raw tensors, see `raw_signature`).
      multi_hot_format: Overrides the pipeline's.
      layout: Overrides the pipeline's (``per_feature`` or ``packed``).

    Returns:
      A `tf.function` with a fixed input signature. With a model it returns the flat
      dict of outputs (``{"predictions": ...}`` for a single output); without one, the
      features as the pipeline yields them.

    Raises:
      ConfigError: an unknown ``inputs``, format or layout; a Keras model on a backend
        other than TensorFlow.
    """
    import tensorflow as tf

    spec = ServingSpec(source, multi_hot_format=multi_hot_format, layout=layout)
    check_trained_schema(model, spec.training_schema)
    call = _model_call(model)

    if inputs == "examples":

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def from_examples(examples: tf.Tensor) -> object:
            return call(spec.transform(spec.parse(examples)))

        return from_examples
    if inputs == "raw":

        @tf.function(input_signature=[raw_signature(spec.schema)])
        def from_raw(tensors: Mapping[str, tf.Tensor]) -> object:
            return call(spec.transform(spec.raw_from_tensors(tensors)))

        return from_raw
    raise ConfigError(f'inputs: expected "examples" or "raw", got {inputs!r}')


def check_trained_schema(model: keras.Model, schema: Schema) -> None:
    """Refuse to serve ``model`` through ``schema`` when the model records the schema it
    was trained with (``model.schema``: `tfinput.models` keep it in their config) and
    the two would transform a request differently: served ids or values would not be
    the ones it learned from.

    Raises:
      SchemaError: naming each feature and field that differs.
    """
    trained = getattr(model, "schema", None)
    if not isinstance(trained, Schema):
        return
    if differences := transform_differences(trained, schema):
        raise SchemaError(
            "serving: the schema given is not the one the model was trained with (the "
            f"model records it): {'; '.join(differences)}. Serve through the training "
            "schema (model.schema, or the schema.json the model was trained with)"
        )


def transform_differences(trained: Schema, given: Schema) -> list[str]:
    """What would make ``given`` transform a request differently from ``trained``, in
    words: features missing or added, any field of a feature, and the vocabulary size
    of a feature's table (ids are folded or hashed into it). Labels, and table fields
    the model alone uses (``dim``, ``combiner``), are not compared."""

    def features(schema: Schema) -> dict[str, dict[str, object]]:
        out = {}
        for f in schema.features:
            fields = {"kind": f.kind, **dataclasses.asdict(f)}
            table = getattr(f, "table", None)
            if table is not None:
                fields["table vocabulary_size"] = schema.table(table).vocabulary_size
            out[f.name] = fields
        return out

    a, b = features(trained), features(given)
    out = [f"feature {n!r} is missing (the model was trained with it)" for n in a if n not in b]
    out += [f"feature {n!r} was not in the training schema" for n in b if n not in a]
    for name in (n for n in a if n in b):
        for field in sorted(set(a[name]) | set(b[name])):
            x, y = a[name].get(field), b[name].get(field)
            if x != y:
                out.append(f"feature {name!r} {field}: trained {x!r}, given {y!r}")
    return out


def _model_call(model: keras.Model) -> Callable[[Features], object]:
    if model is None:
        return lambda features: features
    _require_tensorflow_backend(model)
    if hasattr(model, "train_on_batch"):  # a Keras model: inference mode
        return lambda features: _outputs(model(features, training=False))
    if not callable(model):
        raise ConfigError(f"serving: model must be callable, got {type(model).__name__}")
    return lambda features: _outputs(model(features))


def _require_tensorflow_backend(model: keras.Model) -> None:
    if not hasattr(model, "train_on_batch"):  # not a Keras model
        return
    import keras

    backend = keras.config.backend()
    if backend != "tensorflow":
        raise ConfigError(
            f"serving: the Keras backend is {backend!r}; serving functions and SavedModel "
            "export run the model in TensorFlow. Save the model (model.save('model.keras')) "
            "and export it in a TensorFlow-backend process: "
            "KERAS_BACKEND=tensorflow tfinput export OUT_DIR --model model.keras --schema "
            "schema.json"
        )


def export(
    path: str | os.PathLike[str],
    source: Pipeline | Schema,
    model: keras.Model,
    *,
    multi_hot_format: str | None = None,
    layout: str | None = None,
) -> dict[str, object]:
    """Write a SavedModel serving ``model`` from raw requests (see `SIGNATURES`).

    The SavedModel is written whole or not at all: into a hidden staging folder
    beside ``path`` (``.NAME.tfinput-staging-PID-...``), put in place by one rename
    once every file is written and flushed to disk; an export stopped before (an
    error, Ctrl-C, ``kill -9``) leaves nothing at ``path``, and the next export to it
    removes the staging folder.

    Args:
      path: The SavedModel directory to write (created; must not hold a SavedModel).
      source: The training pipeline or its schema (see `serving_fn`).
      model: A Keras 3 model on the TensorFlow backend.
      multi_hot_format: Overrides the pipeline's.
      layout: Overrides the pipeline's.

    Returns:
      A JSON-ready summary: the path, the signatures and their inputs, the format and
      layout. ``assets.extra/tfinput_serving.json`` holds the same plus the schema, and
      ``assets.extra/tfinput_schema.json`` the schema alone.

    Raises:
      ConfigError: ``path`` already holds a SavedModel, the model is not a Keras model
        on the TensorFlow backend, or the arguments of `serving_fn` are wrong.
    """
    import keras
    import tensorflow as tf

    path = os.fspath(path)
    if os.path.exists(os.path.join(path, "saved_model.pb")):
        raise ConfigError(f"export: {path} already holds a SavedModel; choose a new directory")
    if not hasattr(model, "train_on_batch"):
        raise ConfigError(f"export: expected a Keras model, got {type(model).__name__}")
    spec = ServingSpec(source, multi_hot_format=multi_hot_format, layout=layout)
    check_trained_schema(model, spec.training_schema)
    options = {"multi_hot_format": spec.multi_hot_format, "layout": spec.layout}
    examples = serving_fn(spec.training_schema, model, inputs="examples", **options)
    raw = serving_fn(spec.training_schema, model, inputs="raw", **options)
    features = serving_fn(spec.training_schema, None, inputs="examples", **options)

    archive = keras.export.ExportArchive()
    archive.track(model)
    examples_sig = [tf.TensorSpec([None], tf.string, name="examples")]
    archive.add_endpoint("serving_default", examples.python_function, examples_sig)
    archive.add_endpoint("serve_raw", raw.python_function, [raw_signature(spec.schema)])
    archive.add_endpoint(
        "transform",
        lambda e: flatten_features(features.python_function(e)),
        examples_sig,
    )
    summary = _summary(path, spec, options)
    # Written whole or not at all: into a hidden staging folder beside ``path``, put in
    # place by one rename once every file (assets included) is written and flushed; a
    # killed export leaves only the staging folder, which the next export removes.
    with StagedDir(path) as stage:
        archive.write_out(str(stage.path), verbose=False)
        assets = os.path.join(stage.path, ASSETS_DIR)
        os.makedirs(assets, exist_ok=True)
        spec.training_schema.to_json(os.path.join(assets, "tfinput_schema.json"))
        with open(os.path.join(assets, "tfinput_serving.json"), "w") as f:
            json.dump({**summary, **spec.to_dict()}, f, indent=2)
        stage.commit()
    return summary


def _summary(path: str, spec: ServingSpec, options: dict[str, object]) -> dict[str, object]:
    """`export`'s JSON-ready summary: the path, the signatures and their inputs, the
    format and layout."""
    return {
        "path": path,
        "signatures": {
            "serving_default": {"examples": "string [B]"},
            "serve_raw": {
                name: f"{s.dtype.name} {list(s.shape)}"
                for name, s in raw_signature(spec.schema).items()
            },
            "transform": {"examples": "string [B]"},
        },
        **options,
    }
