"""``python -m tfinput.cli``: the ``tfinput`` command."""

from __future__ import annotations

import sys

from tfinput.cli import main

sys.exit(main())
