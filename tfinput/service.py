"""tf.data service: run a tfinput pipeline on service workers after proving it is
native-only, with a guarded read; start dispatchers and workers; and measure a local
fleet of worker processes to size how many workers a host needs."""

from tfinput._src.core.service import PROCESSING_MODES as PROCESSING_MODES
from tfinput._src.core.service import ServiceRead as ServiceRead
from tfinput._src.core.service import distribute as distribute
from tfinput._src.core.service.guard import DEFAULT_STALL_TIMEOUT_S as DEFAULT_STALL_TIMEOUT_S
from tfinput._src.core.service.guard import GuardedRead as GuardedRead
from tfinput._src.core.service.guard import guarded as guarded
from tfinput._src.core.service.guard import guarded_dataset as guarded_dataset
from tfinput._src.core.service.guard import unguarded as unguarded
from tfinput._src.core.service.servers import LocalFleet as LocalFleet
from tfinput._src.core.service.servers import local_cluster as local_cluster
from tfinput._src.core.service.servers import serve_until_signal as serve_until_signal
from tfinput._src.core.service.servers import start_dispatcher as start_dispatcher
from tfinput._src.core.service.servers import start_worker as start_worker
from tfinput._src.core.service.servers import workers_needed as workers_needed
