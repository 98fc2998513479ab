"""Columnar benchmark: columnar pre-batched records against tf.Example TFRecord and
Parquet, each at its best config on this machine, plus size on disk and the cost of
chunk verification.

    python benchmarks/columnar.py              # measure and print the markdown section
    python benchmarks/columnar.py --write      # also replace the section in RESULTS.md
    python benchmarks/columnar.py --quick      # small data, few batches: checks the script

Workload: criteo-like, 400k rows (13 dense, 26 single ids, 4 multi-hot lists of 0-19
ids), 8 files per format holding the same rows in the same order, batch 4096.

Method, in two phases:

1. **Grid.** Each format gets a small grid of configs (interleave and map parallelism,
   prefetch 2); every grid config is measured ``--grid-rounds`` times, interleaved
   within the format, and the best median wins. The columnar grid is run with
   verification on (the default).
2. **Final.** The winners, plus columnar without verification (same config) and
   columnar with a batch that is not a multiple of the chunk (4000: the rebatch path),
   are measured in ``--rounds`` rounds, each round visiting every variant once in a
   rotating order. Each measurement builds a fresh iterator over an endlessly repeated
   dataset, skips ``--warmup`` batches, then times ``--batches`` batches. Figures are
   medians over rounds with min-max and the coefficient of variation; ratios are medians
   of the per-round ratios.

Targets (issue "Columnar pre-batched records"): columnar >= 3x the best tf.Example
figure and >= 800k examples/s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402
from benchmarks.core import FILES, data, machine, summarize  # noqa: E402

ROWS = 400_000
BATCH = 4096
CHUNK = 1024
OFF_BATCH = 4000  # not a multiple of CHUNK: the rebatch path


def columnar_data(root: Path, rows: int, parquet_files: list[str]) -> str:
    """The same rows as the Parquet files, as columnar records (written once)."""
    import pyarrow.parquet as pq

    from benchmarks.core import criteo_schema
    from tfinput.columnar_records import MANIFEST, ColumnarWriter

    out = root / f"criteo-{rows}" / "columnar"
    if not (out / MANIFEST).exists():
        per_file = -(-rows // FILES)
        with ColumnarWriter(
            out, criteo_schema(), chunk_rows=CHUNK, rows_per_file=per_file
        ) as writer:
            for path in parquet_files:
                for batch in pq.ParquetFile(path).iter_batches(64 * 1024):
                    writer.write(batch)
    return str(out)


def size_mb(paths: list[str]) -> float:
    return sum(Path(p).stat().st_size for p in paths) / 2**20


def rate(make: Callable[[], Any], batch: int, warmup: int, batches: int) -> float:
    it = iter(make().repeat())
    for _ in range(warmup):
        next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * batch / (time.perf_counter() - start)


def rounds(
    variants: dict[str, tuple[Callable[[], Any], int]],
    n: int,
    warmup: int,
    batches: int,
    label: str,
) -> dict[str, list[float]]:
    """Measure every variant ``n`` times, interleaved in rotating order."""
    names = list(variants)
    out: dict[str, list[float]] = {k: [] for k in names}
    for r in range(n):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            make, batch = variants[name]
            out[name].append(rate(make, batch, warmup, batches))
        print(
            f"{label} round {r + 1}/{n}: " + ", ".join(f"{k} {out[k][-1]:,.0f}/s" for k in names),
            file=sys.stderr,
        )
    return out


def grids(autotune: int) -> dict[str, list[dict[str, int]]]:
    """Small grids of knobs per format (prefetch 2 everywhere)."""
    tfrecord = [
        dict(interleave_cycle_length=c, interleave_parallelism=c, map_parallelism=m)
        for c in (1, 2)
        for m in (2, 3, 4)
    ]
    parquet = [
        dict(interleave_cycle_length=4, interleave_parallelism=p, map_parallelism=m)
        for p in (1, autotune)
        for m in (1, 2)
    ]
    columnar = [
        dict(interleave_cycle_length=c, interleave_parallelism=c, map_parallelism=m)
        for c in (1, 2)
        for m in (1, 2, 3)
    ]
    return {"tf.Example TFRecord": tfrecord, "Parquet": parquet, "columnar": columnar}


def describe(knobs: dict[str, int]) -> str:
    short = {
        "interleave_cycle_length": "cycle",
        "interleave_parallelism": "interleave",
        "map_parallelism": "map",
    }
    return ", ".join(f"{short[k]} {'auto' if v == -1 else v}" for k, v in knobs.items())


def ratios(a: list[float], b: list[float]) -> tuple[float, float, float]:
    r = [x / y for x, y in zip(a, b)]
    return statistics.median(r), min(r), max(r)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--grid-rounds", type=int, default=2)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--grid-batches", type=int, default=20)
    p.add_argument("--data-dir", default=str(HERE / ".data"))
    p.add_argument("--quick", action="store_true", help="20k rows, 2 rounds: checks the script")
    p.add_argument("--write", action="store_true", help="update RESULTS.md")
    args = parse_args(
        p,
        argv,
        smoke=dict(rows=8_192, rounds=1, grid_rounds=1, warmup=1, batches=2, grid_batches=1),
    )
    if args.quick:
        args.rows, args.rounds, args.grid_rounds = 20_000, 2, 1
        args.warmup, args.batches, args.grid_batches = 2, 4, 3

    import tfinput
    from tfinput.config import AUTOTUNE, PipelineConfig

    t0 = time.time()
    root = Path(args.data_dir)
    schema, tf_files, pq_files = data(root, args.rows)
    col_dir = columnar_data(root, args.rows, pq_files)
    col_files = tfinput.columnar(col_dir).source.files()

    def config(knobs: dict[str, int], batch: int = BATCH) -> PipelineConfig:
        return PipelineConfig(batch_size=batch, prefetch=2, **knobs)

    def build(fmt: str, knobs: dict[str, int], **kw: Any) -> Callable[[], Any]:
        batch = kw.pop("batch", BATCH)
        if fmt == "tf.Example TFRecord":
            return lambda: tfinput.tfrecord(tf_files, schema).build(config(knobs, batch))
        if fmt == "Parquet":
            return lambda: tfinput.parquet(pq_files, schema).build(config(knobs, batch))
        return lambda: tfinput.columnar(col_dir, schema, **kw).build(config(knobs, batch))

    built: dict[str, Any] = {}

    def maker(fmt: str, knobs: dict[str, int], **kw: Any) -> Callable[[], Any]:
        make = build(fmt, knobs, **kw)
        if not args.smoke:
            return make
        # --smoke: each dataset built once (the grid's winners are the final's variants),
        # each measurement still a fresh iterator over it
        key = repr((fmt, knobs, kw))
        return lambda: built[key] if key in built else built.setdefault(key, make())

    # Phase 1: the best config of each format.
    best: dict[str, dict[str, int]] = {}
    grid_report: dict[str, float] = {}
    for fmt, grid in grids(AUTOTUNE).items():
        grid = grid[:1] if args.smoke else grid  # --smoke: one grid point per format
        variants = {describe(k): (maker(fmt, k), BATCH) for k in grid}
        measured = rounds(variants, args.grid_rounds, args.warmup, args.grid_batches, f"grid {fmt}")
        name = max(measured, key=lambda n: statistics.median(measured[n]))
        best[fmt] = grid[list(variants).index(name)]
        grid_report[fmt] = statistics.median(measured[name])

    # Phase 2: the winners side by side, interleaved.
    col = best["columnar"]
    final = {
        "tf.Example TFRecord": (maker("tf.Example TFRecord", best["tf.Example TFRecord"]), BATCH),
        "Parquet": (maker("Parquet", best["Parquet"]), BATCH),
        "columnar": (maker("columnar", col), BATCH),
        "columnar, verify off": (maker("columnar", col, verify=False), BATCH),
        f"columnar, batch {OFF_BATCH} (rebatch)": (
            maker("columnar", col, batch=OFF_BATCH),
            OFF_BATCH,
        ),
    }
    measured = rounds(final, args.rounds, args.warmup, args.batches, "final")
    s = {n: summarize(v) for n, v in measured.items()}
    vs_tf = ratios(measured["columnar"], measured["tf.Example TFRecord"])
    vs_pq = ratios(measured["columnar"], measured["Parquet"])
    verify_cost = [
        1 - a / b for a, b in zip(measured["columnar"], measured["columnar, verify off"])
    ]
    sizes = {
        "tf.Example TFRecord": size_mb(tf_files),
        "Parquet": size_mb(pq_files),
        "columnar": size_mb(col_files),
    }
    col_rate = s["columnar"]["median"]

    lines = [
        "<!-- columnar:begin (generated by benchmarks/columnar.py) -->",
        "### Columnar pre-batched records vs tf.Example TFRecord vs Parquet",
        "",
        f"Machine: {machine()}.",
        f"Workload: criteo-like {args.rows:,} rows in {FILES} files per format (the same rows "
        f"in the same order), batch {BATCH}, columnar chunks of {CHUNK} rows. Method: a grid "
        f"per format ({args.grid_rounds} interleaved measurement(s) of {args.grid_batches} "
        "batches per config; best median wins), then the winners in "
        f"{args.rounds} rounds, variants interleaved in rotating order, fresh iterator per "
        f"measurement, {args.warmup} warm-up batches excluded, {args.batches} timed batches. "
        f"Total time {time.time() - t0:.0f} s"
        + (" (--quick: a smoke run, not a result)." if args.quick else "."),
        "",
        "| variant | best config (prefetch 2) | median examples/s | min-max | CV | size on disk |",
        "|---|---|---:|---:|---:|---:|",
    ]
    config_of = {
        "tf.Example TFRecord": best["tf.Example TFRecord"],
        "Parquet": best["Parquet"],
        "columnar": col,
        "columnar, verify off": col,
        f"columnar, batch {OFF_BATCH} (rebatch)": col,
    }
    for n in final:
        size = sizes.get(n)
        lines.append(
            f"| {n} | {describe(config_of[n])} | {s[n]['median']:,.0f} | "
            f"{s[n]['min']:,.0f}-{s[n]['max']:,.0f} | {s[n]['cv']:.1%} | "
            + (f"{size:,.0f} MiB |" if size is not None else "same files |")
        )
    ok_ratio = vs_tf[0] >= 3.0
    ok_rate = col_rate >= 800_000
    lines += [
        "",
        f"- columnar / tf.Example (best vs best, per-round ratios): **{vs_tf[0]:.2f}x** "
        f"(range {vs_tf[1]:.2f}-{vs_tf[2]:.2f}; target >= 3x: {'met' if ok_ratio else 'NOT met'}).",
        f"- columnar: **{col_rate:,.0f} examples/s** (target >= 800,000: "
        f"{'met' if ok_rate else 'NOT met'}); columnar / Parquet: {vs_pq[0]:.2f}x "
        f"(range {vs_pq[1]:.2f}-{vs_pq[2]:.2f}).",
        f"- chunk verification (FarmHash64 of every byte read, checked against the manifest): "
        f"costs **{statistics.median(verify_cost):+.1%}** of throughput (per-round range "
        f"{min(verify_cost):+.1%} to {max(verify_cost):+.1%}).",
        f"- a batch that is not a multiple of the chunk ({OFF_BATCH}) goes through "
        "`Dataset.rebatch`, which moves list columns row by row: "
        f"{s[f'columnar, batch {OFF_BATCH} (rebatch)']['median'] / col_rate:.2f}x the "
        "whole-chunk rate.",
        "- Grid winners' grid medians: "
        + ", ".join(f"{k} {v:,.0f}/s" for k, v in grid_report.items())
        + ".",
        "<!-- columnar:end -->",
    ]
    section = "\n".join(lines)
    print(section)
    if args.write:
        write_section("columnar", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
