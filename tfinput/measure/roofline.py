"""The roofline: the machine's estimated upper bound for one pipeline, stage by stage."""

from tfinput._src.measurement.roofline import Prediction as Prediction
from tfinput._src.measurement.roofline import Roofline as Roofline
from tfinput._src.measurement.roofline import SerialStage as SerialStage
from tfinput._src.measurement.roofline import Stage as Stage
from tfinput._src.measurement.roofline import roofline as roofline
from tfinput._src.measurement.roofline import roofline_from_stages as roofline_from_stages
from tfinput._src.measurement.roofline import serial_advice as serial_advice
