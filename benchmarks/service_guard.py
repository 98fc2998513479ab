"""What the guard on tf.data service reads costs: the same service read with the guard
(the default: a bounded wait and a row count, `tfinput.service.guarded_dataset`) and
without it (``with_service(..., stall_timeout_s=None)``: tf.data's own read), side by
side.

    python benchmarks/service_guard.py              # measure and print the markdown section
    python benchmarks/service_guard.py --write      # also replace the section in RESULTS.md
    python benchmarks/service_guard.py --quick      # 40k rows, 2 short rounds: checks the script

Workload: `benchmarks/service.py`'s (criteo-like rows as columnar records in 8 files,
batch 1024, `PipelineConfig.autotune`), read through one local worker process
(`tfinput.service.LocalFleet`), and, as the case where the guard's per-batch Python cost
weighs most, the same at batch 256.

Method: ``--rounds`` rounds; each round measures one window of every variant, the order
rotated by one each round. A window is `tfinput._src.measurement.windows.run_window`: a fresh iterator over
``pipeline.build(config).repeat()``, ``--warmup`` untimed batches, then ``--batches``
timed batches handed to the ``input only`` step, inside one epoch. Figures are medians
over windows with min-max; the ratio is the median of the per-round ratios guarded /
unguarded. CPU: this process's (`time.process_time`) per example, per window.

The machine has 2 cores shared with other agents; the worker, the dispatcher and the
reading process share them.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402
from benchmarks.core import machine  # noqa: E402
from benchmarks.service import ROWS, CpuProbe, _children, fleet_for, make_data  # noqa: E402

BATCHES = (1024, 256)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--warmup", type=int, default=8, help="untimed batches per window")
    p.add_argument("--batches", type=int, default=150, help="timed batches per window")
    p.add_argument("--data-dir", help="keep the data here (default: a temporary directory)")
    p.add_argument("--quick", action="store_true", help="40k rows, 2 rounds: checks the script")
    p.add_argument("--write", action="store_true", help="replace the section in RESULTS.md")
    args = parse_args(p, argv, smoke=dict(rows=12_288, rounds=1, warmup=1, batches=2))
    if args.quick:
        args.rows, args.rounds, args.warmup, args.batches = 40_000, 2, 4, 20

    t0 = time.time()
    machine_line = machine()
    import tfinput
    from tfinput._src.measurement.compare import summarize
    from tfinput._src.measurement.probes import available_cpus
    from tfinput._src.measurement.windows import run_window
    from tfinput.config import PipelineConfig
    from tfinput.steps import input_only

    batches = BATCHES[:1] if args.smoke else BATCHES  # --smoke: one batch size
    variants: dict[str, tuple[int, bool]] = {}
    for b in batches:
        variants[f"batch {b}, unguarded"] = (b, False)
        variants[f"batch {b}, guarded"] = (b, True)
    names = list(variants)
    with tempfile.TemporaryDirectory(prefix="tfinput-guard-") as tmp:
        col = make_data(Path(args.data_dir or tmp) / ("service" if args.smoke else ""), args.rows)
        pipeline = tfinput.columnar(str(col))
        with fleet_for(args.smoke, 1) as fleet:  # --smoke: in this process
            reads = {
                True: pipeline.with_service(fleet),
                False: pipeline.with_service(fleet, stall_timeout_s=None),
            }
            fleet.address_for(1)
            probe = CpuProbe(_children())
            step = input_only()
            configs = {
                n: PipelineConfig.autotune(batch_size=b, service_workers=1)
                for n, (b, _) in variants.items()
            }
            windows: dict[str, list[Any]] = {n: [] for n in names}
            cpu_us: dict[str, list[float]] = {n: [] for n in names}
            for r in range(args.rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    batch, guard = variants[name]
                    read, config = reads[guard], configs[name]
                    w = run_window(
                        lambda read=read, config=config: read.build(config).repeat(),
                        warmup_batches=args.warmup,
                        window_batches=args.batches,
                        step=step,
                        batch_size=batch,
                        cpu_clock=probe,
                    )
                    windows[name].append(dataclasses.replace(w, name=name, round=r))
                    cpu_us[name].append(probe.trainer_seconds() / (args.batches * batch) * 1e6)
                print(
                    f"round {r + 1}/{args.rounds}: "
                    + ", ".join(f"{n} {windows[n][-1].examples_per_s:,.0f}/s" for n in names),
                    file=sys.stderr,
                    flush=True,
                )
    stats = {}
    for b in batches:
        base = f"batch {b}, unguarded"
        group = {n: windows[n] for n in names if variants[n][0] == b}
        for s in summarize(
            group, configs={n: configs[n] for n in group}, baseline=base, cpu_count=available_cpus()
        ):
            stats[s.name] = s
    total_s = time.time() - t0
    lines = [
        "<!-- service-guard:begin (generated by benchmarks/service_guard.py) -->",
        "## tf.data service: the guarded read vs tf.data's own",
        "",
        f"Machine: {machine_line}. Method: `python benchmarks/service_guard.py` (see its "
        f"docstring): criteo-like {args.rows:,} rows as columnar records in 8 files, one "
        "local worker process, `PipelineConfig.autotune`; each batch size read through "
        "`with_service(fleet)` (guarded, the default) and `with_service(fleet, "
        f"stall_timeout_s=None)`; {args.rounds} rounds, one window per variant per round "
        f"in rotating order, {args.warmup} warm-up batches excluded, {args.batches} timed "
        f"batches. Total time {total_s:.0f} s"
        + (" (--quick: a smoke run, not a result)." if args.quick else "."),
        "",
        "| variant | examples/s (median) | min | max | guarded / unguarded (median, range) "
        "| trainer CPU per example |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        s = stats[name]
        ratio = f"{s.ratio:.2f} ({s.ratio_min:.2f}-{s.ratio_max:.2f})" if variants[name][1] else "1"
        lines.append(
            f"| {name} | {s.median:,.0f} | {s.minimum:,.0f} | {s.maximum:,.0f} | {ratio} | "
            f"{statistics.median(cpu_us[name]):.2f} us |"
        )
    extra = []
    for b in batches:
        plain = statistics.median(cpu_us[f"batch {b}, unguarded"])
        guard = statistics.median(cpu_us[f"batch {b}, guarded"])
        extra.append(
            f"batch {b}: {guard - plain:+.2f} us per example, {(guard - plain) * b / 1e3:+.2f} ms "
            "per batch"
        )
    lines += [
        "",
        "The guard's cost in the trainer's CPU (medians, guarded less unguarded): "
        + "; ".join(extra)
        + ". It is per batch (one row count through Python, the race's elements), so it "
        "weighs least with large batches; the examples/s ratios' ranges straddle 1 or "
        "come close to it, within this machine's noise.",
        "<!-- service-guard:end -->",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write and not args.quick:
        write_section("service-guard", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
