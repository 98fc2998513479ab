"""`PipelineConfig`: every tunable knob of a tfinput pipeline, in one frozen object."""

from tfinput._src.core.config import AUTOTUNE as AUTOTUNE
from tfinput._src.core.config import LAYOUTS as LAYOUTS
from tfinput._src.core.config import SERVICE_COMPRESSIONS as SERVICE_COMPRESSIONS
from tfinput._src.core.config import Buildable as Buildable
from tfinput._src.core.config import PipelineConfig as PipelineConfig
from tfinput._src.core.config import knob_names as knob_names
