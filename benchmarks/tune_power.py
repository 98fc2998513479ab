"""The tuner's power: how often `tune` finds a gain that is there, and how rarely it
claims one that is not.

    python benchmarks/tune_power.py                 # 3 cases x 10 runs, quiet and busy
    python benchmarks/tune_power.py --write         # also write the RESULTS.md section
    tfinput tune --pipeline benchmarks.tune_power:gain_15 ...   # one case by hand

The tuned pipeline has a *planted response*: each batch costs a known time (a sleep in
a sequential ``tf.py_function`` map, paced by a wall-clock schedule so that a late
wake-up on a loaded box is made up by the next batches: the rate does not depend on
how loaded the CPUs are) and that time is a function of the config. Every config costs
``BASE_MS`` per batch except those with ``deterministic=False``, which cost
``BASE_MS / (1 + gain)``: the best configs of the search space are exactly
``1 + gain`` times faster than autotune (whose ``deterministic`` is tf.data's
default, true), and ``deterministic`` (one knob of the default space, two values) is
the planted knob. No other knob changes the cost.

Cases: a planted 15% gain, a planted 40% gain and no gain (every config equal). Each
case is tuned ``--runs`` times with seeds 0, 1, ... on a quiet box and with one
CPU-bound process (``python -c 'while True: pass'``) running beside it. A run
*detects* the gain when ``beats_autotune`` is true and the winner has the planted
knob; it *claims* a win whenever ``beats_autotune`` is true.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

#: Milliseconds per batch of every config without the planted knob.
BASE_MS = 8.0
#: Batches a late pipeline may make up at once (see `planted`).
MAX_DEBT = 12
#: Examples per batch (the batches hold int64 counters: building them costs nothing).
BATCH_SIZE = 256
#: The planted knob and the value that gets the gain.
PLANTED = ("deterministic", False)
#: ``(case, planted gain)``.
CASES = (("gain 15%", 0.15), ("gain 40%", 0.40), ("no gain", 0.0))


def planted(gain: float) -> Callable[[Any], Any]:
    """``config -> tf.data.Dataset`` whose batches cost ``BASE_MS``, or
    ``BASE_MS / (1 + gain)`` with the planted knob's value."""

    def make_pipeline(config: Any) -> Any:
        import tensorflow as tf

        knob, value = PLANTED
        fast = getattr(config, knob) is value
        seconds = BASE_MS / 1e3 / ((1.0 + gain) if fast else 1.0)

        due = [None]

        def cost(batch: Any) -> Any:
            # Paced by a wall-clock schedule (batch k is due at start + k * seconds), so
            # a late wake-up on a loaded box is made up by the next batches; a debt of
            # more than MAX_DEBT batches (a stopped consumer) is forgiven.
            now = time.monotonic()
            if due[0] is None or now - due[0] > MAX_DEBT * seconds:
                due[0] = now
            due[0] += seconds
            if due[0] > now:
                time.sleep(due[0] - now)
            return batch

        def one(batch: Any) -> Any:
            out = tf.py_function(cost, [batch], tf.int64)
            out.set_shape(batch.shape)
            return {"x": out}

        ds = tf.data.Dataset.range(1 << 40).batch(config.batch_size, drop_remainder=True)
        return ds.map(one)

    make_pipeline.__name__ = f"gain_{round(gain * 100)}"
    return make_pipeline


gain_0 = planted(0.0)
gain_15 = planted(0.15)
gain_40 = planted(0.40)


