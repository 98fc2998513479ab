"""Arguments shared by the ``tfinput`` commands, and the one function from arguments to
a pipeline."""

from tfinput._src.applications.cli.args import add_output_arguments as add_output_arguments
from tfinput._src.applications.cli.args import add_source_arguments as add_source_arguments
from tfinput._src.applications.cli.args import add_step_arguments as add_step_arguments
from tfinput._src.applications.cli.args import check_output as check_output
from tfinput._src.applications.cli.args import count as count
from tfinput._src.applications.cli.args import delimiter as delimiter
from tfinput._src.applications.cli.args import find_schema as find_schema
from tfinput._src.applications.cli.args import list_columns as list_columns
from tfinput._src.applications.cli.args import pipeline_from_args as pipeline_from_args
from tfinput._src.applications.cli.args import pipeline_from_paths as pipeline_from_paths
from tfinput._src.applications.cli.args import pipeline_from_spec as pipeline_from_spec
from tfinput._src.applications.cli.args import service_from_args as service_from_args
from tfinput._src.applications.cli.args import takes_config as takes_config
from tfinput._src.applications.cli.args import (
    tfinput_pipeline_from_args as tfinput_pipeline_from_args,
)
