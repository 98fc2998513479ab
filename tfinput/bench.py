"""Configs side by side, the roofline, and how a measurement is taken: ``tfinput bench``.

    from tfinput import bench
    pipeline = tfinput.tfrecord("data/*.tfrecord", schema)
    result = bench.measure(pipeline, bench.preset_configs(["naive", "heuristic", "autotune"]))
    print(result.to_json())

`measure` takes a fresh iterator per window and interleaves the configs window by
window; `roofline` is the machine's upper bound (docs/bench.md). Both take one
`MeasureOptions` (window counts, CPUs, probes; ``measurement=``), which `tuners.tune`
takes too, and measure in the windows of a `WindowPlan`. They live in the measurement
layer (`tfinput._src.measurement`, private), which the tuner (`tuners`) and the
profiler (`profiles`) measure with too.
"""

from tfinput._src.measurement.compare import BENCH_FORMAT as BENCH_FORMAT
from tfinput._src.measurement.compare import BenchResult as BenchResult
from tfinput._src.measurement.compare import load_configs as load_configs
from tfinput._src.measurement.compare import measure as measure
from tfinput._src.measurement.compare import preset_configs as preset_configs
from tfinput._src.measurement.roofline import Prediction as Prediction
from tfinput._src.measurement.roofline import Roofline as Roofline
from tfinput._src.measurement.roofline import SerialStage as SerialStage
from tfinput._src.measurement.roofline import Stage as Stage
from tfinput._src.measurement.roofline import roofline as roofline
from tfinput._src.measurement.roofline import roofline_from_stages as roofline_from_stages
from tfinput._src.measurement.roofline import serial_advice as serial_advice
from tfinput._src.measurement.target import MeasureOptions as MeasureOptions
from tfinput._src.measurement.windows import WindowPlan as WindowPlan
