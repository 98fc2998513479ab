"""How well the default TFRecord plan (``read_batch`` mini-batches) mixes an epoch
against records handed over one at a time (``read_batch=0``), at the same
``shuffle_buffer``, for per-replica batches 32, 256 and 4096 and shuffle buffers 100,
1,000 and 10,000.

    python benchmarks/mixing.py            # measure and print the markdown section
    python benchmarks/mixing.py --write    # also replace the section in RESULTS.md
    python benchmarks/mixing.py --smoke    # 2,048 rows, two cells: checks the script

Data: ``tfinput.testing.small_schema`` rows as tf.Example TFRecord, ``--files`` files
of consecutive ``row_id`` values (file ``f`` holds rows ``f * n .. (f + 1) * n - 1``,
like logs written in time order); the pipelines parse only ``row_id``. Every other knob
is the default (AUTOTUNE: the interleave cycle is the machine's core count) unless
``--cycle`` sets ``interleave_cycle_length``; ``deterministic=True`` and
``shuffle_seed=--seed``.

Measures, over one epoch's full batches:

- runs: the runs of consecutive rows of one file among a batch's rows (its rows
  sorted; the batch's content, whatever its order): ``batch_size`` when no two rows
  are neighbours, 1 when the batch is one run of one file;
- files: the distinct files among a batch's rows;
- correlation: Pearson's r between a row's index in the epoch and its index in the
  unshuffled read (``read_batch=0``, no shuffle, the same interleave): 1 when nothing
  moved; and the mean distance, in rows, between the two.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402
from benchmarks.core import machine  # noqa: E402

BATCHES = (32, 256, 4096)
SHUFFLES = (100, 1_000, 10_000)
FILES = 8
ROWS = FILES * 16_384


def epoch_rows(pipeline: Any, config: Any) -> list[Any]:
    """The row ids of one epoch, batch by batch."""
    return [f["dense"]["row_id"].numpy().astype("int64").ravel() for f, _ in pipeline.build(config)]


def measure(batches: list[Any], *, rows: int, files: int, reference: Any) -> dict[str, float]:
    """runs, files per batch, correlation and mean distance (see the docstring)."""
    import numpy as np

    per_file = rows // files
    full = [b for b in batches if len(b) == len(batches[0])]
    runs = [1 + int(np.count_nonzero(np.diff(np.sort(b)) != 1)) for b in full]
    distinct = [len(np.unique(b // per_file)) for b in full]
    order = np.concatenate(batches)
    assert len(order) == rows and len(np.unique(order)) == rows, "not every row exactly once"
    moved = reference[order]
    at = np.arange(rows)
    return {
        "runs": float(np.mean(runs)),
        "files": float(np.mean(distinct)),
        "r": float(np.corrcoef(at, moved)[0, 1]),
        "distance": float(np.mean(np.abs(at - moved))),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--files", type=int, default=FILES)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cycle", type=int, default=0, help="interleave_cycle_length (0: AUTOTUNE)")
    p.add_argument("--data-dir", help="keep the data here (default: a temporary directory)")
    p.add_argument("--write", action="store_true", help="replace the section in RESULTS.md")
    args = parse_args(p, argv, smoke=dict(rows=2_048))
    shuffles, batches = SHUFFLES, BATCHES
    if args.smoke:
        shuffles, batches = (100,), (32, 256)

    t0 = time.time()
    machine_line = machine()
    import numpy as np

    import tfinput
    from tfinput import testing
    from tfinput.config import AUTOTUNE, PipelineConfig
    from tfinput.schema import Dense, Label, Schema

    default_read_batch = PipelineConfig().read_batch
    cycle = args.cycle or AUTOTUNE
    with tempfile.TemporaryDirectory(prefix="tfinput-mixing-") as tmp:
        out = Path(args.data_dir or tmp) / f"mixing-{args.rows}-{args.files}"
        if not out.exists():
            testing.write_tfrecord(out, testing.small_schema(), rows=args.rows, files=args.files)
        ids_only = Schema(
            features=(Dense(name="row_id", dtype="int64"),), labels=(Label(name="label"),)
        )
        pipeline = tfinput.tfrecord(sorted(map(str, out.iterdir())), ids_only)
        base = PipelineConfig(
            deterministic=True,
            drop_remainder=False,
            shuffle_seed=args.seed,
            interleave_cycle_length=cycle,
        )
        unshuffled = np.concatenate(
            epoch_rows(pipeline, base.replace(batch_size=4096, read_batch=0))
        )
        reference = np.empty(args.rows, np.int64)
        reference[unshuffled] = np.arange(args.rows)
        results: dict[tuple[int, int, int], dict[str, float]] = {}
        for s in shuffles:
            for b in batches:
                for r in (0, default_read_batch):
                    config = base.replace(batch_size=b, shuffle_buffer=s, read_batch=r)
                    results[s, b, r] = measure(
                        epoch_rows(pipeline, config),
                        rows=args.rows,
                        files=args.files,
                        reference=reference,
                    )
                print(f"shuffle {s:,} batch {b}: done", file=sys.stderr, flush=True)
    total_s = time.time() - t0
    return report(args, results, shuffles, batches, default_read_batch, machine_line, total_s)


def report(
    args: Any,
    results: dict[tuple[int, int, int], dict[str, float]],
    shuffles: tuple[int, ...],
    batches: tuple[int, ...],
    rb: int,
    machine_line: str,
    total_s: float,
) -> int:
    cycle = f"interleave_cycle_length={args.cycle}" if args.cycle else "AUTOTUNE interleave cycle"
    name = f"mixing-cycle{args.cycle}" if args.cycle else "mixing"
    lines = [
        f"<!-- {name}:begin (generated by benchmarks/mixing.py) -->",
        "## Mixing at every batch size: the default `read_batch` against `read_batch=0`"
        + (f", {args.cycle} files read at once" if args.cycle else ""),
        "",
        f"Machine: {machine_line}. Method: `python benchmarks/mixing.py"
        + (f" --cycle {args.cycle}" if args.cycle else "")
        + "` (see its docstring): one epoch of "
        f"{args.rows:,} rows in {args.files} TFRecord files (consecutive `row_id`s per file), "
        f"{cycle}, `deterministic=True`, `shuffle_seed={args.seed}`, each cell with "
        f"`read_batch=0` and the default `read_batch={rb}` at the same `shuffle_buffer`. "
        "runs: runs of consecutive rows of one file among a batch's rows (higher mixes "
        "more; the batch size when no two rows are neighbours); files: distinct files "
        "per batch; r: correlation of a row's place in the epoch with its place in the "
        "unshuffled read (lower mixes more); distance: mean rows between the two. "
        f"Each figure is `read_batch=0` / `read_batch={rb}`. Total time {total_s:.0f} s"
        + (" (--smoke: a check of the script, not a result)." if args.smoke else "."),
        "",
        "| shuffle_buffer | batch | runs per batch | files per batch | r | distance |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for s in shuffles:
        for b in batches:
            a, d = results[s, b, 0], results[s, b, rb]
            lines.append(
                f"| {s:,} | {b:,} | {a['runs']:.1f} / {d['runs']:.1f} | "
                f"{a['files']:.2f} / {d['files']:.2f} | {a['r']:.4f} / {d['r']:.4f} | "
                f"{a['distance']:,.0f} / {d['distance']:,.0f} |"
            )
    lines.append(f"<!-- {name}:end -->")
    text = "\n".join(lines)
    print(text)
    if args.write and not args.smoke:
        write_section(name, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
