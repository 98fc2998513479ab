"""Wide schemas: 1,000 and 3,000 features read as TFRecord, Parquet and columnar records,
at a per-host batch (512) and a large one (4,096), side by side.

    python benchmarks/wide.py                    # measure and print the markdown section
    python benchmarks/wide.py --write            # also replace the section in RESULTS.md
    python benchmarks/wide.py --features 1000    # one width only
    python benchmarks/wide.py --quick            # 1,000 features, 1 round: checks the script

Workload: `wide_schema` of tfinput's datagen (the ``wide`` and ``wide-3000`` presets: a tenth
dense, seven tenths single ids, a fifth multi-hot lists of 0-9 ids, a tenth as many
tables), ``--rows`` rows in 8 files of each format (the same rows), every knob AUTOTUNE
(`PipelineConfig.autotune`), input only, per-feature layout.

Method: ``--rounds`` rounds; each round measures every (format, batch size) once, the
formats' order rotated each round. Each measurement builds the pipeline, takes its first
batch (timed together: *build + first batch*), skips ``--warmup`` batches more, then times
enough batches for ``--timed-rows`` rows (at least 4). Figures: median rows/s over rounds
with min-max; a ratio to TFRecord is the median of the per-round ratios.

*Per-batch cost that does not grow with rows*: each round's time per batch at two batch
sizes, t(512) and t(4,096), fitted to t(B) = fixed + B * per_row (two points, two
unknowns: per_row = (t(4096) - t(512)) / 3584, fixed = t(512) - 512 * per_row); reported
as fixed / t(4096), the share of a 4,096 batch's time it takes (median over rounds).
*Per feature*: the fixed and per-row costs at 1,000 and 3,000 features, differenced and
divided by the 2,000 features between them.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402
from benchmarks.core import FILES, every_format, machine  # noqa: E402

FORMATS = ("tfrecord", "parquet", "columnar")
BATCHES = (512, 4096)
ROWS = 20_000


def wide_data(root: Path, features: int, rows: int) -> tuple[Any, dict[str, list[str]]]:
    """The ``wide_schema(features)`` rows in every format (written once under ``root``)."""
    from tfinput._src.applications.datagen import wide_schema

    schema = wide_schema(features)
    return schema, every_format(schema, root / f"wide-{features}-{rows}", rows)


def measure(pipeline: Any, batch: int, warmup: int, timed_rows: int) -> dict[str, float]:
    """One measurement: build + first batch seconds, and rows/s over the timed batches."""
    from tfinput.config import PipelineConfig

    start = time.perf_counter()
    it = iter(pipeline.build(PipelineConfig.autotune(batch_size=batch), repeat=True))
    next(it)
    first = time.perf_counter() - start
    for _ in range(warmup):
        next(it)
    n = max(4, math.ceil(timed_rows / batch))
    start = time.perf_counter()
    for _ in range(n):
        next(it)
    seconds = time.perf_counter() - start
    del it
    return {"first_s": first, "rate": n * batch / seconds, "batch_s": seconds / n}


def fit(t_small: float, t_large: float, small: int, large: int) -> tuple[float, float]:
    """``(fixed, per_row)`` of t(B) = fixed + B * per_row through two batch times."""
    per_row = (t_large - t_small) / (large - small)
    return t_small - small * per_row, per_row


def run(args: argparse.Namespace) -> dict[int, dict[str, Any]]:
    """Per width: per (format, batch) the rounds' measurements."""
    import tfinput

    results: dict[int, dict[str, Any]] = {}
    for features in args.features:
        schema, files = wide_data(Path(args.data_dir), features, args.rows)
        pipelines = {
            "tfrecord": tfinput.tfrecord(files["tfrecord"], schema),
            "parquet": tfinput.parquet(files["parquet"], schema),
            "columnar": tfinput.columnar(files["columnar"], schema),
        }
        runs: dict[tuple[str, int], list[dict[str, float]]] = {
            (f, b): [] for f in FORMATS for b in args.batch
        }
        for r in range(args.rounds):
            order = FORMATS[r % 3 :] + FORMATS[: r % 3]
            for fmt in order:
                for b in args.batch:
                    runs[fmt, b].append(measure(pipelines[fmt], b, args.warmup, args.timed_rows))
            print(
                f"{features} features, round {r + 1}/{args.rounds}: "
                + ", ".join(
                    f"{f}@{b} {runs[f, b][-1]['rate']:,.0f}/s "
                    f"(first {runs[f, b][-1]['first_s']:.1f} s)"
                    for f in FORMATS
                    for b in args.batch
                ),
                file=sys.stderr,
                flush=True,
            )
        results[features] = runs
    return results


def _spread(xs: list[float], fmt: str = ",.0f") -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def _fits(runs: dict, fmt: str, small: int, large: int) -> list[tuple[float, float, float]]:
    """Each round's ``(fixed s, per_row s, fixed / t(large))``."""
    out = []
    for a, b in zip(runs[fmt, small], runs[fmt, large]):
        fixed, per_row = fit(a["batch_s"], b["batch_s"], small, large)
        out.append((fixed, per_row, fixed / b["batch_s"]))
    return out


