"""tfinput: fixed-shape, infeed-friendly tf.data input pipelines for ranking models.

``import tfinput`` is light: TensorFlow, pyarrow and Keras load only when a pipeline
is built or a module that needs them is used.
"""

from typing import TYPE_CHECKING

from tfinput.config import AUTOTUNE as AUTOTUNE
from tfinput.config import PipelineConfig as PipelineConfig
from tfinput.errors import ConfigError as ConfigError
from tfinput.errors import DataError as DataError
from tfinput.errors import ResumeError as ResumeError
from tfinput.errors import SchemaError as SchemaError
from tfinput.errors import ServiceError as ServiceError
from tfinput.errors import SourceError as SourceError
from tfinput.errors import TfinputError as TfinputError
from tfinput.schema import Categorical as Categorical
from tfinput.schema import Dense as Dense
from tfinput.schema import Label as Label
from tfinput.schema import MultiHot as MultiHot
from tfinput.schema import Schema as Schema
from tfinput.schema import Table as Table

__version__ = "0.1.0"

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
    from tfinput import layout as layout
    from tfinput import resume as resume
    from tfinput import steps as steps
    from tfinput import testing as testing
    from tfinput.inference import infer_schema as infer_schema
    from tfinput.layout import PackedLayout as PackedLayout
    from tfinput.pipeline import Pipeline as Pipeline
    from tfinput.pipeline import columnar as columnar
    from tfinput.pipeline import parquet as parquet
    from tfinput.pipeline import tfrecord as tfrecord
    from tfinput.pipeline import wrap as wrap
    from tfinput.resume import InputIterator as InputIterator
    from tfinput.serving import serving_fn as serving_fn
    from tfinput.sparsecore import sparsecore_stats as sparsecore_stats
    from tfinput.tpu import embedding_configs as embedding_configs
    from tfinput.tpu import keras_rs_configs as keras_rs_configs
    from tfinput.tpu import placement as placement


def __getattr__(name: str) -> object:
    """The names and submodules that import TensorFlow, pyarrow or Keras, on first use.

    Each import is a statement, ``import a.b as module`` (which never asks this function
    again), so tests/test_layers.py sees every one."""
    match name:
        case "Pipeline" | "tfrecord" | "parquet" | "columnar" | "wrap" | "pipeline":
            import tfinput.pipeline as module
        case "columnar_records":
            import tfinput.columnar_records as module
        case "infer_schema" | "inference":
            import tfinput.inference as module
        case "embedding_configs" | "keras_rs_configs" | "placement" | "tpu":
            import tfinput.tpu as module
        case "sparsecore_stats" | "sparsecore":
            import tfinput.sparsecore as module
        case "serving_fn" | "serving":
            import tfinput.serving as module
        case "PackedLayout" | "layout":
            import tfinput.layout as module
        case "InputIterator" | "resume":
            import tfinput.resume as module
        case "testing":
            import tfinput.testing as module
        case "steps":
            import tfinput.steps as module
        case "models":
            import tfinput.models as module
        case "retrieval":
            import tfinput.retrieval as module
        case "transforms":
            import tfinput.transforms as module
        case "bench":
            import tfinput.bench as module
        case "convert":
            import tfinput.convert as module
        case "datagen":
            import tfinput.datagen as module
        case "graph":
            import tfinput.graph as module
        case "service":
            import tfinput.service as module
        case _:
            raise AttributeError(f"module 'tfinput' has no attribute {name!r}")
    return module if name in _SUBMODULES else getattr(module, name)


#: The public modules (docs/api.md) that ``tfinput.<name>`` imports on first use.
_SUBMODULES = frozenset(
    {
        "bench",
        "columnar_records",
        "convert",
        "datagen",
        "graph",
        "inference",
        "layout",
        "models",
        "pipeline",
        "resume",
        "retrieval",
        "service",
        "serving",
        "sparsecore",
        "steps",
        "testing",
        "tpu",
        "transforms",
    }
)


def __dir__() -> list[str]:
    # With the public modules imported by the names above.
    return sorted({*__all__, *_SUBMODULES, "config", "errors", "schema"})
