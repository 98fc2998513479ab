"""Configs taking turns window by window, and the statistics of their windows."""

from tfinput._src.measurement.stats import ConfigStats as ConfigStats
from tfinput._src.measurement.stats import interleave as interleave
from tfinput._src.measurement.stats import stall_fraction as stall_fraction
from tfinput._src.measurement.stats import summarize as summarize