def markdown(results: dict[int, dict[str, Any]], args: argparse.Namespace, total_s: float) -> str:
    lines = [
        "<!-- wide:begin (generated by benchmarks/wide.py) -->",
        "## Wide schemas: 1,000 and 3,000 features",
        "",
        f"Machine: {machine()}. Method: `python benchmarks/wide.py` (see its docstring): "
        f"`datagen.wide_schema` rows ({args.rows:,} in {FILES} files per format), "
        f"`PipelineConfig.autotune`, input only; {args.rounds} rounds, every (format, batch) "
        f"once per round, formats in rotating order; each a fresh build, {args.warmup} "
        f"warm-up batches after the first, then at least {args.timed_rows:,} timed rows. "
        f"Median over rounds (min-max). Total time {total_s:.0f} s"
        + (" (--quick: a smoke run, not a result)." if args.quick else "."),
        "",
        "| features | format | batch | rows/s | x TFRecord | build + first batch s |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for features, runs in results.items():
        for fmt in FORMATS:
            for b in args.batch:
                rates = [m["rate"] for m in runs[fmt, b]]
                base = [m["rate"] for m in runs["tfrecord", b]]
                ratio = (
                    "1"
                    if fmt == "tfrecord"
                    else _spread([x / y for x, y in zip(rates, base)], ".2f")
                )
                first = _spread([m["first_s"] for m in runs[fmt, b]], ".1f")
                lines.append(
                    f"| {features:,} | {fmt} | {b:,} | {_spread(rates)} | {ratio} | {first} |"
                )
    if len(args.batch) < 2:
        lines.append("<!-- wide:end -->")
        return "\n".join(lines)
    small, large = min(args.batch), max(args.batch)
    lines += [
        "",
        f"Per-batch cost that does not grow with rows: each round's time per batch at "
        f"{small} and {large:,} fitted to t(B) = fixed + B * per_row (two points, two "
        f"unknowns); share = fixed / t({large:,}). Median over rounds (min-max).",
        "",
        f"| features | format | fixed ms per batch | per row us | share of a {large:,} batch |",
        "|---:|---|---:|---:|---:|",
    ]
    per: dict[int, dict[str, tuple[float, float]]] = {}
    for features, runs in results.items():
        for fmt in FORMATS:
            rounds = _fits(runs, fmt, small, large)
            fixed = [x[0] * 1e3 for x in rounds]
            per_row = [x[1] * 1e6 for x in rounds]
            share = [x[2] * 100 for x in rounds]
            per.setdefault(features, {})[fmt] = (
                statistics.median(fixed),
                statistics.median(per_row),
            )
            lines.append(
                f"| {features:,} | {fmt} | {_spread(fixed, '.1f')} | {_spread(per_row, '.2f')} "
                f"| {_spread(share, '.1f')}% |"
            )
    if len(per) >= 2:
        lo, hi = min(per), max(per)
        lines += [
            "",
            f"Per feature (the medians above at {lo:,} and {hi:,} features, differenced, "
            f"over the {hi - lo:,} features between them):",
            "",
            "| format | fixed us per feature per batch | ns per feature per row |",
            "|---|---:|---:|",
        ]
        for fmt in FORMATS:
            d_fixed = (per[hi][fmt][0] - per[lo][fmt][0]) / (hi - lo) * 1e3
            d_row = (per[hi][fmt][1] - per[lo][fmt][1]) / (hi - lo) * 1e3
            lines.append(f"| {fmt} | {d_fixed:.1f} | {d_row:.2f} |")
    lines.append("<!-- wide:end -->")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--features",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1_000, 3_000],
        help="comma-separated widths (multiples of 10), default 1000,3000",
    )
    p.add_argument(
        "--batch",
        type=lambda s: [int(x) for x in s.split(",")],
        default=list(BATCHES),
        help="comma-separated batch sizes, default 512,4096 (two give the per-batch cost)",
    )
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3, help="batches after the first, untimed")
    p.add_argument("--timed-rows", type=int, default=32_768, help="rows timed per measurement")
    p.add_argument("--data-dir", help="keep the data here (default: a temporary directory)")
    p.add_argument("--quick", action="store_true", help="1,000 features, 1 round: checks it")
    p.add_argument("--write", action="store_true", help="replace the section in RESULTS.md")
    args = parse_args(
        p,
        argv,
        smoke=dict(
            features=[20, 40], batch=[64, 256], rows=2_048, rounds=1, warmup=1, timed_rows=512
        ),
    )
    if args.quick:
        args.features, args.rounds, args.rows = [1_000], 1, 10_000
    import tempfile

    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="tfinput-wide-") as tmp:
        args.data_dir = args.data_dir or tmp
        results = run(args)
    text = markdown(results, args, time.time() - t0)
    print(text)
    if args.write and not args.quick:
        write_section("wide", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
