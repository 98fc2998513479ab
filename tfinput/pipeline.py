"""`Pipeline`: an immutable pipeline definition that builds with any `PipelineConfig`."""

from tfinput._src.core._pipeline_check import CheckReport as CheckReport
from tfinput._src.core._pipeline_check import FileCheck as FileCheck
from tfinput._src.core.files import data_files as data_files
from tfinput._src.core.pipeline import Pipeline as Pipeline
from tfinput._src.core.pipeline import columnar as columnar
from tfinput._src.core.pipeline import parquet as parquet
from tfinput._src.core.pipeline import tfrecord as tfrecord
from tfinput._src.core.pipeline import wrap as wrap
