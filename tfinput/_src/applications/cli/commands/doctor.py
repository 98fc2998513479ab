"""``tfinput doctor``: the versions a bug report needs."""

from __future__ import annotations

import argparse
import json

from tfinput._src.applications.cli.args import add_output_arguments
from tfinput._src.applications.cli.registry import Command

__all__ = ["DOCTOR_COMMAND"]


def _doctor(args: argparse.Namespace) -> int:
    from tfinput._src.applications.doctor import report

    rep = report()
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2))
    else:
        print("\n".join(rep.lines()))
    return 0


DOCTOR_COMMAND = Command(
    name="doctor",
    help="versions of TensorFlow, Keras (and backend), numpy, pyarrow, optuna, Python "
    "and the optional parts: paste it into a bug report",
    arguments=add_output_arguments,
    run=_doctor,
)
