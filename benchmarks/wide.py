"""Wide schemas: 1,000 and 3,000 features read as TFRecord, Parquet and columnar records,
at a per-host batch (512) and a large one (4,096), side by side.

    python benchmarks/wide.py                    # measure and print the markdown section
    python benchmarks/wide.py --write            # also replace the section in RESULTS.md
    python benchmarks/wide.py --features 1000    # one width only
    python benchmarks/wide.py --quick            # 1,000 features, 1 round: checks the script
    python benchmarks/wide.py --features 1000 --shuffle-buffer 10000 --write
                                                 # shuffled reads: their own section

Workload: `wide_schema` of tfinput's datagen (the ``wide`` and ``wide-3000`` presets: a tenth
dense, seven tenths single ids, a fifth multi-hot lists of 0-9 ids, a tenth as many
tables), ``--rows`` rows in 8 files of each format (the same rows), every knob AUTOTUNE
(`PipelineConfig.autotune`), input only, per-feature layout. Two more rows per width:
*columnar, small chunks* (the same rows as columnar records of as many rows per chunk as
the smaller batch, ``convert --chunk-rows``), and *from memory* (the columnar pipeline's
first batch repeated by ``tf.data.Dataset.from_tensors(batch).repeat()``: no read, no
decode; what the consumer alone allows for this output, the ceiling of every format).

Consumers: every batch is taken two ways from the same iterator, in alternating order:
*eager* (``next(it)`` in Python: every tensor of the batch becomes a Python object, as in
a JAX training loop or a hand-written loop) and *in-graph* (``next(it)`` inside a
``tf.function`` that keeps the batch in the graph, as Keras ``fit`` on the TensorFlow
backend does). At 1,000 features a batch is about 1,200 tensors: the eager consumer
turns them into Python objects on one of the host's cores, which the pipeline then
does not have.

Method: ``--rounds`` rounds; each round measures every (variant, batch size) once, the
variants' order rotated each round. Each measurement builds the pipeline, takes its first
batch (timed together: *build + first batch*), then per consumer (the first one
alternating by round) skips ``--warmup`` batches more and times enough batches for
``--timed-rows`` rows (at least 4). Figures: median rows/s over rounds with min-max; a
ratio to TFRecord is the median of the per-round ratios.

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
#: Every measured variant: the formats, columnar in chunks of the smaller batch, and the
#: first batch repeated from memory.
VARIANTS = (*FORMATS, "columnar-small", "memory")
CONSUMERS = ("eager", "graph")
BATCHES = (512, 4096)
ROWS = 20_000


def wide_data(
    root: Path, features: int, rows: int, small_chunk: int
) -> tuple[Any, dict[str, list[str]]]:
    """The ``wide_schema(features)`` rows in every format, and as columnar records of
    ``small_chunk`` rows per chunk (written once under ``root``)."""
    from tfinput import testing
    from tfinput._src.applications.datagen import wide_schema

    schema = wide_schema(features)
    out = root / f"wide-{features}-{rows}"
    files = every_format(schema, out, rows)
    small = out / f"columnar-{small_chunk}"
    if not (small / "done").exists():
        cols = testing.generate(schema, rows, seed=0)  # every_format's rows
        testing.write_columnar(
            small, schema, rows=rows, files=FILES, columns=cols, chunk_rows=small_chunk
        )
        (small / "done").touch()
    return schema, files | {"columnar-small": sorted(map(str, small.glob("*.tfcol")))}


def _takers(it: Any) -> dict[str, Any]:
    """Per consumer, a function taking one batch from ``it``."""
    import tensorflow as tf

    @tf.function
    def in_graph(iterator: Any) -> tf.Tensor:
        next(iterator)  # the batch stays in the graph, as in Keras fit's train function
        return tf.constant(0)

    return {"eager": lambda: next(it), "graph": lambda: in_graph(it)}


def measure(
    dataset: Any, batch: int, warmup: int, timed_rows: int, consumers: tuple[str, ...]
) -> dict[str, float]:
    """One measurement of a built dataset: build + first batch seconds (``dataset`` a
    function building it), and per consumer rows/s and seconds per batch."""
    start = time.perf_counter()
    it = iter(dataset())
    next(it)
    out = {"first_s": time.perf_counter() - start}
    takers = _takers(it)
    n = max(4, math.ceil(timed_rows / batch))
    for consumer in consumers:
        take = takers[consumer]
        for _ in range(max(1, warmup)):  # the first in-graph call traces
            take()
        start = time.perf_counter()
        for _ in range(n):
            take()
        seconds = time.perf_counter() - start
        out[f"rate/{consumer}"] = n * batch / seconds
        out[f"batch_s/{consumer}"] = seconds / n
    del it, takers
    return out


def fit(t_small: float, t_large: float, small: int, large: int) -> tuple[float, float]:
    """``(fixed, per_row)`` of t(B) = fixed + B * per_row through two batch times."""
    per_row = (t_large - t_small) / (large - small)
    return t_small - small * per_row, per_row


def _builders(pipelines: dict[str, Any], shuffle_buffer: int) -> Any:
    """``builder(variant, batch)``: a function building that variant's dataset."""
    import tensorflow as tf

    from tfinput.config import PipelineConfig

    first: dict[int, Any] = {}

    def builder(variant: str, b: int) -> Any:
        config = PipelineConfig.autotune(batch_size=b, shuffle_buffer=shuffle_buffer)
        if variant != "memory":
            return lambda: pipelines[variant].build(config, repeat=True)
        if b not in first:  # the batch every format yields, held in memory
            first[b] = next(iter(pipelines["columnar"].build(config)))
        return lambda: tf.data.Dataset.from_tensors(first[b]).repeat().prefetch(2)

    return builder


