"""``tfinput convert``: CSV/TSV, Parquet or TFRecord to sharded Parquet, TFRecord or
columnar files plus a ``schema.json`` (`tfinput.convert.convert`), and ``tfinput
datagen``: deterministic synthetic data (`tfinput.datagen`)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from typing import TYPE_CHECKING

from tfinput._src.applications.cli.args import (
    add_output_arguments,
    check_output,
    count,
    delimiter,
    list_columns,
)
from tfinput._src.applications.cli.console import console, progress
from tfinput._src.applications.cli.registry import Command

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from tfinput._src.applications.convert.options import ConvertOptions, RayOptions
    from tfinput._src.applications.convert.run import ConvertResult


def _arguments(p: argparse.ArgumentParser) -> None:
    """The command's arguments, grouped as `ConvertOptions` groups them."""
    p.add_argument(
        "inputs",
        nargs="+",
        help=(
            "CSV/TSV (.gz/.bz2 accepted), Parquet or TFRecord files, globs or directories "
            "(a directory's schema.json is used when no --schema or --preset is given)"
        ),
    )
    p.add_argument("--out", "-o", required=True, help="output directory (must be empty)")
    _read_arguments(p.add_argument_group("reading"))
    _column_arguments(p.add_argument_group("columns"))
    _write_arguments(p.add_argument_group("writing"))
    _engine_arguments(p.add_argument_group("distributed conversion (Ray Data)"))
    add_output_arguments(p, json_help="machine-readable summary")


def _read_arguments(r: argparse._ArgumentGroup) -> None:
    r.add_argument(
        "--input-format",
        choices=["auto", "csv", "parquet", "tfrecord"],
        default="auto",
        help="input format (default: by extension)",
    )
    r.add_argument("--delimiter", help="field delimiter: a character, tab, comma... (sniffed)")
    r.add_argument("--header", choices=["auto", "yes", "no"], default="auto")
    r.add_argument("--columns", help="comma-separated column names (files without a header)")
    r.add_argument(
        "--list-column",
        action="append",
        metavar="NAME[=DELIM]",
        help="a multi-valued column and its item delimiter (default |); repeatable",
    )
    r.add_argument(
        "--on-bad-rows",
        choices=["error", "skip"],
        default="error",
        help="stop at the first bad row, or skip and count bad rows",
    )


def _column_arguments(c: argparse._ArgumentGroup) -> None:
    from tfinput._src.applications.convert.columns import PRESETS

    c.add_argument("--preset", choices=list(PRESETS), help="known layout and schema")
    c.add_argument("--schema", help="schema JSON to convert to (overrides preset/inference)")
    c.add_argument("--label", help="label column when inferring the schema")
    c.add_argument(
        "--hash-buckets",
        type=count,
        default=None,
        help="table rows of hashed string columns (default: 100k with a preset; as "
        "`tfinput schema infer` when inferring: 4x the distinct values seen)",
    )
    c.add_argument("--infer-rows", type=count, default=10_000)


def _write_arguments(w: argparse._ArgumentGroup) -> None:
    w.add_argument(
        "--to",
        choices=["parquet", "tfrecord", "columnar"],
        default="parquet",
        help="output format (columnar: pre-batched records + manifest.json, see docs/columnar.md)",
    )
    w.add_argument("--rows-per-file", type=count, default=1_000_000)
    w.add_argument(
        "--chunk-rows",
        type=count,
        default=1024,
        help="columnar: rows per record; batch sizes that are multiples read fastest "
        "(default 1024)",
    )
    w.add_argument(
        "--overwrite",
        action="store_true",
        help="replace part-* files (and schema.json, manifest.json) in --out",
    )


def _engine_arguments(e: argparse._ArgumentGroup) -> None:
    e.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="local: one process (default); ray: many Ray tasks, locally or on a Ray "
        "cluster (pip install 'tfinput[ray]'); same rows and values, see docs/scaling.md",
    )
    e.add_argument(
        "--ray-address",
        help="--engine ray: the cluster to join (ray.init address, e.g. auto or "
        "ray://head:10001); default: start a local Ray instance",
    )
    e.add_argument(
        "--ray-cpus",
        type=count,
        default=None,
        help="--engine ray: CPUs of the local instance, and at most that many tasks at once",
    )
    e.add_argument(
        "--split-mb",
        type=count,
        default=None,
        help="--engine ray: MB of uncompressed CSV per task (default 32)",
    )


