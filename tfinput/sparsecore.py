"""SparseCore buffer limits measured from the data."""

from tfinput._src.applications.sparsecore import (
    DEFAULT_SPARSECORES_PER_DEVICE as DEFAULT_SPARSECORES_PER_DEVICE,
)
from tfinput._src.applications.sparsecore import KERAS_RS_DEFAULT_LIMIT as KERAS_RS_DEFAULT_LIMIT
from tfinput._src.applications.sparsecore import MLPERF_LIMIT as MLPERF_LIMIT
from tfinput._src.applications.sparsecore import Limits as Limits
from tfinput._src.applications.sparsecore import Overflow as Overflow
from tfinput._src.applications.sparsecore import SparseCoreStats as SparseCoreStats
from tfinput._src.applications.sparsecore import Stack as Stack
from tfinput._src.applications.sparsecore import StackStats as StackStats
from tfinput._src.applications.sparsecore import plan_stacks as plan_stacks
from tfinput._src.applications.sparsecore import sparsecore_stats as sparsecore_stats