def one_run(gain: float, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One `tune` of the planted pipeline: what it decided and how long it took."""
    from tfinput.config import PipelineConfig
    from tuners import ConfirmOptions, MeasureOptions, SearchOptions, TuneOptions, tune

    t0 = time.perf_counter()
    result = tune(
        planted(gain),
        base=PipelineConfig(batch_size=BATCH_SIZE),
        n_trials=args.n_trials,
        options=TuneOptions(
            search=SearchOptions(seed=seed),
            measurement=MeasureOptions(windows=args.windows, window_seconds=args.window_seconds),
            confirmation=ConfirmOptions(
                confirm_top=args.confirm_top,
                confirm_windows=args.confirm_windows,
                breakdown=False,
                advise_format=False,
            ),
        ),
        verbose=False,
    )
    knob, value = PLANTED
    winner = next((c for c in result.confirmed if c.config == result.best_config), None)
    return {
        "gain": gain,
        "seed": seed,
        "beats_autotune": result.beats_autotune,
        "planted_knob": getattr(result.best_config, knob) is value,
        "ratio": None if winner is None or winner.ratio is None else round(winner.ratio, 4),
        "verdict": result.verdicts[0] if result.verdicts else "",
        "seconds": round(time.perf_counter() - t0, 1),
    }


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """Every case, ``args.runs`` times, for each load; the records and load averages."""
    out: dict[str, Any] = {"settings": _settings(args), "loads": {}}
    for load in args.loads:
        if args.cases and load not in args.cases:
            continue
        busy = None
        if load == "busy":
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            time.sleep(1.0)
        try:
            before = os.getloadavg()
            runs = []
            for case, gain in CASES:
                if case not in args.cases.get(load, [c for c, _ in CASES]):
                    continue
                for seed in range(args.runs):
                    record = one_run(gain, seed, args)
                    record["case"] = case
                    runs.append(record)
                    print(json.dumps({"load": load, **record}), flush=True)
            after = os.getloadavg()
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
        out["loads"][load] = {"loadavg_before": before, "loadavg_after": after, "runs": runs}
    return out


def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new``'s records, and ``old``'s of the (load, case) pairs ``new`` did not run;
    each block keeps the load averages of the run its first records come from, and
    notes the other's."""
    out = {"settings": new["settings"], "loads": {}}
    for load in dict.fromkeys([*old["loads"], *new["loads"]]):
        a, b = old["loads"].get(load), new["loads"].get(load)
        ran = {r["case"] for r in b["runs"]} if b else set()
        kept = [r for r in (a["runs"] if a else []) if r["case"] not in ran]
        block = dict(b or a)
        block["runs"] = kept + (b["runs"] if b else [])
        if a and b and kept:
            block["loadavg_earlier"] = (a["loadavg_before"], a["loadavg_after"])
            block["cases_earlier"] = sorted({r["case"] for r in kept})
        out["loads"][load] = block
    return out


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "runs": args.runs,
        "n_trials": args.n_trials,
        "windows": args.windows,
        "window_seconds": args.window_seconds,
        "confirm_top": args.confirm_top,
        "confirm_windows": args.confirm_windows,
        "base_ms": BASE_MS,
        "batch_size": BATCH_SIZE,
        "planted": f"{PLANTED[0]}={PLANTED[1]}",
        "cpus": os.cpu_count(),
    }


def summarize(records: list[dict[str, Any]], gain: float) -> dict[str, Any]:
    """Counts of one case under one load."""
    claimed = sum(1 for r in records if r["beats_autotune"])
    detected = sum(1 for r in records if r["beats_autotune"] and r["planted_knob"])
    close = [
        r
        for r in records
        if r["beats_autotune"]
        and r["planted_knob"]
        and r["ratio"] is not None
        and abs(r["ratio"] / (1 + gain) - 1) <= 0.10
    ]
    ratios = [r["ratio"] for r in records if r["beats_autotune"] and r["ratio"] is not None]
    return {
        "runs": len(records),
        "claimed": claimed,
        "detected": detected,
        "ratio_within_10pct": len(close),
        "ratio_median": round(statistics.median(ratios), 3) if ratios else None,
        "ratio_range": (min(ratios), max(ratios)) if ratios else None,
        "seconds_median": round(statistics.median(r["seconds"] for r in records), 1),
    }


