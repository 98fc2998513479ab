"""The roofline's prediction per plan against what each plan reaches, interleaved.

    python benchmarks/serial_stage.py              # measure and print the markdown section
    python benchmarks/serial_stage.py --write      # also replace the section in RESULTS.md
    python benchmarks/serial_stage.py --quick      # 40k rows, 2 rounds: checks the script

Checks `tfinput.bench.roofline`'s serial stage (issue "Break the per-record wall",
point 4): for TFRecord at autotune with records one at a time (``read_batch=0``) and
in mini-batches (the default, 64), each without and with a 10,000-record shuffle, the
roofline predicts a rate (`Roofline.predict`), and `tfinput.bench.measure` measures it.

Workload: criteo-like rows (13 dense, 26 single ids, 4 multi-hot lists of 0-19 ids) as
tf.Example TFRecord, 8 files (`benchmarks/core.py`'s data), batch 4096, input only.

Method: ``--rounds`` rounds; each round measures the roofline (one window per stage and
per plan's serial probe) and then every plan (one window each, `bench.measure`), so the
prediction and the measurement of a round see the same machine. Per plan: the median of
the per-round ratios measured / predicted, with min-max; also the ratio the parallel
bound alone gave (the roofline before the serial stage) and the larger-of-the-two
model (``min(parallel, serial)``), for comparison.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402
from benchmarks.core import BATCH, data, machine  # noqa: E402

ROWS = 1_000_000


def plans() -> dict[str, Any]:
    from tfinput.config import PipelineConfig

    a = PipelineConfig.autotune
    return {
        "read_batch=0": a(batch_size=BATCH, read_batch=0),
        "read_batch=64": a(batch_size=BATCH, read_batch=64),
        "read_batch=0, shuffle 10,000": a(
            batch_size=BATCH, read_batch=0, shuffle_buffer=10_000, shuffle_seed=1
        ),
        "read_batch=64, shuffle 10,000": a(
            batch_size=BATCH, read_batch=64, shuffle_buffer=10_000, shuffle_seed=1
        ),
    }


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    import tfinput
    from tfinput import bench
    from tfinput.bench import MeasureOptions

    schema, tf_files, _ = data(root, args.rows)
    pipeline = tfinput.tfrecord(tf_files, schema)
    configs = plans()
    if args.smoke:  # the plan with both knobs
        configs = dict(list(configs.items())[-1:])
    rows: dict[str, dict[str, list[float]]] = {
        n: {k: [] for k in ("measured", "predicted", "parallel", "serial", "us_per_element")}
        for n in configs
    }
    for r in range(args.rounds):
        rl = bench.roofline(
            pipeline,
            batch_size=BATCH,
            configs=configs,
            measurement=MeasureOptions(
                windows=1, window_batches=args.roofline_batches, warmup_batches=2
            ),
        )
        res = bench.measure(
            pipeline,
            configs,
            measurement=MeasureOptions(
                windows=1, window_batches=args.batches, warmup_batches=args.warmup
            ),
        )
        for stats in res.results:
            pred = rl.predict(stats.name)
            serial = next(s for s in rl.serial if s.config == stats.name)
            row = rows[stats.name]
            row["measured"].append(stats.median)
            row["predicted"].append(pred.bound)
            row["parallel"].append(rl.cpu_bound)
            row["serial"].append(serial.examples_per_s)
            row["us_per_element"].append(serial.us_per_element)
        print(
            f"round {r + 1}/{args.rounds}: "
            + ", ".join(
                f"{n} {rows[n]['measured'][-1] / rows[n]['predicted'][-1]:.2f}" for n in configs
            ),
            file=sys.stderr,
        )
    out: dict[str, Any] = {"machine": machine(), "rows": args.rows, "rounds": args.rounds}
    plans_out = {}
    for name, row in rows.items():
        ratios = [m / p for m, p in zip(row["measured"], row["predicted"])]
        parallel = [m / p for m, p in zip(row["measured"], row["parallel"])]
        larger = [m / min(p, s) for m, p, s in zip(row["measured"], row["parallel"], row["serial"])]
        med = statistics.median
        plans_out[name] = {
            "measured": med(row["measured"]),
            "measured_range": [min(row["measured"]), max(row["measured"])],
            "predicted": med(row["predicted"]),
            "parallel": med(row["parallel"]),
            "serial": med(row["serial"]),
            "us_per_element": med(row["us_per_element"]),
            "ratio": [med(ratios), min(ratios), max(ratios)],
            "ratio_parallel_only": [med(parallel), min(parallel), max(parallel)],
            "ratio_larger_of_two": [med(larger), min(larger), max(larger)],
        }
    out["plans"] = plans_out
    return out


def markdown(res: dict[str, Any], args: argparse.Namespace) -> str:
    def k(x: float) -> str:
        return f"{x / 1e3:,.0f}k"

    def q(r: list[float]) -> str:
        return f"{r[0]:.2f} ({r[1]:.2f}-{r[2]:.2f})"

    lines = [
        "<!-- serial-stage:begin (benchmarks/serial_stage.py writes this section) -->",
        "## The roofline's serial stage: predicted against reached",
        "",
        f"Machine: {res['machine']}.",
        "",
        f"Method (`benchmarks/serial_stage.py`): criteo-like, {res['rows']:,} rows, 8 TFRecord "
        f"files, batch {BATCH}, autotune, input only. {res['rounds']} rounds; each round runs "
        "`bench.roofline` (one window per stage and per plan's serial probe, "
        f"{args.roofline_batches} batches) and then `bench.measure` (one window per plan, "
        f"{args.warmup} warm-up and {args.batches} timed batches), so a round's prediction and "
        "measurement see the same machine. Ratio: median of the per-round measured / "
        "predicted (min-max); 1.00 is a perfect prediction, the criterion is 0.75-1.25. "
        "`predict` is `min(read, 1 / (1 / parallel + 1 / serial))`; the "
        "two columns after it are what the parallel bound alone (cores x the full stage's "
        "examples per CPU-second, the roofline before the serial stage) and the smaller of "
        "that and the serial rate would have predicted.",
        "",
        "| plan | reached (min-max) | serial stage: us per element, examples/s | parallel "
        "bound | predicted | reached / predicted | / parallel only | / min(parallel, serial) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, p in res["plans"].items():
        lo, hi = p["measured_range"]
        lines.append(
            f"| {name} | {k(p['measured'])} ({k(lo)}-{k(hi)}) | {p['us_per_element']:.2f} us, "
            f"{k(p['serial'])} | {k(p['parallel'])} | {k(p['predicted'])} | "
            f"**{q(p['ratio'])}** | {q(p['ratio_parallel_only'])} | "
            f"{q(p['ratio_larger_of_two'])} |"
        )
    lines.append("<!-- serial-stage:end -->")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--roofline-batches", type=int, default=10)
    p.add_argument("--data-dir", help="keep the data here (default: a temporary directory)")
    p.add_argument("--quick", action="store_true", help="40k rows, 2 rounds: checks the script")
    p.add_argument("--write", action="store_true", help="replace the section in RESULTS.md")
    p.add_argument("--json", action="store_true")
    args = parse_args(
        p, argv, smoke=dict(rows=8_192, rounds=1, warmup=1, batches=2, roofline_batches=1)
    )
    if args.quick:
        args.rows, args.rounds, args.warmup, args.batches, args.roofline_batches = (
            40_000, 2, 2, 3, 2,
        )  # fmt: skip
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="tfinput-serial-") as tmp:
        res = run(args, Path(args.data_dir or tmp))
    text = markdown(res, args)
    print(json.dumps(res, indent=2) if args.json else text)
    print(f"took {time.time() - t0:.0f} s", file=sys.stderr)
    if args.write:
        write_section("serial-stage", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
