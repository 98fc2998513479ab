"""`MeasureOptions`: how a measurement is taken, in one frozen object."""

from tfinput._src.measurement.target import MeasureOptions as MeasureOptions
