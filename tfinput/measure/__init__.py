"""The measurement layer: how tfinput times a pipeline feeding a step.

Above the core (schema, sources, pipeline) and below the applications that compare,
tune and profile (`tfinput.bench`, `tuners`, `profiles`), which all measure with it:

- `tfinput.measure.windows`: `WindowPlan` (warm-up batches, windows, batches per
  window) and the timing of one window (`measure_window`, `run_window`,
  `consecutive_windows`);
- `tfinput.measure.stats`: windows of several configs interleaved and summarised
  (`ConfigStats`, `summarize`);
- `tfinput.measure.options`: `MeasureOptions` (the plan's counts, the CPUs, the
  probes), what bench and the tuner take as ``measurement=``;
- `tfinput.measure.probes`: clocks, CPU and memory counters, the CPU count, the
  machine record;
- `tfinput.measure.compare`: configs side by side (`measure`, `BenchResult`), what
  ``tfinput bench`` runs and the tuner confirms its winner with;
- `tfinput.measure.roofline`: the machine's upper bound for a pipeline, stage by stage.

The training steps measured against (`tfinput.steps`) belong to this layer too.
Clocks, CPU counters and the CPU count are injectable, so every timing is testable
without sleeping.
"""

from tfinput._src.measurement.probes import available_cpus as available_cpus
from tfinput._src.measurement.probes import current_rss_bytes as current_rss_bytes
from tfinput._src.measurement.probes import keras_backend as keras_backend
from tfinput._src.measurement.probes import machine as machine
from tfinput._src.measurement.probes import peak_rss_bytes as peak_rss_bytes
from tfinput._src.measurement.probes import process_cpu_seconds as process_cpu_seconds
from tfinput._src.measurement.target import MeasureOptions as MeasureOptions
from tfinput._src.measurement.windows import BENCH_PLAN as BENCH_PLAN
from tfinput._src.measurement.windows import CAPTURE_PLAN as CAPTURE_PLAN
from tfinput._src.measurement.windows import ROOFLINE_PLAN as ROOFLINE_PLAN
from tfinput._src.measurement.windows import TUNER_PLAN as TUNER_PLAN
from tfinput._src.measurement.windows import Window as Window
from tfinput._src.measurement.windows import WindowPlan as WindowPlan
from tfinput._src.measurement.windows import consecutive_windows as consecutive_windows
from tfinput._src.measurement.windows import measure_window as measure_window
from tfinput._src.measurement.windows import run_window as run_window
