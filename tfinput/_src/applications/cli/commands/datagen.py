"""``tfinput datagen``: deterministic synthetic data (`tfinput.datagen`)."""

from __future__ import annotations

import argparse
import json

from tfinput._src.applications.cli.args import add_output_arguments, check_output, count
from tfinput._src.applications.cli.console import console, progress
from tfinput._src.applications.cli.registry import Command

__all__ = ["DATAGEN_COMMAND"]


def _arguments(p: argparse.ArgumentParser) -> None:
    from tfinput._src.applications.datagen import PRESETS

    p.add_argument("out", help="output directory")
    p.add_argument("--preset", choices=sorted(PRESETS), default="criteo-like")
    p.add_argument("--schema", help="generate data for this schema JSON instead of a preset")
    p.add_argument("--rows", type=count, required=True, help="rows, e.g. 400k or 1M")
    p.add_argument("--files", type=count, default=8)
    p.add_argument("--format", choices=["tfrecord", "parquet"], default="tfrecord")
    p.add_argument("--seed", type=int, default=0)
    add_output_arguments(p, json_help="machine-readable summary")


def _datagen(args: argparse.Namespace) -> int:
    """Write deterministic synthetic data."""
    from tfinput._src.applications import datagen
    from tfinput._src.core.schema import Schema

    check_output(args.out, "datagen: output", directory=True)
    schema = Schema.from_json(args.schema) if args.schema else None
    with progress() as bar:
        task = bar.add_task(f"datagen {args.format}", total=args.rows)
        result = datagen.generate_files(
            args.out,
            preset=args.preset,
            schema=schema,
            rows=args.rows,
            files=args.files,
            format=args.format,
            seed=args.seed,
            progress=lambda done, total: bar.update(task, completed=done),
        )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    console().print(
        f"wrote {result.rows:,} rows ({result.bytes / 2**20:,.1f} MiB) to "
        f"{len(result.paths)} {result.format} file(s) in {args.out}; "
        f"schema: {result.schema_path}",
        markup=False,
    )
    return 0


DATAGEN_COMMAND = Command(
    name="datagen",
    help="write deterministic synthetic data (Criteo-like) as TFRecord or Parquet",
    description="The same arguments always write the same rows, in any format.",
    arguments=_arguments,
    run=_datagen,
    error_first_line=True,
)
