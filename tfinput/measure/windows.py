"""Measurement windows: the plan (`WindowPlan`), one timed window, and its variants."""

from tfinput._src.measurement.windows import BENCH_PLAN as BENCH_PLAN
from tfinput._src.measurement.windows import CAPTURE_PLAN as CAPTURE_PLAN
from tfinput._src.measurement.windows import DEFAULT_WINDOW_SECONDS as DEFAULT_WINDOW_SECONDS
from tfinput._src.measurement.windows import ROOFLINE_PLAN as ROOFLINE_PLAN
from tfinput._src.measurement.windows import TUNER_PLAN as TUNER_PLAN
from tfinput._src.measurement.windows import Clock as Clock
from tfinput._src.measurement.windows import Progress as Progress
from tfinput._src.measurement.windows import Window as Window
from tfinput._src.measurement.windows import WindowPlan as WindowPlan
from tfinput._src.measurement.windows import batch_rows as batch_rows
from tfinput._src.measurement.windows import close_iterator as close_iterator
from tfinput._src.measurement.windows import consecutive_windows as consecutive_windows
from tfinput._src.measurement.windows import measure_window as measure_window
from tfinput._src.measurement.windows import run_window as run_window
from tfinput._src.measurement.windows import warm_up as warm_up