def _convert(args: argparse.Namespace) -> int:
    """Convert CSV/TSV, Parquet or TFRecord to Parquet, TFRecord or columnar records."""
    check_output(args.out, "--out", directory=True)
    options = _options(args)
    run = _engine(args)
    with progress() as bar:
        task = bar.add_task("converting", total=None)
        result = run(
            args.inputs,
            args.out,
            options=options,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        _print_summary(result, args.out)
    return 0


def _options(args: argparse.Namespace) -> ConvertOptions:
    """The `ConvertOptions` ``tfinput convert``'s arguments ask for (the one place they
    map); the schema found beside the inputs is said unless ``--json``."""
    from tfinput._src.applications.convert.options import (
        ColumnOptions,
        ConvertOptions,
        ReadOptions,
        WriteOptions,
    )
    from tfinput._src.core.schema import Schema

    schema_path = args.schema or (None if args.preset else _schema_beside(args.inputs))
    if schema_path and not args.schema and not args.json:
        console().print(
            f"schema: {schema_path} (found beside the inputs; --schema to choose another)",
            markup=False,
        )
    return ConvertOptions(
        read=ReadOptions(
            input_format=args.input_format,
            delimiter=delimiter(args.delimiter) if args.delimiter else None,
            header={"auto": "auto", "yes": True, "no": False}[args.header],
            column_names=args.columns.split(",") if args.columns else None,
            list_columns=list_columns(args.list_column),
            on_bad_rows=args.on_bad_rows,
        ),
        columns=ColumnOptions(
            schema=Schema.from_json(schema_path) if schema_path else None,
            preset=args.preset,
            label=args.label,
            hash_buckets=args.hash_buckets,
            infer_rows=args.infer_rows,
        ),
        write=WriteOptions(
            to=args.to,
            rows_per_file=args.rows_per_file,
            chunk_rows=args.chunk_rows,
            overwrite=args.overwrite,
        ),
    )


def _schema_beside(inputs: list[str]) -> str | None:
    """The ``schema.json`` in the first input directory that has one (what `tfinput
    datagen` and `tfinput convert` write beside their files), or None."""
    for p in inputs:
        candidate = os.path.join(p, "schema.json")
        if os.path.isdir(p) and os.path.isfile(candidate):
            return candidate
    return None


#: What ``convert --engine ray`` says once, at start, when it starts a local Ray instance.
LOCAL_RAY_OPEN = (
    "--engine ray: the local Ray instance this starts listens on every interface, not "
    "loopback only (Ray binds its servers to every interface; its dashboard stays off), "
    "while the conversion runs: Ray 2.59 and later ask for a token by default "
    '(RAY_AUTH_MODE), older Ray asks for nothing (docs/scaling.md, "Security")'
)


def _engine(args: argparse.Namespace) -> Callable[..., ConvertResult]:
    """The conversion function of ``--engine``, taking the inputs, the output directory,
    ``options=`` and ``progress=`` (the Ray options of ``--engine ray`` bound).

    Raises:
      ConfigError: a Ray option without ``--engine ray``.
    """
    from tfinput._src.core.errors import ConfigError

    ray_options = {
        "--ray-address": args.ray_address,
        "--ray-cpus": args.ray_cpus,
        "--split-mb": args.split_mb,
    }
    if args.engine == "local":
        given = [name for name, value in ray_options.items() if value is not None]
        if given:
            raise ConfigError(f"convert: {', '.join(given)} apply to --engine ray only")
        from tfinput._src.applications.convert.run import convert_options

        return convert_options
    from tfinput._src.applications.convert.options import SPLIT_BYTES, RayOptions
    from tfinput._src.applications.convert.ray_engine import convert_ray

    ray = RayOptions(
        ray_address=args.ray_address,
        num_cpus=args.ray_cpus,
        split_bytes=args.split_mb << 20 if args.split_mb else SPLIT_BYTES,
    )
    return functools.partial(_on_local_ray if args.ray_address is None else convert_ray, ray=ray)


def _on_local_ray(
    inputs: Sequence[str],
    out_dir: str,
    *,
    options: ConvertOptions,
    ray: RayOptions,
    progress: Callable[[int, int], None],
) -> ConvertResult:
    """`convert_ray` on the local Ray instance it starts, said once at start
    (`LOCAL_RAY_OPEN`) once Ray is known to be installed."""
    from tfinput._src.applications.convert.ray_engine import convert_ray, import_ray

    import_ray()  # without Ray: the error naming the extra, and no notice
    print(LOCAL_RAY_OPEN, file=sys.stderr, flush=True)
    return convert_ray(inputs, out_dir, options=options, ray=ray, progress=progress)


def _print_summary(result: ConvertResult, out_dir: str) -> None:
    """What a `tfinput.convert` result wrote, read and skipped."""
    out = console()
    out.print(
        f"wrote {result.rows:,} rows to {len(result.paths)} {result.format} file(s) in "
        f"{out_dir}; schema: {result.schema_path}"
        + (f"; manifest: {result.manifest_path}" if result.manifest_path else ""),
        markup=False,
    )
    counts = f"{len(result.schema.features)} features, {len(result.schema.labels)} label(s)"
    if result.input_format == "csv":
        delim = {"\t": "tab", ",": "comma"}.get(result.delimiter, repr(result.delimiter))
        counts = f"delimiter {delim}, header {'yes' if result.header else 'no'}; {counts}"
    else:
        counts = f"read {result.input_format}; {counts}"
    out.print(counts, markup=False)
    if result.dropped_columns:
        out.print(f"columns not in the schema (dropped): {', '.join(result.dropped_columns)}")
    if result.blank_lines:
        out.print(f"{result.blank_lines:,} blank line(s) ignored")
    if result.skipped:
        out.print(f"{result.skipped:,} bad row(s) skipped; first ones:", markup=False)
        for bad in result.bad_rows:
            out.print(f"  {bad}", markup=False)


CONVERT_COMMAND = Command(
    name="convert",
    help="convert CSV/TSV, Parquet or TFRecord to sharded Parquet, TFRecord or columnar",
    description="Stream CSV/TSV, Parquet or tf.Example TFRecord files into sharded "
    "Parquet, TFRecord or columnar (pre-batched, native, fastest to read) files plus a "
    "schema.json, with bounded memory. Bad rows are reported with their line (CSV) or "
    "row number.",
    arguments=_arguments,
    run=_convert,
    error_first_line=True,
)


def _datagen_arguments(p: argparse.ArgumentParser) -> None:
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
    arguments=_datagen_arguments,
    run=_datagen,
    error_first_line=True,
)
