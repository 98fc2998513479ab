"""The console every ``tfinput`` command prints with, and its progress bar."""

from tfinput._src.applications.cli.console import PIPED_WIDTH as PIPED_WIDTH
from tfinput._src.applications.cli.console import console as console
from tfinput._src.applications.cli.console import progress as progress
