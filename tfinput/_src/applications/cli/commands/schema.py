"""``tfinput schema infer`` (a schema from data files), ``tfinput schema tpu`` (TPU
embedding tables and placement for a schema) and ``tfinput schema sparsecore``: measure
the SparseCore buffer limits each table needs (`tfinput.sparsecore.sparsecore_stats`),
print them, write them into keras-rs and TensorFlow configs, and check existing limits
against the data (exit code 1 when ``--limits`` is given and some batch would overflow
them)."""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import TYPE_CHECKING, Any

from tfinput._src.applications.cli.args import (
    DATA_SET_HELP,
    add_output_arguments,
    add_source_arguments,
    check_output,
    list_columns,
    tfinput_pipeline_from_args,
)
from tfinput._src.applications.cli.console import console, progress, rich_table
from tfinput._src.applications.cli.registry import Command
from tfinput._src.core.errors import ConfigError
from tfinput._src.core.files import create_parents

if TYPE_CHECKING:
    from rich.table import Table as RichTable

    from tfinput._src.applications.inference._decide import Inference
    from tfinput._src.applications.sparsecore.results import Overflow, SparseCoreStats
    from tfinput._src.applications.tpu import Placement
    from tfinput._src.core.schema import Schema


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
        create_parents(args.out)
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


def _inference_table(result: Inference) -> RichTable:
    """One row per column of a `tfinput.inference` result."""

    def num(v: float | None, fmt: str = "{:g}") -> str:
        return "" if v is None else fmt.format(v)

    t = rich_table(
        f"{len(result.files)} file(s), {result.sampled_rows:,} rows sampled",
        (
            "column",
            "kind",
            "dtype",
            "list",
            "missing",
            "len p50/p90/p99/max",
            "min..max",
            "distinct",
            "note",
        ),
    )
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


def _dims_table(schema: Schema) -> RichTable:
    """One row per table: rows, dim and the rule behind it, parameters, float32 bytes;
    the total, and how to change a dim."""
    from tfinput._src.applications.inference._decide import dim_rule

    total = sum(t.vocabulary_size * t.dim for t in schema.tables)
    t = rich_table(
        "embedding tables: the model size these dims imply",
        ("table", "rows", "dim", "why", "parameters", "float32"),
        caption=(
            f"total {total:,} parameters, {_bytes(4 * total)} at float32 (Adam keeps 2 "
            "more copies; tfinput.models.SparseTableAdam one float per row); change a dim "
            'by editing the table\'s "dim" in the schema JSON (docs/data.md)'
        ),
    )
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
    t = rich_table(
        "TPU embedding tables",
        ("table", "rows", "dim", "combiner", "MiB (f32)", "features", "placement", "why"),
    )
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


def _tpu_dict(tables: Any, features: Any, places: list[Placement]) -> dict[str, object]:
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


def _sparsecore_arguments(p: argparse.ArgumentParser) -> None:
    add_source_arguments(
        p,
        help={
            "paths": "data files, globs or directories (scanned through the training pipeline)",
            **DATA_SET_HELP,
        },
    )
    p.add_argument(
        "--per-replica-batch-size", type=int, required=True, help="rows each chip takes per step"
    )
    p.add_argument("--devices", type=int, default=1, help="TPU chips in all (default 1)")
    p.add_argument(
        "--sparsecores-per-device",
        type=int,
        default=4,
        help="SparseCores per chip: 4 on v5p (default), 2 on v6e",
    )
    p.add_argument(
        "--stack",
        action="append",
        metavar="auto|none|T1,T2,...",
        help="table stacking: auto (keras-rs's default on JAX), none, or a comma-separated "
        "list of tables stacked together (repeatable; other tables stay alone)",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=0.2,
        help="suggested limits are the observed maxima times 1 + MARGIN (default 0.2)",
    )
    p.add_argument(
        "--max-batches",
        type=int,
        help="scan only this many batches (a sample; the output says what that can miss)",
    )
    p.add_argument(
        "--config",
        metavar="SPEC",
        help="reading knobs: naive, heuristic, autotune or a saved config JSON (tfinput "
        "tune's best_config.json; its batch size is replaced); default: the default config",
    )
    p.add_argument(
        "--multi-hot-format",
        choices=["dense", "sparse", "ragged"],
        help="the multi-hot format to read (default: the pipeline's, dense); every format "
        "counts the same ids: a list's padding (weight 0) is not fed",
    )
    p.add_argument(
        "--limits",
        metavar="N|FILE",
        help="check these limits against every batch: one int for both limits of every "
        "table (e.g. 256 or 8192), or a JSON file {table or stack: [max_ids, max_unique"
        "(, buffer per SparseCore)]}; exit 1 if any batch would overflow them",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        help="write the statistics and the configs as JSON here; a FILE named "
        "fdo_stats_<host>_<n>.npz gets the statistics in jax-tpu-embedding's FDO form "
        "instead (its NPZFileFDOClient(FILE's folder).load() reads them; "
        "SparseCorePlan.with_limits applies them)",
    )
    add_output_arguments(p, json_help="print the JSON written by --out")


