"""`MeasureOptions`: how a measurement is taken, in one frozen object."""

from tfinput._src.measurement.options import MeasureOptions as MeasureOptions
