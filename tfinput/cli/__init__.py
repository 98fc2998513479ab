"""The ``tfinput`` command: one registry of subcommands and one `main` that runs them."""

from tfinput._src.applications.cli import build_parser as build_parser
from tfinput._src.applications.cli import main as main