def _stacking(values: list[str] | None) -> str | list[list[str]]:
    if not values:
        return "auto"
    if len(values) == 1 and values[0] in ("auto", "none"):
        return values[0]
    if any(v in ("auto", "none") for v in values):
        raise ConfigError("--stack: auto and none stand alone; or give lists of tables")
    return [[t.strip() for t in v.split(",") if t.strip()] for v in values]


def _limits(spec: str | None) -> int | dict[str, object] | None:
    if spec is None:
        return None
    if spec.isdigit():
        return int(spec)
    if not os.path.isfile(spec):
        raise ConfigError(f"--limits {spec}: neither an int nor a JSON file")
    try:
        with open(spec) as f:
            data = json.load(f)
    except ValueError as e:
        raise ConfigError(f"--limits {spec}: not JSON ({e})") from e
    if not isinstance(data, dict):
        raise ConfigError(f"--limits {spec}: expected an object {{table: [max_ids, max_unique]}}")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}


def _sparsecore(args: argparse.Namespace) -> int:
    from tfinput._src.applications.sparsecore import sparsecore_stats
    from tfinput._src.applications.sparsecore.stacks import MLPERF_LIMIT

    check_output(args.out, "--out", directory=False)
    fdo = _fdo_file(args.out)
    limits = _limits(args.limits)
    stacking = _stacking(args.stack)
    config = None
    if args.config:
        from tfinput._src.measurement.compare import load_configs

        (config,) = load_configs([args.config]).values()
    pipeline = tfinput_pipeline_from_args(args, command="sparsecore")
    with progress() as bar:
        task = bar.add_task("SparseCore statistics", total=args.max_batches)
        stats = sparsecore_stats(
            pipeline,
            per_replica_batch_size=args.per_replica_batch_size,
            devices=args.devices,
            sparsecores_per_device=args.sparsecores_per_device,
            stacking=stacking,
            margin=args.margin,
            max_batches=args.max_batches,
            multi_hot_format=args.multi_hot_format,
            config=config,
            tick=lambda n: bar.update(task, completed=n),
        )
    overflows = stats.overflows(limits) if limits is not None else []
    payload = _payload(stats, pipeline.schema, overflows)
    if fdo:
        create_parents(args.out)
        _write_fdo(stats, args.out)
    elif args.out:
        create_parents(args.out)
        with open(args.out, "w") as f:
            json.dump(payload, f, indent=2)
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        _print(stats, overflows, MLPERF_LIMIT)
        if fdo:
            console().print(
                f"statistics written to {args.out} in jax-tpu-embedding's FDO form: "
                f"NPZFileFDOClient({os.path.dirname(os.path.abspath(args.out))!r}).load() "
                "reads them, SparseCorePlan.with_limits applies them"
            )
        elif args.out:
            console().print(f"statistics and configs written to {args.out}")
    return 1 if any(o.over_any for o in overflows) else 0


#: The files jax-tpu-embedding's NPZFileFDOClient loads: fdo_stats_<process>_<time>.npz.
_FDO_NAME = re.compile(r"fdo_stats_\d+_\d+\.npz")


def _fdo_file(out: str | None) -> bool:
    """Whether ``--out`` asks for the FDO form (a ``.npz`` file), refusing a name that
    jax-tpu-embedding's NPZ client would not load."""
    if out is None or not out.endswith(".npz"):
        return False
    if not _FDO_NAME.fullmatch(os.path.basename(out)):
        raise ConfigError(
            f"--out {out}: jax-tpu-embedding's NPZFileFDOClient loads only files named "
            "fdo_stats_<process>_<timestamp>.npz; name it e.g. "
            f"{os.path.join(os.path.dirname(out), 'fdo_stats_0_0.npz')}"
        )
    return True


