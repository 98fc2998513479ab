"""What a measurement reads from the machine: CPU time, memory, CPU count, versions."""

from tfinput._src.measurement.probes import available_cpus as available_cpus
from tfinput._src.measurement.probes import current_rss_bytes as current_rss_bytes
from tfinput._src.measurement.probes import keras_backend as keras_backend
from tfinput._src.measurement.probes import machine as machine
from tfinput._src.measurement.probes import peak_rss_bytes as peak_rss_bytes
from tfinput._src.measurement.probes import process_cpu_seconds as process_cpu_seconds
