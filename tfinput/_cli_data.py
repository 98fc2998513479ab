"""The data subcommands of ``tfinput``: ``convert``, ``datagen`` and ``bench``.

Each handler parses nothing itself beyond its namespace: it calls the library
(`tfinput.convert`, `tfinput.datagen`, `tfinput.bench`), prints a summary (or JSON
with ``--json``; progress goes to stderr) and returns an exit code: 0 on success, 2
on bad usage or input (a `TfinputError`, reported on one line of stderr).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from typing import Any

from tfinput._cli_util import console as _console
from tfinput._cli_util import fail as _fail
from tfinput._cli_util import pipeline_from_paths, progress
from tfinput.errors import ConfigError, TfinputError

__all__ = ["add_subcommands"]


def _handler(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except TfinputError as e:
            return _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


_SUFFIX = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}


def _count(text: str) -> int:
    """``400000``, ``400_000``, ``400k``, ``1M`` -> int."""
    m = re.fullmatch(r"\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*([kKmMgG]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a count such as 400000, 400k or 1M: {text!r}")
    value = float(m.group(1).replace("_", "")) * _SUFFIX.get(m.group(2).lower(), 1)
    if value != int(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole non-negative count: {text!r}")
    return int(value)


def _delimiter(text: str) -> str:
    named = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|", "space": " "}
    return named.get(text.lower(), text)


# ------------------------------------------------------------------ convert
def list_columns(specs: list[str] | None) -> dict[str, str]:
    """``--list-column NAME[=DELIM]`` values as ``{name: delimiter}`` (default ``|``)."""
    lists: dict[str, str] = {}
    for spec in specs or []:
        name, sep, delim = spec.partition("=")
        if not name or (sep and not delim):
            raise ConfigError(f"--list-column: expected NAME or NAME=DELIMITER, got {spec!r}")
        lists[name] = _delimiter(delim) if delim else "|"
    return lists


def _cmd_convert(args: argparse.Namespace) -> int:
    """Convert CSV/TSV, Parquet or TFRecord to Parquet, TFRecord or columnar records."""
    from tfinput.convert import convert
    from tfinput.schema import Schema

    lists = list_columns(args.list_column)
    header: bool | str = {"auto": "auto", "yes": True, "no": False}[args.header]
    schema = Schema.from_json(args.schema) if args.schema else None
    with progress() as bar:
        task = bar.add_task("converting", total=None)
        result = convert(
            args.inputs,
            args.out,
            to=args.to,
            schema=schema,
            preset=args.preset,
            input_format=args.input_format,
            delimiter=_delimiter(args.delimiter) if args.delimiter else None,
            header=header,
            column_names=args.columns.split(",") if args.columns else None,
            list_columns=lists,
            label=args.label,
            hash_buckets=args.hash_buckets,
            rows_per_file=args.rows_per_file,
            chunk_rows=args.chunk_rows,
            on_bad_rows=args.on_bad_rows,
            infer_rows=args.infer_rows,
            overwrite=args.overwrite,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    console = _console()
    console.print(
        f"wrote {result.rows:,} rows to {len(result.paths)} {result.format} file(s) in "
        f"{args.out}; schema: {result.schema_path}"
        + (f"; manifest: {result.manifest_path}" if result.manifest_path else ""),
        markup=False,
    )
    counts = f"{len(result.schema.features)} features, {len(result.schema.labels)} label(s)"
    if result.input_format == "csv":
        delim = {"\t": "tab", ",": "comma"}.get(result.delimiter, repr(result.delimiter))
        counts = f"delimiter {delim}, header {'yes' if result.header else 'no'}; {counts}"
    else:
        counts = f"read {result.input_format}; {counts}"
    console.print(counts, markup=False)
    if result.dropped_columns:
        console.print(f"columns not in the schema (dropped): {', '.join(result.dropped_columns)}")
    if result.blank_lines:
        console.print(f"{result.blank_lines:,} blank line(s) ignored")
    if result.skipped:
        console.print(f"{result.skipped:,} bad row(s) skipped; first ones:", markup=False)
        for bad in result.bad_rows:
            console.print(f"  {bad}", markup=False)
    return 0


# ------------------------------------------------------------------ datagen
def _cmd_datagen(args: argparse.Namespace) -> int:
    """Write deterministic synthetic data."""
    from tfinput import datagen
    from tfinput.schema import Schema

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
    _console().print(
        f"wrote {result.rows:,} rows ({result.bytes / 2**20:,.1f} MiB) to "
        f"{len(result.paths)} {result.format} file(s) in {args.out}; "
        f"schema: {result.schema_path}",
        markup=False,
    )
    return 0


# -------------------------------------------------------------------- bench
def bench_pipeline(paths: list[str], *, schema_path: str | None, fmt: str | None) -> Any:
    """The pipeline ``tfinput bench`` measures (see `_cli_util.pipeline_from_paths`)."""
    return pipeline_from_paths(paths, schema_path=schema_path, fmt=fmt)


def _fmt_rate(x: float | None) -> str:
    if x is None:
        return ""
    return f"{x / 1e3:,.1f}k" if x < 1e6 else f"{x / 1e6:,.2f}M"


def _cmd_bench(args: argparse.Namespace) -> int:
    """Measure configs side by side (and optionally the roofline)."""
    from tfinput import bench, steps

    pipeline = bench_pipeline(args.paths, schema_path=args.schema, fmt=args.format)
    configs = bench.load_configs(
        args.config or ["naive", "heuristic", "autotune"],
        cpu_count=args.cpu_count,
        batch_size=args.batch_size,
    )
    step = steps.simulated_step(args.step_ms / 1e3) if args.step_ms else steps.input_only()
    rl = None
    with progress() as bar:
        if args.roofline:
            sizes = {c.batch_size for c in configs.values()}
            task = bar.add_task("roofline", total=3 * args.roofline_windows)
            rl = bench.roofline(
                pipeline,
                batch_size=max(sizes),
                windows=args.roofline_windows,
                window_batches=args.window_batches,
                warmup_batches=max(1, min(args.warmup_batches, 3)),
                cpu_count=args.cpu_count,
                progress=lambda done, total, w: bar.update(
                    task, completed=done, description=f"roofline {w.name}"
                ),
            )
        task = bar.add_task("configs", total=args.windows * len(configs))
        result = bench.measure(
            pipeline,
            configs,
            step=step,
            windows=args.windows,
            window_batches=args.window_batches,
            warmup_batches=args.warmup_batches,
            baseline=args.baseline,
            cpu_count=args.cpu_count,
            roofline_result=rl,
            progress=lambda done, total, w: bar.update(
                task,
                completed=done,
                description=f"{w.name} round {w.round + 1}: {_fmt_rate(w.examples_per_s)}/s",
            ),
        )
    if args.out:
        result.to_json(args.out)
    if args.json:
        print(result.to_json())
        return 0
    print_bench(result, _console())
    return 0


def print_bench(result: Any, console: Any) -> None:
    """The human-readable report of a `tfinput.bench.BenchResult`."""
    from rich.table import Table as RichTable

    m, hw = result.method, result.machine
    t = RichTable(
        title=f"{hw['cpu_model']} x{hw['cpu_count']}, TensorFlow {hw['tensorflow']}; "
        f"{m['windows']} windows x {m['window_batches']} batches after {m['warmup_batches']} "
        "warm-up, interleaved"
    )
    cols = [
        "config",
        "examples/s",
        "min-max",
        "CV",
        "p50 ms",
        "p99 ms",
        "stall",
        "cores busy",
        "RSS MiB",
        f"x {result.baseline}",
    ]
    if result.roofline is not None:
        cols.append("of roofline")
    for c in cols:
        t.add_column(c, justify="left" if c == "config" else "right")
    for r in result.results:
        ratio = ""
        if r.ratio is not None:
            ratio = f"{r.ratio:.2f} ({r.ratio_min:.2f}-{r.ratio_max:.2f})"
        row = [
            r.name,
            _fmt_rate(r.median),
            f"{_fmt_rate(r.minimum)}-{_fmt_rate(r.maximum)}",
            f"{100 * r.cv:.0f}%",
            f"{r.latency_p50_ms:.1f}",
            f"{r.latency_p99_ms:.1f}",
            "n/a" if r.stall is None else f"{100 * r.stall:.0f}%",  # unknown inside fit
            f"{r.cores_busy:.2f}",
            f"{r.peak_rss_mb:,.0f}",
            ratio,
        ]
        if result.roofline is not None:
            row.append(f"{100 * (r.roofline_fraction or 0):.0f}%")
        t.add_row(*row)
    console.print(t)
    rl = result.roofline
    if rl is not None:
        for line in roofline_lines(rl):
            console.print(line, markup=False)
    best = result.best
    console.print(f"best: {best.name} ({_fmt_rate(best.median)} examples/s)", markup=False)


def roofline_lines(rl: Any) -> list[str]:
    """Two lines explaining a `tfinput.bench.Roofline`."""
    cost = rl.cost_us()
    full, read = rl.stage("full"), rl.stage("read")
    return [
        f"roofline: {_fmt_rate(rl.bound)} examples/s, {rl.limited_by}-bound "
        f"(CPU: {rl.cores} cores x {_fmt_rate(full.examples_per_cpu_s)} examples per "
        f"CPU-second = {_fmt_rate(rl.cpu_bound)}; read: {max(1, min(rl.cores, rl.files))} "
        f"stream(s) x {_fmt_rate(read.examples_per_cpu_s)} = {_fmt_rate(rl.read_bound)})",
        f"CPU cost per example on one core: read {cost['read']:.2f} us + parse "
        f"{cost['parse']:.2f} us + transforms {cost['transform']:.2f} us = "
        f"{cost['total']:.2f} us (stages ran at {full.cores_busy:.2f}/"
        f"{rl.stage('parse').cores_busy:.2f}/{read.cores_busy:.2f} cores busy: full/parse/read)",
    ]


# --------------------------------------------------------------- registration
def add_subcommands(subparsers: Any) -> None:
    """Register ``convert``, ``datagen`` and ``bench`` on a ``tfinput`` subparsers object."""
    from tfinput.convert import PRESETS as CONVERT_PRESETS
    from tfinput.datagen import PRESETS as DATAGEN_PRESETS

    p = subparsers.add_parser(
        "convert",
        help="convert CSV/TSV, Parquet or TFRecord to sharded Parquet, TFRecord or columnar",
        description="Stream CSV/TSV, Parquet or tf.Example TFRecord files into sharded "
        "Parquet, TFRecord or columnar (pre-batched, native, fastest to read) files plus a "
        "schema.json, with bounded memory. Bad rows are reported with their line (CSV) or "
        "row number.",
    )
    p.add_argument(
        "inputs",
        nargs="+",
        help="CSV/TSV (.gz/.bz2 accepted), Parquet or TFRecord files or globs",
    )
    p.add_argument("--out", "-o", required=True, help="output directory (must be empty)")
    p.add_argument(
        "--to",
        choices=["parquet", "tfrecord", "columnar"],
        default="parquet",
        help="output format (columnar: pre-batched records + manifest.json, see docs/columnar.md)",
    )
    p.add_argument(
        "--input-format",
        choices=["auto", "csv", "parquet", "tfrecord"],
        default="auto",
        help="input format (default: by extension)",
    )
    p.add_argument(
        "--chunk-rows",
        type=_count,
        default=1024,
        help="columnar: rows per record; batch sizes that are multiples read fastest "
        "(default 1024)",
    )
    p.add_argument("--preset", choices=list(CONVERT_PRESETS), help="known layout and schema")
    p.add_argument("--schema", help="schema JSON to convert to (overrides preset/inference)")
    p.add_argument("--delimiter", help="field delimiter: a character, tab, comma... (sniffed)")
    p.add_argument("--header", choices=["auto", "yes", "no"], default="auto")
    p.add_argument("--columns", help="comma-separated column names (files without a header)")
    p.add_argument(
        "--list-column",
        action="append",
        metavar="NAME[=DELIM]",
        help="a multi-valued column and its item delimiter (default |); repeatable",
    )
    p.add_argument("--label", help="label column when inferring the schema")
    p.add_argument(
        "--hash-buckets",
        type=_count,
        default=None,
        help="table rows of hashed string columns (default: 100k with a preset; as "
        "`tfinput schema infer` when inferring: 4x the distinct values seen)",
    )
    p.add_argument("--rows-per-file", type=_count, default=1_000_000)
    p.add_argument(
        "--on-bad-rows",
        choices=["error", "skip"],
        default="error",
        help="stop at the first bad row, or skip and count bad rows",
    )
    p.add_argument("--infer-rows", type=_count, default=10_000)
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace part-* files (and schema.json, manifest.json) in --out",
    )
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.set_defaults(func=_handler(_cmd_convert))

    p = subparsers.add_parser(
        "datagen",
        help="write deterministic synthetic data (Criteo-like) as TFRecord or Parquet",
        description="The same arguments always write the same rows, in any format.",
    )
    p.add_argument("out", help="output directory")
    p.add_argument("--preset", choices=sorted(DATAGEN_PRESETS), default="criteo-like")
    p.add_argument("--schema", help="generate data for this schema JSON instead of a preset")
    p.add_argument("--rows", type=_count, required=True, help="rows, e.g. 400k or 1M")
    p.add_argument("--files", type=_count, default=8)
    p.add_argument("--format", choices=["tfrecord", "parquet"], default="tfrecord")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.set_defaults(func=_handler(_cmd_datagen))

    p = subparsers.add_parser(
        "bench",
        help="measure pipeline configs side by side, interleaved, with spread",
        description="Configs take turns window by window; each window uses a fresh iterator "
        "and excludes its warm-up. --roofline adds the machine's estimated upper bound.",
    )
    p.add_argument("paths", nargs="+", help="data files, globs or directories")
    p.add_argument("--schema", help="schema JSON (default: schema.json next to the data)")
    p.add_argument(
        "--format",
        choices=["tfrecord", "parquet", "columnar"],
        default=None,
        help="default: columnar if a manifest.json is there, else by extension",
    )
    p.add_argument(
        "--config",
        action="append",
        metavar="SPEC",
        help="naive, heuristic, autotune, a saved config JSON, or NAME=FILE; repeatable "
        "(default: the three presets)",
    )
    p.add_argument("--baseline", help="config the ratios refer to (default: the first)")
    p.add_argument("--batch-size", type=_count, help="override every config's batch size")
    p.add_argument("--windows", type=int, default=5, help="windows per config (default 5)")
    p.add_argument("--window-batches", type=int, default=20, help="timed batches per window")
    p.add_argument("--warmup-batches", type=int, default=8, help="untimed batches per window")
    p.add_argument("--roofline", action="store_true", help="also measure the roofline")
    p.add_argument("--roofline-windows", type=int, default=3)
    p.add_argument("--cpu-count", type=int, help="cores to assume (default: affinity mask)")
    p.add_argument(
        "--device-time-ms",
        "--step-ms",
        dest="step_ms",
        type=float,
        help="simulate an accelerator step of this many ms per batch (as in tune and profile)",
    )
    p.add_argument("--out", help="also write the JSON result to this file")
    p.add_argument("--json", action="store_true", help="print the JSON result (tfinput.bench/1)")
    p.set_defaults(func=_handler(_cmd_bench))