def _write_fdo(stats: SparseCoreStats, path: str) -> None:
    """The statistics as one record of jax-tpu-embedding's NPZ FDO client: a row per
    stack and statistic, under the keys its ``publish`` writes."""
    import dataclasses

    import numpy as np

    data = stats.input_stats()
    arrays = {
        f"{stack}{field.metadata['suffix']}": np.asarray(value, np.int64)[None]
        for field in dataclasses.fields(data)
        for stack, value in getattr(data, field.name).items()
    }
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _payload(
    stats: SparseCoreStats, schema: Schema, overflows: list[Overflow]
) -> dict[str, object]:
    """Statistics, suggested limits per table, TensorFlow's and keras-rs's configs."""
    import dataclasses

    limits = stats.limits()
    out = stats.to_dict()
    out["table_limits"] = {t: list(v) for t, v in stats.table_limits().items()}
    out["tensorflow_sparse_core_config"] = {
        "max_ids_per_table": {n: v.max_ids_per_partition for n, v in limits.items()},
        "max_unique_ids_per_table": {n: v.max_unique_ids_per_partition for n, v in limits.items()},
        "disable_table_stacking": all(len(s.stack.tables) == 1 for s in stats.stacks),
    }
    try:
        from tfinput._src.applications.tpu import keras_rs_configs

        tables, _ = keras_rs_configs(
            schema,
            per_replica_batch_size=stats.per_replica_batch_size,
            replicas=stats.devices,
            limits=stats,
        )
        out["keras_rs_table_configs"] = {n: t.get_config() for n, t in tables.items()}
    except ConfigError as e:  # keras-rs not installed
        out["keras_rs_table_configs"] = None
        out["keras_rs_note"] = str(e)
    if overflows:
        out["overflows"] = [
            {**dataclasses.asdict(o), "limits": dataclasses.asdict(o.limits)} for o in overflows
        ]
    return out


def _print(stats: SparseCoreStats, overflows: list[Overflow], mlperf: int) -> None:
    out = console()
    t = rich_table(
        f"SparseCore limits: {stats.devices} device(s) x {stats.sparsecores_per_device} "
        f"SparseCores, per-replica batch {stats.per_replica_batch_size}, "
        f"{stats.multi_hot_format} multi-hot, margin {stats.margin:.0%}",
        (
            "stack",
            "tables",
            "max ids / partition",
            "max unique ids",
            "buffer / SparseCore",
            "suggested ids",
            "suggested unique",
            "suggested buffer",
            "hottest partition",
        ),
    )
    for s in stats.stacks:
        o, g = s.observed, s.limits(stats.margin)
        hot = int(s.partition_ids.argmax())
        t.add_row(
            s.stack.name,
            ", ".join(s.stack.tables)
            if len(s.stack.tables) <= 6
            else f"{len(s.stack.tables)} tables",
            f"{o.max_ids_per_partition:,}",
            f"{o.max_unique_ids_per_partition:,}",
            f"{o.required_buffer_size_per_sc:,}",
            f"{g.max_ids_per_partition:,}",
            f"{g.max_unique_ids_per_partition:,}",
            f"{g.required_buffer_size_per_sc:,}",
            f"{hot} ({int(s.partition_ids[hot]):,} ids)",
        )
    out.print(t)
    out.print(f"{stats.examples:,} examples in {stats.batches:,} batches; {stats.sampling_note}")
    saved = [
        f"{s.stack.name}: {stats.coo_buffer_bytes(mlperf) / 2**20:,.1f} MiB at {mlperf} -> "
        f"{stats.coo_buffer_bytes(s.limits(stats.margin).max_ids_per_partition) / 2**20:,.2f} "
        "MiB"
        for s in stats.stacks
    ]
    out.print("COO buffer per chip without an explicit size: " + "; ".join(saved))
    for o in overflows:
        out.print(str(o), markup=False)


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
            arguments=_sparsecore_arguments,
            run=_sparsecore,
        ),
    ),
)
