"""Synthetic Criteo-like data in a few lines, for tests, examples and benchmarks."""

from tfinput._src.applications.testing import Columns as Columns
from tfinput._src.applications.testing import criteo_like_schema as criteo_like_schema
from tfinput._src.applications.testing import generate as generate
from tfinput._src.applications.testing import small_schema as small_schema
from tfinput._src.applications.testing import to_arrow as to_arrow
from tfinput._src.applications.testing import to_examples as to_examples
from tfinput._src.applications.testing import wire_columns as wire_columns
from tfinput._src.applications.testing import write_columnar as write_columnar
from tfinput._src.applications.testing import write_parquet as write_parquet
from tfinput._src.applications.testing import write_tfrecord as write_tfrecord
