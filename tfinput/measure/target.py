"""What the measurement takes: a pipeline, declared (`Target`), whatever form it came in."""

from tfinput._src.measurement.target import BatchFactory as BatchFactory
from tfinput._src.measurement.target import Buildable as Buildable
from tfinput._src.measurement.target import Measurable as Measurable
from tfinput._src.measurement.target import Target as Target
