"""The ``tfinput`` command. Each subcommand is a thin function: parse arguments, call
the library, print, return an exit code (0 ok, 1 the data has problems, 2 bad usage
or input).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from tfinput._cli_util import console as _console
from tfinput._cli_util import fail as _fail
from tfinput._cli_util import quiet_tensorflow as _quiet_tensorflow
from tfinput._cli_util import wants_verbose as _wants_verbose
from tfinput.errors import TfinputError

__all__ = ["main", "build_parser"]


# ------------------------------------------------------------------- schema
def _cmd_schema_infer(args: argparse.Namespace) -> int:
    from tfinput._cli_data import list_columns
    from tfinput.inference import infer_schema

    result = infer_schema(
        args.paths,
        sample_rows=args.sample_rows,
        labels=args.label,
        format=args.format,
        list_columns=list_columns(args.list_column) or None,
    )
    if args.out:
        result.schema.to_json(args.out)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    from rich.table import Table as RichTable

    def num(v: Any, fmt: str = "{:g}") -> str:
        return "" if v is None else fmt.format(v)

    t = RichTable(title=f"{len(result.files)} file(s), {result.sampled_rows:,} rows sampled")
    for col in (
        "column",
        "kind",
        "dtype",
        "list",
        "missing",
        "len p50/p90/p99/max",
        "min..max",
        "distinct",
        "note",
    ):
        t.add_column(col, overflow="fold")
    for c in result.columns:
        lengths = (
            f"{num(c.length_p50)}/{num(c.length_p90)}/{num(c.length_p99)}/{c.length_max}"
            if c.is_list and c.length_max is not None
            else ""
        )
        span = f"{num(c.min_value)}..{num(c.max_value)}" if c.min_value is not None else ""
        missing = f"{100 * c.missing / max(c.rows, 1):.1f}%"
        t.add_row(
            c.name,
            c.kind,
            c.dtype,
            "yes" if c.is_list else "",
            missing,
            lengths,
            span,
            num(c.distinct, "{:,}"),
            c.note,
        )
    console = _console()
    console.print(t)
    if args.out:
        console.print(f"schema written to {args.out} (review and edit it: it is plain JSON)")
    else:
        console.print(result.schema.to_json(), markup=False)
    return 0


def _cmd_schema_tpu(args: argparse.Namespace) -> int:
    from tfinput.schema import Schema
    from tfinput.tpu import embedding_configs, placement

    schema = Schema.from_json(args.schema)
    tables, features = embedding_configs(schema, per_replica_batch_size=args.per_replica_batch_size)
    places = placement(schema)
    if args.json:
        print(
            json.dumps(
                {
                    "tables": {
                        n: {
                            "vocabulary_size": t.vocabulary_size,
                            "dim": t.dim,
                            "combiner": t.combiner,
                        }
                        for n, t in tables.items()
                    },
                    "features": {
                        n: {
                            "table": f.table.name,
                            "output_shape": list(f.output_shape),
                            "max_sequence_length": f.max_sequence_length,
                        }
                        for n, f in features.items()
                    },
                    "placement": [p.__dict__ for p in places],
                },
                indent=2,
            )
        )
        return 0
    from rich.table import Table as RichTable

    t = RichTable(title="TPU embedding tables")
    for col in ("table", "rows", "dim", "combiner", "MiB (f32)", "features", "placement", "why"):
        t.add_column(col, overflow="fold")
    for p in places:
        cfg = tables[p.table]
        users = ", ".join(n for n, f in features.items() if f.table is cfg)
        t.add_row(
            p.table,
            f"{p.rows:,}",
            str(cfg.dim),
            cfg.combiner,
            f"{p.bytes / 2**20:.1f}",
            users,
            p.decision,
            p.reason,
        )
    _console().print(t)
    return 0


# -------------------------------------------------------------------- check
def _pipeline(args: argparse.Namespace) -> Any:
    from tfinput._cli_util import pipeline_from_paths

    return pipeline_from_paths(
        args.paths, schema_path=args.schema, fmt=args.format, compression=args.compression
    )


def _cmd_check(args: argparse.Namespace) -> int:
    pipeline = _pipeline(args)
    report = pipeline.check(batch_size=args.batch_size)
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
        console = _console()
        for f in report.files:
            status = "[green]ok[/]" if f.error is None else f"[red]{f.error}[/]"
            console.print(f"{f.path}: {f.records:,} records  {status}")
        if report.empty_files:
            console.print(f"{len(report.empty_files)} empty file(s) skipped")
        console.print(
            f"{len(report.files)} file(s), {report.records:,} records, "
            f"{len(report.problems)} with problems"
        )
    return 0 if report.ok else 1


# ------------------------------------------------------------------- doctor
def _cmd_doctor(args: argparse.Namespace) -> int:
    from tfinput.doctor import report

    rep = report()
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2))
    else:
        print("\n".join(rep.lines()))
    return 0


# ------------------------------------------------------------------- parser
def _add_pipeline_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", help="data files, globs or directories")
    p.add_argument(
        "--schema",
        help="schema JSON (default: schema.json next to the data; a columnar data set "
        "carries its own)",
    )
    p.add_argument(
        "--format",
        choices=["tfrecord", "parquet", "columnar"],
        default=None,
        help="input format (default: columnar if there is a manifest.json, else by extension)",
    )
    p.add_argument(
        "--compression",
        default="auto",
        help="TFRecord compression: none, GZIP, ZLIB or auto (by extension)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfinput",
        description="Fixed-shape tf.data input pipelines for ranking models: build, "
        "measure, tune and profile.",
    )
    from tfinput.doctor import summary

    parser.add_argument("--version", action="version", version=summary())
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's own log lines and warnings (hidden by default unless "
        "TF_CPP_MIN_LOG_LEVEL is set)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    schema = sub.add_parser("schema", help="infer a schema, or derive TPU embedding configs")
    schema_sub = schema.add_subparsers(dest="schema_command", required=True, metavar="ACTION")
    infer = schema_sub.add_parser(
        "infer", help="infer a schema from Parquet, TFRecord or CSV/TSV files"
    )
    infer.add_argument("paths", nargs="+", help="files, globs or directories")
    infer.add_argument("--out", "-o", help="write the schema JSON here")
    infer.add_argument("--sample-rows", type=int, default=10_000, help="rows to sample")
    infer.add_argument("--label", action="append", help="label column (repeatable)")
    infer.add_argument("--format", choices=["tfrecord", "parquet", "csv"], default=None)
    infer.add_argument(
        "--list-column",
        action="append",
        metavar="NAME[=DELIM]",
        help="CSV: a multi-valued column and its item delimiter (default |); repeatable",
    )
    infer.add_argument("--json", action="store_true", help="machine-readable output")
    infer.set_defaults(func=_cmd_schema_infer)
    tpu = schema_sub.add_parser("tpu", help="TPU embedding tables and placement for a schema")
    tpu.add_argument("schema", help="schema JSON")
    tpu.add_argument("--per-replica-batch-size", type=int, required=True)
    tpu.add_argument("--json", action="store_true")
    tpu.set_defaults(func=_cmd_schema_tpu)

    check = sub.add_parser(
        "check", help="read every file through the schema and report problems per file"
    )
    _add_pipeline_args(check)
    check.add_argument("--batch-size", type=int, default=1024)
    check.add_argument("--json", action="store_true")
    check.set_defaults(func=_cmd_check)

    doctor = sub.add_parser(
        "doctor",
        help="versions of TensorFlow, Keras (and backend), numpy, pyarrow, optuna, Python "
        "and the optional parts: paste it into a bug report",
    )
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(func=_cmd_doctor)

    from profiles import cli as profiles_cli
    from tfinput import _cli_data
    from tuners import cli as tuners_cli

    tuners_cli.add_subcommands(sub)
    _cli_data.add_subcommands(sub)
    profiles_cli.add_subcommands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Before anything imports TensorFlow: its C++ log lines stay out of the output
    # unless --verbose (or the user's own TF_CPP_MIN_LOG_LEVEL).
    tokens = list(sys.argv[1:] if argv is None else argv)
    _quiet_tensorflow(verbose=_wants_verbose(tokens))
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TfinputError as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        print("tfinput: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
