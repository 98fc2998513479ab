"""``tfinput export``: a SavedModel serving a saved Keras model from raw requests with the
training transforms (`tfinput.serving.export`)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from tfinput._src.applications.cli.args import add_output_arguments, check_output
from tfinput._src.applications.cli.console import console
from tfinput._src.applications.cli.registry import Command
from tfinput._src.core.errors import ConfigError

__all__ = ["EXPORT_COMMAND"]


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", metavar="MODEL_DIR", help="the SavedModel directory to write")
    p.add_argument(
        "--model", required=True, help="the trained model, saved with model.save('m.keras')"
    )
    p.add_argument("--schema", required=True, help="the training schema JSON")
    p.add_argument(
        "--layout",
        choices=["per_feature", "packed"],
        default="per_feature",
        help="the layout the model was trained on (default: per_feature)",
    )
    p.add_argument(
        "--multi-hot-format",
        choices=["dense", "sparse", "ragged"],
        default="dense",
        help="the multi-hot format the model was trained on (default: dense)",
    )
    add_output_arguments(p, json_help="machine-readable summary")


def _tensorflow_backend() -> None:
    """Run Keras on TensorFlow: the SavedModel calls the model in TensorFlow. A model
    trained on JAX exports the same (its ``.keras`` weights are backend-independent)."""
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "config"):
        if keras.config.backend() != "tensorflow":
            raise ConfigError(
                f"export: Keras already runs on {keras.config.backend()!r} in this process; "
                "run tfinput export in its own process"
            )
        return
    os.environ["KERAS_BACKEND"] = "tensorflow"


def _export(args: argparse.Namespace) -> int:
    """Load the model and write the SavedModel."""
    from tfinput._src.core.schema import Schema

    if not os.path.isfile(args.model):
        raise ConfigError(f"export: --model {args.model}: no such file")
    check_output(args.out, "export: MODEL_DIR", directory=True)
    schema = Schema.from_json(args.schema)
    _tensorflow_backend()
    import keras

    import tfinput._src.measurement.models  # noqa: F401  (registers tfinput's layers and models)
    from tfinput._src.applications import serving

    try:
        model = keras.saving.load_model(args.model)
    except (ValueError, TypeError, OSError) as e:
        raise ConfigError(f"export: cannot load --model {args.model}: {e}") from e
    summary = serving.export(
        args.out, schema, model, multi_hot_format=args.multi_hot_format, layout=args.layout
    )
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    out = console()
    out.print(f"wrote SavedModel {args.out}", markup=False)
    for name, what in serving.SIGNATURES.items():
        out.print(f"  {name}: {what}", markup=False)
    out.print(f"  schema and layout: {os.path.join(args.out, serving.ASSETS_DIR)}", markup=False)
    return 0


EXPORT_COMMAND = Command(
    name="export",
    help="write a SavedModel serving a Keras model from raw tf.Example or feature tensors",
    description=(
        "The SavedModel applies exactly the training transforms (hashing, clipping, log1p, "
        "padding, id checks, layout) before the model. Signatures: serving_default "
        "(serialized tf.Example), serve_raw (raw tensors by column), transform (the model "
        "inputs)."
    ),
    arguments=_arguments,
    run=_export,
    error_first_line=True,
)
