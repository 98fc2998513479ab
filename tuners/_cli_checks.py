"""What ``tfinput tune`` refuses before any work: arguments that make no sense, and an
output folder whose disk cannot hold the outputs (one line each, naming the flag)."""

from __future__ import annotations

import argparse
import math
import shutil
from pathlib import Path

from tfinput.errors import ConfigError
from tuners._budget import MIN_WINDOWS


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse, before anything else, values that make no sense: one line naming the
    argument, what it must be, and what was given.

    Raises:
      ConfigError: the first bad value.
    """
    counts = {
        "--n-trials": args.n_trials,
        "--batch-size": args.batch_size,
        "--windows": args.windows,
        "--window-batches": args.window_batches,
        "--confirm-top": args.confirm_top,
        "--confirm-windows": args.confirm_windows,
    }
    for flag, value in counts.items():
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {value}")
    if args.warmup_batches < 0:
        raise ConfigError(f"--warmup-batches must be >= 0, got {args.warmup_batches}")
    for flag, value, unit in (
        ("--timeout", args.timeout, "seconds"),
        ("--target-rate", args.target_rate, "examples/s"),
    ):
        if value is not None and not 0 < value < math.inf:
            raise ConfigError(f"{flag} must be a positive number of {unit}, got {value:g}")
    seconds = args.window_seconds
    if seconds is not None and not 0 <= seconds < math.inf:
        raise ConfigError(f"--window-seconds must be 0 or more, got {seconds:g}")
    if seconds and args.timeout is not None:
        windows = min(args.windows, MIN_WINDOWS)
        if windows * seconds > args.timeout:
            raise ConfigError(
                f"--window-seconds {seconds:g} does not fit in --timeout {args.timeout:g}: a "
                f"trial measures at least {windows} windows of at least {seconds:g} s "
                f"({windows * seconds:g} s)"
            )
    if args.storage and not args.study_name:
        raise ConfigError("--storage needs --study-name (to share or resume the study)")


def check_free_space(out: str) -> None:
    """Refuse, before the study, an output folder whose disk cannot hold the outputs
    (`tuners._report.outputs_size`: report.html inlines plotly.js).

    Raises:
      ConfigError: naming the folder, the space free and the space needed.
    """
    from tuners._report import outputs_size

    folder = Path(out).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:  # not a folder we can ask: the writes say what is wrong
        return
    need = outputs_size()
    if free < need:
        raise ConfigError(
            f"--out {out}: {free / 1e6:,.1f} MB free on its disk, and the outputs need "
            f"about {need / 1e6:,.1f} MB (report.html inlines plotly.js): free space or "
            "choose another --out"
        )
