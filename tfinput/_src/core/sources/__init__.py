"""Where batches come from: TFRecord, Parquet, or a user's dataset.

A source (see the `Source` protocol in `tfinput._src.core.sources.protocol`) turns a list of files
(already sharded for this input pipeline) and a `PipelineConfig` into records, batches
them and gives a ``decode`` function that maps one encoded batch to a raw batch (see
`tfinput.transforms`). `tfinput.Pipeline.build` strings the steps together and fuses
``decode`` with the transforms into one parallel ``map``, so parsing is vectorized:
batch first, then parse.

Modules: `protocol` (the `Source` contract, and the skeleton steps sources and the
pipeline share), `files` (paths and empty files), and one per source: `tfrecord`,
`parquet`, `dataset`. The columnar records' source is `tfinput._src.core.columnar.source`,
with the rest of that format.
"""

from __future__ import annotations

from tfinput._src.core.files import PathsLike as PathsLike
from tfinput._src.core.files import resolve_paths
from tfinput._src.core.sources._tfrecord_checks import SAMPLE_RECORDS as SAMPLE_RECORDS
from tfinput._src.core.sources._tfrecord_checks import check_first_example as check_first_example
from tfinput._src.core.sources.dataset import DatasetSource
from tfinput._src.core.sources.parquet import ParquetSource
from tfinput._src.core.sources.protocol import Decode as Decode
from tfinput._src.core.sources.protocol import (
    FileChecks,
    ReadRequest,
    ReadStages,
    RooflineStages,
    Source,
)
from tfinput._src.core.sources.protocol import interleave_files as interleave_files
from tfinput._src.core.sources.tfrecord import TFRecordSource

__all__ = [
    "Source",
    "FileChecks",
    "RooflineStages",
    "ReadRequest",
    "ReadStages",
    "TFRecordSource",
    "ParquetSource",
    "DatasetSource",
    "resolve_paths",
]
