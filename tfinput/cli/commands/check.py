"""``tfinput check``: read every file through the schema and report problems per file."""

from __future__ import annotations

import argparse
import json

from tfinput.cli.args import add_output_arguments, add_source_arguments, pipeline_from_args
from tfinput.cli.console import console
from tfinput.cli.registry import Command

__all__ = ["CHECK_COMMAND"]


def _arguments(p: argparse.ArgumentParser) -> None:
    add_source_arguments(
        p,
        help={
            "paths": "data files, globs or directories",
            "schema": "schema JSON (default: schema.json next to the data; a columnar data "
            "set carries its own)",
            "format": "input format (default: columnar if there is a manifest.json, else by "
            "extension)",
            "compression": "TFRecord compression: none, GZIP, ZLIB or auto (by extension)",
        },
    )
    p.add_argument("--batch-size", type=int, default=1024)
    add_output_arguments(p)


def _check(args: argparse.Namespace) -> int:
    report = pipeline_from_args(args).check(batch_size=args.batch_size)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "records": report.records,
                    "empty_files": list(report.empty_files),
                    "files": [f.__dict__ for f in report.files],
                },
                indent=2,
            )
        )
    else:
        out = console()
        for f in report.files:
            status = "[green]ok[/]" if f.error is None else f"[red]{f.error}[/]"
            out.print(f"{f.path}: {f.records:,} records  {status}")
        if report.empty_files:
            out.print(f"{len(report.empty_files)} empty file(s) skipped")
        out.print(
            f"{len(report.files)} file(s), {report.records:,} records, "
            f"{len(report.problems)} with problems"
        )
    return 0 if report.ok else 1


CHECK_COMMAND = Command(
    name="check",
    help="read every file through the schema and report problems per file",
    arguments=_arguments,
    run=_check,
)
