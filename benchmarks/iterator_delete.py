"""How long deleting an autotuned tf.data iterator blocks, idle and with every core busy.

    python benchmarks/iterator_delete.py              # print the markdown section
    python benchmarks/iterator_delete.py --write      # also replace it in RESULTS.md
    python benchmarks/iterator_delete.py --quick      # fewer trials: checks the script

A reproduction of a TensorFlow bug, not a measurement of tfinput: plain tf.data, no
tfinput code. Deleting an iterator (``del it``, or the garbage collector freeing it)
runs ``~RootDataset::Iterator``, which cancels the iterator and then waits for its
autotune thread to exit. That thread sleeps in ``Model::OptimizeLoop`` between
optimizations, for a period that doubles from 10 ms up to 60 s, and wakes when the
cancellation callback notifies it; it then checks ``CancellationManager::IsCancelled``.
But ``StartCancel`` runs its callbacks *before* it marks the manager cancelled, so a
thread that wakes at once sees "not cancelled" and sleeps out the rest of its period: a
lost wake-up. With a core free the deleting thread usually marks the manager first; with
every core busy the woken thread often runs first, and the delete blocks for the rest of
the period, holding the GIL (the whole Python process stops).

Workload: ``range -> interleave(8, AUTOTUNE) -> batch(256) -> map(AUTOTUNE) -> prefetch(
AUTOTUNE)``, iterated for ``--seconds`` each trial, then deleted and the delete timed.
Conditions, interleaved trial by trial: the machine idle; every core busy (one spinning
process per core, started by this script); and every core busy with autotuning off
(``options.autotune.enabled = False``: no autotune thread), the control.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402

STALL_S = 0.5  # a delete slower than this counts as a stall


def _dataset(autotune: bool):
    import tensorflow as tf

    ds = tf.data.Dataset.range(8).interleave(
        lambda i: tf.data.Dataset.range(10**9).map(lambda x: x + i),
        cycle_length=tf.data.AUTOTUNE,
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    ds = ds.batch(256).map(
        lambda b: tf.reduce_sum(tf.sin(tf.cast(b, tf.float32))),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.autotune.enabled = autotune
    return ds.with_options(options)


def _delete_seconds(dataset, seconds: float) -> float:
    it = iter(dataset)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        next(it)
    start = time.perf_counter()
    del it
    return time.perf_counter() - start


def run(trials: int, seconds: float) -> dict[str, list[float]]:
    """Delete times per condition, the conditions interleaved trial by trial."""
    conditions = {
        "idle, autotune on": (False, True),
        "all cores busy, autotune on": (True, True),
        "all cores busy, autotune off": (True, False),
    }
    datasets = {a: _dataset(a) for a in (True, False)}
    times: dict[str, list[float]] = {name: [] for name in conditions}
    for trial in range(trials):
        for name, (busy, autotune) in conditions.items():
            spinners = []
            if busy:
                spinners = [
                    subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    for _ in range(os.cpu_count() or 1)
                ]
            try:
                times[name].append(_delete_seconds(datasets[autotune], seconds))
            finally:
                for p in spinners:
                    p.kill()
                    p.wait()
            print(f"trial {trial + 1}/{trials}: {name}: del {times[name][-1]:.3f} s", flush=True)
    return times


def section(times: dict[str, list[float]], args: argparse.Namespace, took: float) -> str:
    from benchmarks.core import machine

    rows = []
    for name, ts in times.items():
        stalls = [t for t in ts if t > STALL_S]
        rows.append(
            f"| {name} | {len(ts)} | {statistics.median(ts) * 1e3:,.1f} ms | "
            f"{max(ts):.2f} s | {len(stalls)} | "
            f"{(statistics.median(stalls) if stalls else 0):.2f} s |"
        )
    return "\n".join(
        [
            "<!-- iterator-delete:begin (benchmarks/iterator_delete.py writes this section) -->",
            "## Deleting an autotuned tf.data iterator (a TensorFlow bug)",
            "",
            f"Machine: {machine()}.",
            "",
            f"Method: `python benchmarks/iterator_delete.py --trials {args.trials} --seconds "
            f"{args.seconds}` ({took:.0f} s): plain tf.data (range, interleave, batch 256, "
            "map, prefetch; AUTOTUNE everywhere), a fresh iterator per trial, iterated for "
            f"{args.seconds} s, then `del it` timed; the three conditions interleaved trial "
            "by trial; 'all cores busy': one spinning process per core beside it. A stall: "
            f"a delete over {STALL_S} s.",
            "",
            "| condition | trials | median delete | slowest | stalls | median stall |",
            "|---|---|---|---|---|---|",
            *rows,
            "<!-- iterator-delete:end -->",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--seconds", type=float, default=6.0, help="iterate this long per trial")
    p.add_argument("--quick", action="store_true", help="3 trials of 1 s")
    p.add_argument("--write", action="store_true", help="update RESULTS.md")
    args = parse_args(p, argv, smoke=dict(trials=1, seconds=0.2))
    if args.quick:
        args.trials, args.seconds = 3, 1.0
    start = time.perf_counter()
    times = run(args.trials, args.seconds)
    text = section(times, args, time.perf_counter() - start)
    print(text)
    if args.write:
        write_section("iterator-delete", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
