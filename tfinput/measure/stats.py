"""Configs taking turns window by window, and the statistics of their windows."""

from tfinput._src.measurement.compare import ConfigStats as ConfigStats
from tfinput._src.measurement.compare import stall_fraction as stall_fraction
from tfinput._src.measurement.compare import summarize as summarize
from tfinput._src.measurement.windows import interleave as interleave
