"""The ``tfinput`` command: `main` runs it (``tfinput.cli.main([...])`` from Python)."""

from tfinput._src.applications.cli.registry import main as main
