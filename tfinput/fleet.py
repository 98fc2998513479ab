"""Reading a pipeline through tf.data service: where the service is, and a local fleet of
worker processes for measuring how many workers a host needs."""

from tfinput._src.applications.fleet import LocalFleet as LocalFleet
from tfinput._src.applications.fleet import ServiceRead as ServiceRead
from tfinput._src.applications.fleet import workers_needed as workers_needed
