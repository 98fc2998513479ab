"""The built-in default data set: what ``tfinput demo`` (and ``tune --demo``) tunes and
``tfinput profile --demo`` profiles, with no user data needed."""

from tfinput._src.applications.cli.args import DEMO as DEMO
from tfinput._src.applications.cli.args import demo_pipeline as demo_pipeline
