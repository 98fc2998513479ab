"""Training-step kinds shared by the tuner (`tuners`) and the profiler (`profiles`)."""

from tfinput._src.measurement.probes import keras_backend as keras_backend
from tfinput._src.measurement.steps import make as make
from tfinput._src.measurement.steps.base import CLI_STEPS as CLI_STEPS
from tfinput._src.measurement.steps.base import STEP_CLASSES as STEP_CLASSES
from tfinput._src.measurement.steps.base import STEP_KINDS as STEP_KINDS
from tfinput._src.measurement.steps.base import FunctionStep as FunctionStep
from tfinput._src.measurement.steps.base import InputOnlyStep as InputOnlyStep
from tfinput._src.measurement.steps.base import JaxStep as JaxStep
from tfinput._src.measurement.steps.base import KerasFitStep as KerasFitStep
from tfinput._src.measurement.steps.base import KerasStep as KerasStep
from tfinput._src.measurement.steps.base import SimulatedStep as SimulatedStep
from tfinput._src.measurement.steps.base import Step as Step
from tfinput._src.measurement.steps.base import function_step as function_step
from tfinput._src.measurement.steps.base import input_only as input_only
from tfinput._src.measurement.steps.base import jax_step as jax_step
from tfinput._src.measurement.steps.base import simulated_step as simulated_step
from tfinput._src.measurement.steps.keras import keras_fit_step as keras_fit_step
from tfinput._src.measurement.steps.keras import keras_step as keras_step
