"""CSV/TSV to sharded Parquet or TFRecord, streaming: ``tfinput convert``."""

from tfinput._src.applications.convert import BLOCK_SIZE as BLOCK_SIZE
from tfinput._src.applications.convert import LABEL_NAMES as LABEL_NAMES
from tfinput._src.applications.convert import MAX_REPORTED as MAX_REPORTED
from tfinput._src.applications.convert import PRESETS as PRESETS
from tfinput._src.applications.convert import BadRow as BadRow
from tfinput._src.applications.convert import ConvertResult as ConvertResult
from tfinput._src.applications.convert import convert as convert
from tfinput._src.applications.convert import preset_schema as preset_schema
