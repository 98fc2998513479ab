"""Configs measured side by side, interleaved window by window (``tfinput bench``)."""

from tfinput._src.measurement.compare import BENCH_FORMAT as BENCH_FORMAT
from tfinput._src.measurement.compare import BenchResult as BenchResult
from tfinput._src.measurement.compare import load_configs as load_configs
from tfinput._src.measurement.compare import measure as measure
from tfinput._src.measurement.compare import preset_configs as preset_configs