def run(args: argparse.Namespace) -> dict[int, dict[str, Any]]:
    """Per width: per (variant, batch) the rounds' measurements."""
    import tfinput

    small_chunk = min(args.batch)
    results: dict[int, dict[str, Any]] = {}
    for features in args.features:
        schema, files = wide_data(Path(args.data_dir), features, args.rows, small_chunk)
        pipelines = {
            "tfrecord": tfinput.tfrecord(files["tfrecord"], schema),
            "parquet": tfinput.parquet(files["parquet"], schema),
            "columnar": tfinput.columnar(files["columnar"], schema),
            "columnar-small": tfinput.columnar(files["columnar-small"], schema),
        }
        builder = _builders(pipelines, args.shuffle_buffer)
        runs: dict[tuple[str, int], list[dict[str, float]]] = {
            (v, b): [] for v in VARIANTS for b in args.batch
        }
        for r in range(args.rounds):
            order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
            consumers = CONSUMERS if r % 2 == 0 else CONSUMERS[::-1]
            for variant in order:
                for b in args.batch:
                    runs[variant, b].append(
                        measure(builder(variant, b), b, args.warmup, args.timed_rows, consumers)
                    )
            print(
                f"{features} features, round {r + 1}/{args.rounds}: "
                + ", ".join(
                    f"{v}@{b} {runs[v, b][-1]['rate/eager']:,.0f}/s eager, "
                    f"{runs[v, b][-1]['rate/graph']:,.0f}/s in-graph"
                    for v in VARIANTS
                    for b in args.batch
                ),
                file=sys.stderr,
                flush=True,
            )
        results[features] = runs
    return results


def _spread(xs: list[float], fmt: str = ",.0f") -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def _fits(
    runs: dict, variant: str, consumer: str, small: int, large: int
) -> list[tuple[float, float, float]]:
    """Each round's ``(fixed s, per_row s, fixed / t(large))`` for one consumer."""
    out = []
    key = f"batch_s/{consumer}"
    for a, b in zip(runs[variant, small], runs[variant, large]):
        fixed, per_row = fit(a[key], b[key], small, large)
        out.append((fixed, per_row, fixed / b[key]))
    return out


def _section(args: argparse.Namespace) -> str:
    """The RESULTS.md section: shuffled reads have their own."""
    return "wide-shuffled" if args.shuffle_buffer else "wide"


def _label(variant: str, small: int) -> str:
    return {
        "columnar-small": f"columnar, {small}-row chunks",
        "memory": "from memory (ceiling)",
    }.get(variant, variant)


