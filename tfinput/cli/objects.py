"""Objects named on the command line as ``MODULE:ATTRIBUTE`` (``--pipeline``,
``--model``, ``--step-fn``): `load_object`, which lives in the core (`tfinput._src.core.options`)
so that the step factory below the CLI (`tfinput.steps.make`) can use it too."""

from tfinput._src.core.options import load_object as load_object
