"""tfinput: fixed-shape, infeed-friendly tf.data input pipelines for ranking models.

``import tfinput`` is light: TensorFlow, pyarrow and Keras load only when a pipeline
is built or a module that needs them is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tfinput._src.core._moved import MOVED as _MOVED
from tfinput._src.core.deprecation import MovedModules as _MovedModules
from tfinput.config import AUTOTUNE, PipelineConfig
from tfinput.errors import (
    ConfigError,
    DataError,
    ResumeError,
    SchemaError,
    ServiceError,
    SourceError,
    TfinputError,
)
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema, Table

__version__ = "0.1.0"

# The modules that moved into tfinput._src import under their old names, with a warning.
_MovedModules(_MOVED, public="tfinput").install()

__all__ = [
    "AUTOTUNE",
    "PipelineConfig",
    "Schema",
    "Table",
    "Dense",
    "Categorical",
    "MultiHot",
    "Label",
    "TfinputError",
    "ConfigError",
    "SchemaError",
    "SourceError",
    "DataError",
    "ResumeError",
    "ServiceError",
    # lazily imported (TensorFlow / pyarrow):
    "Pipeline",
    "tfrecord",
    "parquet",
    "columnar",
    "wrap",
    "infer_schema",
    "embedding_configs",
    "keras_rs_configs",
    "placement",
    "sparsecore_stats",
    "serving_fn",
    "testing",
    "steps",
    "layout",
    "PackedLayout",
    "InputIterator",
    "resume",
]

_LAZY = {
    "Pipeline": "tfinput.pipeline",
    "tfrecord": "tfinput.pipeline",
    "parquet": "tfinput.pipeline",
    "columnar": "tfinput.columnar_records",
    "wrap": "tfinput.pipeline",
    "infer_schema": "tfinput.inference",
    "embedding_configs": "tfinput.tpu",
    "keras_rs_configs": "tfinput.tpu",
    "placement": "tfinput.tpu",
    "sparsecore_stats": "tfinput.sparsecore",
    "serving_fn": "tfinput.serving",
    "PackedLayout": "tfinput.layout",
    "InputIterator": "tfinput.resume",
}
_SUBMODULES = {
    "testing",
    "steps",
    "layout",
    "models",
    "retrieval",
    "tpu",
    "inference",
    "pipeline",
    "sources",
    "transforms",
    "bench",
    "convert",
    "datagen",
    "columnar_records",
    "graph",
    "service",
    "resume",
    "sparsecore",
    "serving",
}

if TYPE_CHECKING:  # pragma: no cover
    from tfinput import layout, steps, testing
    from tfinput.columnar_records import columnar
    from tfinput.inference import infer_schema
    from tfinput.layout import PackedLayout
    from tfinput.pipeline import Pipeline, parquet, tfrecord, wrap
    from tfinput.resume import InputIterator
    from tfinput.serving import serving_fn
    from tfinput.sparsecore import sparsecore_stats
    from tfinput.tpu import embedding_configs, keras_rs_configs, placement


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"tfinput.{name}")
    raise AttributeError(f"module 'tfinput' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(__all__) | _SUBMODULES)