def markdown(results: dict[int, dict[str, Any]], args: argparse.Namespace, total_s: float) -> str:
    small, large = min(args.batch), max(args.batch)
    lines = [
        f"<!-- {_section(args)}:begin (generated by benchmarks/wide.py) -->",
        "## Wide schemas: "
        + " and ".join(f"{f:,}" for f in sorted(results))
        + " features"
        + (f", shuffled (`shuffle_buffer={args.shuffle_buffer:,}`)" if args.shuffle_buffer else ""),
        "",
        f"Machine: {machine()}. Method: `python benchmarks/wide.py` (see its docstring): "
        f"`datagen.wide_schema` rows ({args.rows:,} in {FILES} files per format; columnar "
        f"in chunks of 1,024 rows, the default, and of {small} rows), "
        f"`PipelineConfig.autotune`"
        + (f" with `shuffle_buffer={args.shuffle_buffer:,}`" if args.shuffle_buffer else "")
        + f", input only; {args.rounds} rounds, every (variant, "
        f"batch) once per round, variants in rotating order; each a fresh build, then per "
        f"consumer (eager `next` in Python; `next` inside a `tf.function`, as Keras `fit` "
        f"on TensorFlow takes batches; alternating which goes first) {args.warmup} warm-up "
        f"batches and at least {args.timed_rows:,} timed rows. *From memory*: the first "
        f"columnar batch repeated from memory, the consumer's own ceiling. Median over "
        f"rounds (min-max). Total time {total_s:.0f} s"
        + (" (--quick: a smoke run, not a result)." if args.quick else "."),
        "",
        "| features | variant | batch | rows/s, eager | x TFRecord | rows/s, in-graph "
        "| x TFRecord | build + first batch s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for features, runs in results.items():
        for variant in VARIANTS:
            for b in args.batch:
                cells = []
                for consumer in CONSUMERS:
                    rates = [m[f"rate/{consumer}"] for m in runs[variant, b]]
                    base = [m[f"rate/{consumer}"] for m in runs["tfrecord", b]]
                    ratio = (
                        "1"
                        if variant == "tfrecord"
                        else _spread([x / y for x, y in zip(rates, base)], ".2f")
                    )
                    cells += [_spread(rates), ratio]
                first = (
                    "-"
                    if variant == "memory"
                    else _spread([m["first_s"] for m in runs[variant, b]], ".1f")
                )
                lines.append(
                    f"| {features:,} | {_label(variant, small)} | {b:,} | "
                    + " | ".join(cells)
                    + f" | {first} |"
                )
    if len(args.batch) >= 2:
        lines += _fixed_tables(results, small, large)
    lines.append(f"<!-- {_section(args)}:end -->")
    return "\n".join(lines)


def _fixed_tables(results: dict[int, dict[str, Any]], small: int, large: int) -> list[str]:
    """The per-batch cost that does not grow with rows, and the cost per feature."""
    lines = [
        "",
        f"Per-batch cost that does not grow with rows: each round's time per batch at "
        f"{small} and {large:,} fitted to t(B) = fixed + B * per_row (two points, two "
        f"unknowns); share = fixed / t({large:,}). Median over rounds (min-max).",
        "",
        f"| features | variant | consumer | fixed ms per batch | per row us "
        f"| share of a {large:,} batch |",
        "|---:|---|---|---:|---:|---:|",
    ]
    per: dict[tuple[int, str], dict[str, tuple[float, float]]] = {}
    for features, runs in results.items():
        for variant in VARIANTS:
            for consumer in CONSUMERS:
                rounds = _fits(runs, variant, consumer, small, large)
                fixed = [x[0] * 1e3 for x in rounds]
                per_row = [x[1] * 1e6 for x in rounds]
                share = [x[2] * 100 for x in rounds]
                per.setdefault((features, consumer), {})[variant] = (
                    statistics.median(fixed),
                    statistics.median(per_row),
                )
                lines.append(
                    f"| {features:,} | {_label(variant, small)} | {consumer} "
                    f"| {_spread(fixed, '.1f')} | {_spread(per_row, '.2f')} "
                    f"| {_spread(share, '.1f')}% |"
                )
    widths = sorted(results)
    if len(widths) >= 2:
        lo, hi = widths[0], widths[-1]
        lines += [
            "",
            f"Per feature (the medians above at {lo:,} and {hi:,} features, differenced, "
            f"over the {hi - lo:,} features between them):",
            "",
            "| variant | consumer | fixed us per feature per batch | ns per feature per row |",
            "|---|---|---:|---:|",
        ]
        for variant in VARIANTS:
            for consumer in CONSUMERS:
                a, b = per[lo, consumer][variant], per[hi, consumer][variant]
                d_fixed = (b[0] - a[0]) / (hi - lo) * 1e3
                d_row = (b[1] - a[1]) / (hi - lo) * 1e3
                lines.append(
                    f"| {_label(variant, small)} | {consumer} | {d_fixed:.1f} | {d_row:.2f} |"
                )
    return lines


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
    p.add_argument(
        "--shuffle-buffer",
        type=int,
        default=0,
        help="PipelineConfig.shuffle_buffer (rows; default 0: unshuffled); a section of its own",
    )
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
        write_section(_section(args), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
