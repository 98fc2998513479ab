"""``tfinput schema sparsecore``: measure the SparseCore buffer limits each table needs
(`tfinput.sparsecore.sparsecore_stats`), print them, write them into keras-rs and
TensorFlow configs, and check existing limits against the data.

Exit code 1 when ``--limits`` is given and some batch would overflow them.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

from tfinput._src.applications.cli.args import (
    add_output_arguments,
    add_source_arguments,
    check_output,
    tfinput_pipeline_from_args,
)
from tfinput._src.applications.cli.console import console, progress
from tfinput._src.core.errors import ConfigError

if TYPE_CHECKING:
    from tfinput._src.applications.sparsecore.results import SparseCoreStats
    from tfinput._src.core.schema import Schema

__all__ = ["arguments", "run"]


def arguments(p: argparse.ArgumentParser) -> None:
    add_source_arguments(
        p,
        help={
            "paths": "data files, globs or directories (scanned through the training pipeline)",
            "schema": "schema JSON (default: schema.json next to the data; a columnar data "
            "set carries its own)",
            "format": "input format (default: columnar if there is a manifest.json, else by "
            "extension)",
            "compression": "TFRecord compression: none, GZIP, ZLIB or auto (by extension)",
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
        help="the multi-hot format you feed (default: the pipeline's, dense); dense feeds "
        "its padding as id 0",
    )
    p.add_argument(
        "--limits",
        metavar="N|FILE",
        help="check these limits against every batch: one int for both limits of every "
        "table (e.g. 256 or 8192), or a JSON file {table or stack: [max_ids, max_unique"
        "(, buffer per SparseCore)]}; exit 1 if any batch would overflow them",
    )
    p.add_argument(
        "--out", metavar="FILE", help="write the statistics and the configs as JSON here"
    )
    add_output_arguments(p, json_help="print the JSON written by --out")


def _stacking(values: list[str] | None) -> Any:
    if not values:
        return "auto"
    if len(values) == 1 and values[0] in ("auto", "none"):
        return values[0]
    if any(v in ("auto", "none") for v in values):
        raise ConfigError("--stack: auto and none stand alone; or give lists of tables")
    return [[t.strip() for t in v.split(",") if t.strip()] for v in values]


def _limits(spec: str | None) -> Any:
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


def run(args: argparse.Namespace) -> int:
    from tfinput._src.applications.sparsecore import sparsecore_stats
    from tfinput._src.applications.sparsecore.stacks import MLPERF_LIMIT

    check_output(args.out, "--out", directory=False)
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
    if args.out:
        with open(args.out, "w") as f:
            json.dump(payload, f, indent=2)
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        _print(stats, pipeline.schema, overflows, MLPERF_LIMIT)
        if args.out:
            console().print(f"statistics and configs written to {args.out}")
    return 1 if any(o.over_any for o in overflows) else 0


def _payload(stats: SparseCoreStats, schema: Schema, overflows: list[Any]) -> dict[str, Any]:
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


def _print(stats: SparseCoreStats, schema: Schema, overflows: list[Any], mlperf: int) -> None:
    from rich.table import Table as RichTable

    out = console()
    t = RichTable(
        title=(
            f"SparseCore limits: {stats.devices} device(s) x {stats.sparsecores_per_device} "
            f"SparseCores, per-replica batch {stats.per_replica_batch_size}, "
            f"{stats.multi_hot_format} multi-hot, margin {stats.margin:.0%}"
        )
    )
    for col in (
        "stack",
        "tables",
        "max ids / partition",
        "max unique ids",
        "buffer / SparseCore",
        "suggested ids",
        "suggested unique",
        "suggested buffer",
        "hottest partition",
    ):
        t.add_column(col, overflow="fold")
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
    if stats.multi_hot_format == "dense" and schema.multi_hot:
        out.print(
            "The dense multi-hot format feeds its padding too (id 0, one entry per padded "
            "row, all in id 0's partition): feed sparse or ragged ids "
            "(--multi-hot-format sparse) to count, and use, real ids only."
        )
    saved = [
        f"{s.stack.name}: {stats.coo_buffer_bytes(mlperf) / 2**20:,.1f} MiB at {mlperf} -> "
        f"{stats.coo_buffer_bytes(s.limits(stats.margin).max_ids_per_partition) / 2**20:,.2f} "
        "MiB"
        for s in stats.stacks
    ]
    out.print("COO buffer per chip without an explicit size: " + "; ".join(saved))
    for o in overflows:
        out.print(str(o), markup=False)