def markdown(data: dict[str, Any]) -> str:
    """The RESULTS.md section."""
    s = data["settings"]
    lines = [
        "<!-- tune-power:begin (generated by benchmarks/tune_power.py) -->",
        "## Tuner power: a planted gain found, no gain not claimed",
        "",
        f"`benchmarks/tune_power.py`: `tuners.tune` on a pipeline whose batches cost "
        f"{s['base_ms']:g} ms each (a sleep in a sequential `tf.py_function` map, paced "
        "by a wall-clock schedule so that a late wake-up is made up by the next batches; "
        f"batch {s['batch_size']}), less by the planted gain with `{s['planted']}` "
        "(one knob of the default space): the best configs are exactly that much faster "
        f"than autotune. Each run: {s['n_trials']} trials (the 2 baselines included), "
        f"{s['windows']} windows of at least {s['window_seconds']:g} s per trial, the "
        f"top {s['confirm_top']} confirmed against autotune in {s['confirm_windows']} "
        "interleaved windows, no gain by knob; seeds 0-"
        f"{s['runs'] - 1}. *Detected*: `beats_autotune` with the planted knob in the "
        "winner; *claimed*: `beats_autotune` at all; *ratio ok*: the confirmed ratio "
        "within 10% of the planted one.",
        "",
        "| load | case | runs | detected | claimed | ratio ok | confirmed ratio, median "
        "(range) | s per run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for load, block in data["loads"].items():
        for case, gain in CASES:
            records = [r for r in block["runs"] if r["case"] == case]
            if not records:
                continue
            c = summarize(records, gain)
            rng = (
                f"{c['ratio_median']:.2f} ({c['ratio_range'][0]:.2f}-{c['ratio_range'][1]:.2f})"
                if c["ratio_median"] is not None
                else "-"
            )
            lines.append(
                f"| {load} | {case} | {c['runs']} | {c['detected']} | {c['claimed']} | "
                f"{c['ratio_within_10pct'] if gain else '-'} | {rng} | {c['seconds_median']} |"
            )
    lines += ["", "Load averages (1, 5, 15 min) before and after each block:", ""]
    for load, block in data["loads"].items():
        b, a = block["loadavg_before"], block["loadavg_after"]
        lines.append(
            f"- {load}: {', '.join(f'{x:.2f}' for x in b)} -> {', '.join(f'{x:.2f}' for x in a)}"
        )
        if "loadavg_note" in block:
            lines.append(f"  ({block['loadavg_note']})")
        if "loadavg_earlier" in block:
            (eb, ea) = block["loadavg_earlier"]
            lines.append(
                f"  (its records of an earlier pass: {', '.join(f'{x:.2f}' for x in eb)} -> "
                f"{', '.join(f'{x:.2f}' for x in ea)})"
            )
    notes = data.get("notes", [])
    if notes:
        lines += ["", "How the table was assembled:", ""]
        lines += [f"- {n}" for n in notes]
    lines += [
        "",
        f"Machine: {s['cpus']} cores, shared with three other engineers' work, so "
        '"quiet" means no process of ours beside the tuner, not an idle box (see the '
        "load averages); \"busy\" adds one `python -c 'while True: pass'`.",
        "<!-- tune-power:end -->",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from benchmarks._results import output, parse_args, write_section

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--loads", nargs="+", default=["quiet", "busy"], choices=["quiet", "busy"])
    p.add_argument("--n-trials", type=int, default=8)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--window-seconds", type=float, default=0.5)
    p.add_argument("--confirm-top", type=int, default=2)
    p.add_argument("--confirm-windows", type=int, default=5)
    p.add_argument("--json", help="where the run is saved (default: results-tune-power.json)")
    p.add_argument(
        "--only",
        nargs="+",
        default=[],
        metavar="LOAD:CASE",
        help='run only these cases, e.g. "quiet:no gain" (default: every case of --loads)',
    )
    p.add_argument(
        "--merge",
        help="a saved run whose records of the cases not run now are kept (their block's "
        "load averages too)",
    )
    p.add_argument("--from-json", help="only write the section from a saved run")
    p.add_argument("--write", action="store_true", help="replace the RESULTS.md section")
    args = parse_args(
        p,
        argv,
        smoke=dict(
            runs=1,
            loads=["quiet"],
            only=["quiet:gain 40%"],
            n_trials=2,
            windows=1,
            window_seconds=0.05,
            confirm_top=1,
            confirm_windows=1,
        ),
    )
    args.json = args.json or str(output("results-tune-power.json"))
    args.cases = {}
    for item in args.only:
        load, case = item.split(":", 1)
        args.cases.setdefault(load, []).append(case)
    if args.from_json:
        data = json.loads(Path(args.from_json).read_text())
    else:
        data = run_all(args)
        if args.merge:
            data = merge(json.loads(Path(args.merge).read_text()), data)
        Path(args.json).write_text(json.dumps(data, indent=1))
    section = markdown(data)
    print(section)
    if args.write:
        write_section("tune-power", section)


if __name__ == "__main__":
    main()
