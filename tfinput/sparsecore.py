"""SparseCore: buffer limits measured from the data, and jax-tpu-embedding's input
preprocessing off the training thread."""

from tfinput._src.applications.sparsecore import sparsecore_stats as sparsecore_stats
from tfinput._src.applications.sparsecore._batches import LimitsExceeded as LimitsExceeded
from tfinput._src.applications.sparsecore._step import sparsecore_step as sparsecore_step
from tfinput._src.applications.sparsecore.feed import SparseCoreFeed as SparseCoreFeed
from tfinput._src.applications.sparsecore.feed import sparsecore_feed as sparsecore_feed
from tfinput._src.applications.sparsecore.minibatching import AllReduce as AllReduce
from tfinput._src.applications.sparsecore.plan import SparseCorePlan as SparseCorePlan
from tfinput._src.applications.sparsecore.results import Limits as Limits
from tfinput._src.applications.sparsecore.results import Overflow as Overflow
from tfinput._src.applications.sparsecore.results import SparseCoreStats as SparseCoreStats
from tfinput._src.applications.sparsecore.results import StackStats as StackStats
from tfinput._src.applications.sparsecore.stacks import (
    DEFAULT_SPARSECORES_PER_DEVICE as DEFAULT_SPARSECORES_PER_DEVICE,
)
from tfinput._src.applications.sparsecore.stacks import (
    KERAS_RS_DEFAULT_LIMIT as KERAS_RS_DEFAULT_LIMIT,
)
from tfinput._src.applications.sparsecore.stacks import MLPERF_LIMIT as MLPERF_LIMIT
from tfinput._src.applications.sparsecore.stacks import Stack as Stack
from tfinput._src.applications.sparsecore.stacks import plan_stacks as plan_stacks
from tfinput._src.applications.sparsecore.workers import SparseCoreFeedStats as SparseCoreFeedStats
from tfinput._src.applications.sparsecore.workers import TableUsage as TableUsage
