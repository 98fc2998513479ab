"""What a shuffle costs the default TFRecord plan: the default with
``shuffle_buffer=10000`` against the same plan without a shuffle, against ``read_batch=0``
(tf.data's record shuffle) and against the per-record plan a user writes by hand, side by
side; and whether the shuffled plan's saved position resumes exactly at this size.

    python benchmarks/shuffle_cost.py              # measure and print the markdown section
    python benchmarks/shuffle_cost.py --write      # also replace the section in RESULTS.md
    python benchmarks/shuffle_cost.py --quick      # 40k rows, 2 rounds: checks the script

Workload: criteo-like rows (13 dense, 26 single ids, 4 multi-hot lists of 0-19 ids) as
tf.Example TFRecord, 8 files (`benchmarks/core.py`'s data), batch 4,096, every other knob
AUTOTUNE, input only. The hand-written plan: ``interleave(TFRecordDataset, cycle 8,
AUTOTUNE parallel)``, ``shuffle(10000)``, ``batch(4096)``, ``map(parse_example,
AUTOTUNE)``, ``prefetch`` (no tfinput transforms: it parses only, so it does less work
than tfinput's plans).

Method: ``--rounds`` rounds; each round measures every variant once, the order rotated
by one each round; each measurement builds a fresh iterator over the repeated dataset,
skips ``--warmup`` batches, then times ``--batches`` batches (`benchmarks.core.rate`).
Figures: median examples/s over rounds with min-max; each ratio is the median of the
per-round ratios (min-max). Exact resume: the default shuffled plan's iterator saved
with ``tf.train.Checkpoint`` after 5 batches (the buffer full), the next 10 batches
read, then restored into a fresh build: the 10 batches must be the same, row for row.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402
from benchmarks.core import BATCH, FILES, data, machine, rate  # noqa: E402

ROWS = 400_000
SHUFFLE = 10_000


def names(shuffle: int) -> dict[str, str]:
    """Variant -> what the table calls it."""
    return {
        "unshuffled": "default, no shuffle",
        "shuffled": f"default, `shuffle_buffer={shuffle:,}`",
        "records": f"`read_batch=0`, `shuffle_buffer={shuffle:,}`",
        "hand": f"hand-written per-record plan, `shuffle({shuffle:,})`",
    }


def hand_written(files: list[str], schema: Any, batch: int, shuffle: int) -> Any:
    """The per-record plan a user writes: interleave, shuffle, batch, parse."""
    import tensorflow as tf

    from tfinput._src.core.transforms import parse_spec

    spec = parse_spec(schema)
    ds = tf.data.Dataset.from_tensor_slices(files).interleave(
        tf.data.TFRecordDataset, cycle_length=len(files), num_parallel_calls=tf.data.AUTOTUNE
    )
    ds = ds.shuffle(shuffle).batch(batch, drop_remainder=True)
    ds = ds.map(lambda x: tf.io.parse_example(x, spec), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def resumes_exactly(pipeline: Any, config: Any, directory: Path) -> bool:
    """Saved after 5 batches, restored into a fresh build: the next 10 batches match."""
    import numpy as np
    import tensorflow as tf

    def ids(batch: Any) -> Any:
        features, _ = batch
        return np.concatenate([v.numpy().ravel() for v in features["ids"].values()])

    it = iter(pipeline.build(config))
    for _ in range(5):
        next(it)
    prefix = tf.train.Checkpoint(iterator=it).write(str(directory / "position"))
    want = [ids(next(it)) for _ in range(10)]
    fresh = iter(pipeline.build(config))
    tf.train.Checkpoint(iterator=fresh).read(prefix).assert_consumed()
    got = [ids(next(fresh)) for _ in range(10)]
    return all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--data-dir", help="keep the data here (default: a temporary directory)")
    p.add_argument("--quick", action="store_true", help="40k rows, 2 rounds: checks the script")
    p.add_argument("--write", action="store_true", help="replace the section in RESULTS.md")
    args = parse_args(p, argv, smoke=dict(rows=16_384, rounds=1, warmup=1, batches=2))
    if args.quick:
        args.rows, args.rounds, args.warmup, args.batches = 40_000, 2, 2, 5
    batch = 512 if args.smoke else BATCH
    shuffle = 1_000 if args.smoke else SHUFFLE

    t0 = time.time()
    machine_line = machine()
    import tfinput
    from tfinput.config import PipelineConfig

    with tempfile.TemporaryDirectory(prefix="tfinput-shuffle-cost-") as tmp:
        schema, files, _ = data(Path(args.data_dir or tmp), args.rows)
        pipeline = tfinput.tfrecord(files, schema)
        config = PipelineConfig(batch_size=batch)
        shuffled = config.replace(shuffle_buffer=shuffle, shuffle_seed=0)
        variants = {
            "unshuffled": lambda: pipeline.build(config),
            "shuffled": lambda: pipeline.build(shuffled),
            "records": lambda: pipeline.build(shuffled.replace(read_batch=0)),
            "hand": lambda: hand_written(files, schema, batch, shuffle),
        }
        order = list(variants)
        rates: dict[str, list[float]] = {n: [] for n in order}
        for r in range(args.rounds):
            for name in order[r % len(order) :] + order[: r % len(order)]:
                rates[name].append(rate(variants[name], args.warmup, args.batches) * batch / BATCH)
            print(
                f"round {r + 1}/{args.rounds}: "
                + ", ".join(f"{n} {rates[n][-1]:,.0f}/s" for n in order),
                file=sys.stderr,
                flush=True,
            )
        exact = resumes_exactly(pipeline, shuffled, Path(tmp))

    def ratio(a: str, b: str) -> str:
        xs = [x / y for x, y in zip(rates[a], rates[b], strict=True)]
        return f"**{statistics.median(xs):.2f}x** ({min(xs):.2f}-{max(xs):.2f})"

    lines = [
        "<!-- shuffle-cost:begin (generated by benchmarks/shuffle_cost.py) -->",
        "## What a shuffle costs the default TFRecord plan",
        "",
        f"Machine: {machine_line}. Method: `python benchmarks/shuffle_cost.py` (see its "
        f"docstring): criteo-like {args.rows:,} rows as tf.Example TFRecord in {FILES} "
        f"files, batch {batch:,}, AUTOTUNE, input only; {args.rounds} rounds, every "
        f"variant once per round in rotating order, {args.warmup} warm-up batches "
        f"excluded, {args.batches} timed batches; ratios are medians of per-round "
        f"ratios (min-max). Total time {time.time() - t0:.0f} s"
        + (" (--quick: a smoke run, not a result)." if args.quick else "."),
        "",
        "| plan | examples/s (median) | min | max |",
        "|---|---:|---:|---:|",
    ]
    for name in order:
        xs = rates[name]
        lines.append(
            f"| {names(shuffle)[name]} | {statistics.median(xs):,.0f} | {min(xs):,.0f} | {max(xs):,.0f} |"
        )
    lines += [
        "",
        f"- default shuffled / default unshuffled: {ratio('shuffled', 'unshuffled')}",
        f"- default shuffled / hand-written per-record plan: {ratio('shuffled', 'hand')}",
        f"- default shuffled / `read_batch=0` shuffled: {ratio('shuffled', 'records')}",
        f"- saved position of the default shuffled plan after 5 batches, restored into a "
        f"fresh build: the next 10 batches {'the same' if exact else '**differ**'}.",
        "<!-- shuffle-cost:end -->",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write and not args.quick:
        write_section("shuffle-cost", text)
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
