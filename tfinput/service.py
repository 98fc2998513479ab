"""Run a tfinput pipeline on tf.data service workers, after proving it is native-only."""

from tfinput._src.applications.service import DEFAULT_STALL_TIMEOUT_S as DEFAULT_STALL_TIMEOUT_S
from tfinput._src.applications.service import PROCESSING_MODES as PROCESSING_MODES
from tfinput._src.applications.service import GuardedRead as GuardedRead
from tfinput._src.applications.service import distribute as distribute
from tfinput._src.applications.service import guarded as guarded
from tfinput._src.applications.service import guarded_dataset as guarded_dataset
from tfinput._src.applications.service import local_cluster as local_cluster
from tfinput._src.applications.service import serve_until_signal as serve_until_signal
from tfinput._src.applications.service import start_dispatcher as start_dispatcher
from tfinput._src.applications.service import start_worker as start_worker
from tfinput._src.applications.service import unguarded as unguarded
