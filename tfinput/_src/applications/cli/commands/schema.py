"""``tfinput schema infer`` (a schema from data files), ``tfinput schema tpu`` (TPU
embedding tables and placement for a schema) and ``tfinput schema sparsecore``
(SparseCore limits measured from the data: `tfinput._src.applications.cli.commands.sparsecore`)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from tfinput._src.applications.cli.args import add_output_arguments, check_output, list_columns
from tfinput._src.applications.cli.commands import sparsecore
from tfinput._src.applications.cli.console import console
from tfinput._src.applications.cli.registry import Command

if TYPE_CHECKING:  # pragma: no cover
    from tfinput._src.applications.inference import Inference

__all__ = ["SCHEMA_COMMAND"]


# -------------------------------------------------------------------- infer
def _infer_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", help="files, globs or directories")
    p.add_argument("--out", "-o", help="write the schema JSON here")
    p.add_argument("--sample-rows", type=int, default=10_000, help="rows to sample")
    p.add_argument("--label", action="append", help="label column (repeatable)")
    p.add_argument("--format", choices=["tfrecord", "parquet", "csv"], default=None)
    p.add_argument(
        "--list-column",
        action="append",
        metavar="NAME[=DELIM]",
        help="CSV: a multi-valued column and its item delimiter (default |); repeatable",
    )
    add_output_arguments(p, json_help="machine-readable output")


def _infer(args: argparse.Namespace) -> int:
    from tfinput._src.applications.inference import infer_schema

    check_output(args.out, "--out", directory=False)
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
    out = console()
    out.print(_inference_table(result))
    out.print(_dims_table(result.schema))
    if args.out:
        out.print(f"schema written to {args.out} (review and edit it: it is plain JSON)")
    else:
        out.print(result.schema.to_json(), markup=False)
    return 0


def _inference_table(result: Inference) -> Any:
    """One row per column of a `tfinput.inference` result."""
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
    return t


def _dims_table(schema: Any) -> Any:
    """One row per table: rows, dim and the rule behind it, parameters, float32 bytes;
    the total, and how to change a dim."""
    from rich.table import Table as RichTable

    from tfinput._src.applications.inference._decide import dim_rule

    total = sum(t.vocabulary_size * t.dim for t in schema.tables)
    t = RichTable(
        title="embedding tables: the model size these dims imply",
        caption=(
            f"total {total:,} parameters, {_bytes(4 * total)} at float32 (Adam keeps 2 "
            "more copies; tfinput.models.SparseTableAdam one float per row); change a dim "
            'by editing the table\'s "dim" in the schema JSON (docs/data.md)'
        ),
    )
    for col in ("table", "rows", "dim", "why", "parameters", "float32"):
        t.add_column(col, overflow="fold")
    for table in schema.tables:
        n = table.vocabulary_size * table.dim
        t.add_row(
            table.name,
            f"{table.vocabulary_size:,}",
            str(table.dim),
            dim_rule(table.vocabulary_size, table.dim),
            f"{n:,}",
            _bytes(4 * n),
        )
    return t


def _bytes(n: float) -> str:
    """``512 B``, ``43.2 MB``, ``1.3 GB``."""
    for unit in ("B", "KB", "MB"):
        if n < 1000:
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"


# ---------------------------------------------------------------------- tpu
def _tpu_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("schema", help="schema JSON")
    p.add_argument("--per-replica-batch-size", type=int, required=True)
    add_output_arguments(p)


def _tpu(args: argparse.Namespace) -> int:
    from tfinput._src.applications.tpu import embedding_configs, placement
    from tfinput._src.core.schema import Schema

    schema = Schema.from_json(args.schema)
    tables, features = embedding_configs(schema, per_replica_batch_size=args.per_replica_batch_size)
    places = placement(schema)
    if args.json:
        print(json.dumps(_tpu_dict(tables, features, places), indent=2))
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
    console().print(t)
    return 0


def _tpu_dict(tables: Any, features: Any, places: Any) -> dict[str, Any]:
    """The ``--json`` output of ``tfinput schema tpu``."""
    return {
        "tables": {
            n: {"vocabulary_size": t.vocabulary_size, "dim": t.dim, "combiner": t.combiner}
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
    }


SCHEMA_COMMAND = Command(
    name="schema",
    help="infer a schema, or derive TPU embedding configs",
    actions=(
        Command(
            name="infer",
            help="infer a schema from Parquet, TFRecord or CSV/TSV files",
            arguments=_infer_arguments,
            run=_infer,
        ),
        Command(
            name="tpu",
            help="TPU embedding tables and placement for a schema",
            arguments=_tpu_arguments,
            run=_tpu,
        ),
        Command(
            name="sparsecore",
            help="measure the SparseCore limits (max ids per partition) from the data",
            arguments=sparsecore.arguments,
            run=sparsecore.run,
        ),
    ),
)
