"""tfinput: fixed-shape, infeed-friendly tf.data input pipelines for ranking models.

``import tfinput`` is light: TensorFlow, pyarrow and Keras load only when a pipeline
is built or a module that needs them is used.
"""

from __future__ import annotations

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

if TYPE_CHECKING:  # pragma: no cover
    from tfinput import layout, resume, steps, testing
    from tfinput.columnar_records import columnar
    from tfinput.inference import infer_schema
    from tfinput.layout import PackedLayout
    from tfinput.pipeline import Pipeline, parquet, tfrecord, wrap
    from tfinput.resume import InputIterator
    from tfinput.serving import serving_fn
    from tfinput.sparsecore import sparsecore_stats
    from tfinput.tpu import embedding_configs, keras_rs_configs, placement


def __getattr__(name: str) -> Any:
    """The names and submodules that import TensorFlow, pyarrow or Keras, on first use.

    Each import is a statement, ``import a.b as module`` (which never asks this function
    again), so tests/test_layers.py sees every one. ``sources`` is its old name: it
    imports with the deprecation warning."""
    match name:
        case "Pipeline" | "tfrecord" | "parquet" | "wrap":
            import tfinput.pipeline as module
        case "columnar":
            import tfinput.columnar_records as module
        case "infer_schema":
            import tfinput.inference as module
        case "embedding_configs" | "keras_rs_configs" | "placement":
            import tfinput.tpu as module
        case "sparsecore_stats":
            import tfinput.sparsecore as module
        case "serving_fn":
            import tfinput.serving as module
        case "PackedLayout":
            import tfinput.layout as module
        case "InputIterator":
            import tfinput.resume as module
        case "testing":
            import tfinput.testing as module
        case "steps":
            import tfinput.steps as module
        case "layout":
            import tfinput.layout as module
        case "models":
            import tfinput.models as module
        case "retrieval":
            import tfinput.retrieval as module
        case "tpu":
            import tfinput.tpu as module
        case "inference":
            import tfinput.inference as module
        case "pipeline":
            import tfinput.pipeline as module
        case "sources":
            import tfinput.sources as module
        case "transforms":
            import tfinput.transforms as module
        case "bench":
            import tfinput.bench as module
        case "convert":
            import tfinput.convert as module
        case "datagen":
            import tfinput.datagen as module
        case "columnar_records":
            import tfinput.columnar_records as module
        case "graph":
            import tfinput.graph as module
        case "service":
            import tfinput.service as module
        case "resume":
            import tfinput.resume as module
        case "sparsecore":
            import tfinput.sparsecore as module
        case "serving":
            import tfinput.serving as module
        case _:
            raise AttributeError(f"module 'tfinput' has no attribute {name!r}")
    return module if name in _SUBMODULES else getattr(module, name)


_SUBMODULES = frozenset(
    {
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
)


def __dir__() -> list[str]:
    return sorted(set(__all__) | _SUBMODULES)
