"""The ``tfinput`` command: one registry of subcommands and one `main` that runs them."""

from tfinput._src.applications.cli.registry import build_parser as build_parser
from tfinput._src.applications.cli.registry import main as main
