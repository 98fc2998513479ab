"""The command registry: every ``tfinput`` subcommand, and the one `main` that runs them."""

from tfinput._src.applications.cli.registry import COMMANDS as COMMANDS
from tfinput._src.applications.cli.registry import STDOUT_CLOSED as STDOUT_CLOSED
from tfinput._src.applications.cli.registry import Command as Command
from tfinput._src.applications.cli.registry import build_parser as build_parser
from tfinput._src.applications.cli.registry import commands as commands
from tfinput._src.applications.cli.registry import main as main
from tfinput._src.applications.cli.registry import run_command as run_command
