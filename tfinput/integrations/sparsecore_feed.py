"""SparseCore-ready batches: jax-tpu-embedding's input preprocessing off the training thread."""

from tfinput._src.applications.integrations.sparsecore_feed import SparseCoreFeed as SparseCoreFeed
from tfinput._src.applications.integrations.sparsecore_feed import (
    SparseCoreFeedStats as SparseCoreFeedStats,
)
from tfinput._src.applications.integrations.sparsecore_feed import SparseCorePlan as SparseCorePlan
from tfinput._src.applications.integrations.sparsecore_feed import TableUsage as TableUsage
from tfinput._src.applications.integrations.sparsecore_feed import (
    sparsecore_feed as sparsecore_feed,
)
from tfinput._src.applications.integrations.sparsecore_feed import (
    sparsecore_step as sparsecore_step,
)
