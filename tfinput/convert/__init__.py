"""CSV/TSV to sharded Parquet or TFRecord, streaming: ``tfinput convert``."""

from tfinput._src.applications.convert.run import MAX_REPORTED as MAX_REPORTED
from tfinput._src.applications.convert.run import BadRow as BadRow
from tfinput._src.applications.convert.run import ConvertResult as ConvertResult
from tfinput._src.applications.convert.run import convert as convert
