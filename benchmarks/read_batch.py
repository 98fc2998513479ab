"""TFRecord with records batched inside the file branches (``read_batch``) against
today's plan (records handed to the consumer side one at a time), side by side.

    python benchmarks/read_batch.py              # measure and print the markdown section
    python benchmarks/read_batch.py --write      # also replace the section in RESULTS.md
    python benchmarks/read_batch.py --quick      # 40k rows, 2 rounds: checks the script

Workload: criteo-like rows (13 dense, 26 single ids, 4 multi-hot lists of 0-19 ids) as
tf.Example TFRecord, 8 files (`benchmarks/core.py`'s data), batch 4096, every other knob
AUTOTUNE; each plan without a shuffle and with ``shuffle_buffer=10000`` (a buffer of
10,000 records in both plans; with ``read_batch`` it shuffles the mini-batches' records a
window of 5,000 at a time, and mini-batches hold at most 468 records).

Method: ``--rounds`` rounds; each round measures every variant once, the order rotated by
one each round; each measurement builds a fresh iterator over the repeated dataset,
skips ``--warmup`` batches, then times ``--batches`` batches (`benchmarks.core.rate`,
input only). Figures: median examples/s over rounds with min-max; the ratio to
``read_batch=0`` of the same shuffle is the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402
from benchmarks.core import BATCH, FILES, data, machine, rate  # noqa: E402
from benchmarks.resume_state import mixing, state  # noqa: E402

ROWS = 400_000
MIX_ROWS = 8 * 16 * 1024  # whole 1024-row blocks per file, as `mixing` expects
READ_BATCHES = (0, 64, 256, 1024)
SHUFFLES = (0, 10_000)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--mix-rows", type=int, default=MIX_ROWS, help="rows of the mixing table")
    p.add_argument("--data-dir", help="keep the data here (default: a temporary directory)")
    p.add_argument("--quick", action="store_true", help="40k rows, 2 rounds: checks the script")
    p.add_argument("--write", action="store_true", help="replace the section in RESULTS.md")
    args = parse_args(
        p, argv, smoke=dict(rows=8_192, mix_rows=8_192, rounds=1, warmup=1, batches=2)
    )
    # --smoke: one read_batch against today's plan, under a small shuffle (so the saved
    # position is taken too), one saved position
    read_batches, shuffles = ((0, 256), (1_000,)) if args.smoke else (READ_BATCHES, SHUFFLES)
    after, repeats = (1, 1) if args.smoke else (3, 3)
    if args.quick:
        args.rows, args.rounds, args.warmup, args.batches = 40_000, 2, 2, 5

    t0 = time.time()
    machine_line = machine()
    import tfinput
    from tfinput._src.core.sources.tfrecord import mini_batch
    from tfinput.config import PipelineConfig

    variants = {
        f"read_batch={r}, shuffle {s:,}": PipelineConfig(
            batch_size=BATCH, read_batch=r, shuffle_buffer=s, shuffle_seed=0 if s else None
        )
        for s in shuffles
        for r in read_batches
    }
    names = list(variants)
    rates: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="tfinput-read-batch-") as tmp:
        schema, tf_files, _ = data(Path(args.data_dir or tmp), args.rows)
        pipeline = tfinput.tfrecord(tf_files, schema)
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                config = variants[name]
                rates[name].append(
                    rate(
                        lambda config=config: pipeline.build(config),
                        args.warmup,
                        args.batches,
                    )
                )
            print(
                f"round {r + 1}/{args.rounds}: "
                + ", ".join(f"{n} {rates[n][-1]:,.0f}/s" for n in names),
                file=sys.stderr,
                flush=True,
            )
        # The saved position (tf.train.Checkpoint of the built dataset's iterator) with
        # the shuffle buffer full: its records are in the file, whichever the plan.
        # --smoke: the saved position and the mixing of the read_batch plan only.
        kept = names[-1:] if args.smoke else names
        states = {
            name: state(pipeline, variants[name], after=after, repeats=repeats)
            for name in kept
            if variants[name].shuffle_buffer
        }
        # Mixing: one epoch of each plan over rows whose row_id says file and position.
        from tfinput import testing

        mix_dir = Path(args.data_dir or tmp) / f"mix-tfrecord-{args.mix_rows}"
        mix_schema = testing.small_schema()
        if not mix_dir.exists():
            testing.write_tfrecord(mix_dir, mix_schema, rows=args.mix_rows, files=FILES)
        mix_pipeline = tfinput.tfrecord(sorted(map(str, mix_dir.iterdir())), mix_schema)
        mixes = {
            name: mixing(
                mix_pipeline,
                variants[name].replace(shuffle_seed=1),
                rows=args.mix_rows,
                files=FILES,
            )
            for name in kept
        }
    total_s = time.time() - t0
    lines = [
        "<!-- read-batch:begin (generated by benchmarks/read_batch.py) -->",
        "## TFRecord: records batched in the file branches (`read_batch`)",
        "",
        f"Machine: {machine_line}. Method: `python benchmarks/read_batch.py` (see its "
        f"docstring): criteo-like {args.rows:,} rows as tf.Example TFRecord in {FILES} "
        f"files, batch {BATCH}, every other knob AUTOTUNE, input only; {args.rounds} "
        f"rounds, every variant once per round in rotating order, {args.warmup} warm-up "
        f"batches excluded, {args.batches} timed batches. Total time {total_s:.0f} s"
        + (" (--quick: a smoke run, not a result)." if args.quick else "."),
        "",
        "| read_batch | shuffle_buffer | mini-batch | examples/s (median) | min | max | "
        "x read_batch=0 (median, range) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in shuffles:
        base = rates[f"read_batch=0, shuffle {s:,}"]
        for r in read_batches:
            xs = rates[f"read_batch={r}, shuffle {s:,}"]
            ratios = [a / b for a, b in zip(xs, base)]
            ratio = (
                "1"
                if r == 0
                else f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
            )
            mini = mini_batch(variants[f"read_batch={r}, shuffle {s:,}"])
            lines.append(
                f"| {r} | {s:,} | {mini or 1} | {statistics.median(xs):,.0f} | "
                f"{min(xs):,.0f} | {max(xs):,.0f} | {ratio} |"
            )
    lines += [
        "",
        f"Mixing, one epoch of {args.mix_rows:,} rows in {FILES} files (`benchmarks/"
        "resume_state.py`'s `mixing`: per batch, the distinct files among its rows and "
        "the spread of their positions in their files, 1.0 as a uniform draw; the "
        "correlation of a batch's index with its rows' mean position in their files, 0: "
        "none):",
        "",
        "| read_batch | shuffle_buffer | files per batch | spread | order correlation |",
        "|---:|---:|---:|---:|---:|",
    ]
    for s in shuffles:
        for r in read_batches:
            m = mixes.get(f"read_batch={r}, shuffle {s:,}")
            if m is None:  # --smoke: not measured
                continue
            lines.append(
                f"| {r} | {s:,} | {m['files']:.1f} | {m['spread']:.3f} | {m['order']:.2f} |"
            )
    lines += [
        "",
        "Saved position with `shuffle_buffer=10,000` (`tf.train.Checkpoint` of the built "
        "dataset's iterator after 3 batches, restored into a fresh build; "
        "`benchmarks/resume_state.py`'s `state`, median of 3):",
        "",
        "| read_batch | checkpoint bytes | save s | restore s |",
        "|---:|---:|---:|---:|",
    ]
    for name, st in states.items():
        r = variants[name].read_batch
        if "error" in st:
            lines.append(f"| {r} | {st['error']} | | |")
        else:
            lines.append(f"| {r} | {st['bytes']:,} | {st['save_s']:.2f} | {st['restore_s']:.2f} |")
    lines.append("<!-- read-batch:end -->")
    text = "\n".join(lines)
    print(text)
    if args.write and not args.quick:
        write_section("read-batch", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
