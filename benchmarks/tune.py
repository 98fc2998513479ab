"""Tuner benchmark: tuned vs autotune vs an exhaustive grid, against three steps.

    python benchmarks/tune.py            # measure and print the markdown section
    python benchmarks/tune.py --write    # also replace the section in RESULTS.md

Workload: criteo-like 400k rows, 8 TFRecord files, batch 4096.

1. **Input only.** An exhaustive grid over the benchmark space (below) is measured
   config by config (fresh iterator, warm-up excluded, ``--grid-windows`` windows each,
   median). The tuner searches the same space with 30 trials, baselines included.
   Then ``autotune``, the grid's top 3 and the tuner's confirmed best are measured
   again, interleaved window by window (``--final-windows`` rounds): the table's
   figures and ratios come from that final round only, so both sides get the same
   measurement.
2. **Keras DCN-style ranking step** (`tfinput.models.ranking_model`, criteo-like tables
   of 100k rows x dim 16, Adam, XLA): the tuner's confirmed best vs ``autotune``.
3. **Simulated accelerator step** of 20 ms per batch (the host CPUs stay free): the
   tuner's confirmed best vs ``autotune`` and vs the step-bound rate 4096 / 20 ms.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import core  # noqa: E402

from benchmarks._results import parse_args, write_section  # noqa: E402

SPACE = {
    "interleave_cycle_length": (1, 2, 4),
    "interleave_parallelism": (1, 2),
    "map_parallelism": (-1, 1, 2, 3, 4),
    "prefetch": (-1, 1, 2, 4),
    "deterministic": (True, False),
}


def grid(
    pipeline: Any, base: Any, windows: int, window_batches: int, warmup: int, configs: int | None
) -> list:
    from tfinput.bench import WindowPlan
    from tuners._objective import measure

    plan = WindowPlan(windows=windows, window_batches=window_batches, warmup_batches=warmup)
    keys = list(SPACE)
    out = []
    combos = list(itertools.product(*(SPACE[k] for k in keys)))[:configs]
    t0 = time.time()
    for i, values in enumerate(combos):
        config = base.replace(**dict(zip(keys, values)))
        m = measure(pipeline, config, plan=plan)
        out.append((m.median, config))
        if i % 20 == 0:
            print(f"grid {i + 1}/{len(combos)} ({time.time() - t0:.0f} s)", file=sys.stderr)
    out.sort(key=lambda x: x[0], reverse=True)
    return out


def study(
    pipeline: Any,
    base: Any,
    step: Any,
    n_trials: int,
    *,
    windows: int,
    window_batches: int,
    warmup_batches: int,
    confirm_top: int,
    confirm_windows: int,
    breakdown: bool = True,
    advise_format: bool = True,
) -> Any:
    from tuners import ConfirmOptions, MeasureOptions, SearchSpace, TuneOptions, tune

    space = SearchSpace(choices=SPACE)

    def show(event: str, info: dict) -> None:
        if event == "trial":
            print(
                f"  trial {info['number']} {info['state']} "
                f"{(info['value'] or 0):,.0f}/s best {(info['best'] or 0):,.0f}/s",
                file=sys.stderr,
            )

    return tune(
        pipeline,
        step=step,
        n_trials=n_trials,
        base=base,
        space=space,
        options=TuneOptions(
            measurement=MeasureOptions(
                windows=windows, window_batches=window_batches, warmup_batches=warmup_batches
            ),
            confirmation=ConfirmOptions(
                confirm_top=confirm_top,
                confirm_windows=confirm_windows,
                breakdown=breakdown,
                advise_format=advise_format,
            ),
        ),
        progress=show,
    )


def fmt(x: float) -> str:
    return f"{x:,.0f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=core.ROWS)
    p.add_argument("--data-dir", default=str(HERE / ".data"))
    p.add_argument("--grid-windows", type=int, default=3)
    p.add_argument("--grid-configs", type=int, help="measure only the first N grid configs")
    p.add_argument("--final-windows", type=int, default=12)
    p.add_argument("--window-batches", type=int, default=10)
    p.add_argument("--n-trials", type=int, default=30)
    p.add_argument("--trial-windows", type=int, default=3, help="measurement windows per trial")
    p.add_argument("--confirm-windows", type=int, default=5)
    p.add_argument("--skip", action="append", default=[], choices=["grid", "ranking", "simulated"])
    p.add_argument("--write", action="store_true")
    args = parse_args(
        p,
        argv,
        smoke=dict(
            rows=8_192,
            grid_configs=1,
            grid_windows=1,
            final_windows=1,
            window_batches=1,
            n_trials=1,  # the autotune baseline: each study runs, confirms and reports
            trial_windows=1,
            confirm_windows=1,
            skip=["ranking"],
        ),
    )
    # --smoke: the tuner's search and confirmation only (its advice is tested in tests/tuners)
    quiet = dict(breakdown=False, advise_format=False) if args.smoke else {}

    import tfinput
    from tfinput import bench, models, steps
    from tfinput.bench import MeasureOptions
    from tfinput.config import PipelineConfig

    schema, tf_files, _ = core.data(Path(args.data_dir), args.rows)
    pipeline = tfinput.tfrecord(tf_files, schema)
    base = PipelineConfig(batch_size=core.BATCH)
    autotune = PipelineConfig.autotune(batch_size=core.BATCH)
    wb, warm = args.window_batches, 1 if args.smoke else 3
    top = 1 if args.smoke else 3  # configs confirmed
    lines = [
        "<!-- tune:begin (generated by benchmarks/tune.py) -->",
        "### Tuner: tuned vs autotune vs an exhaustive grid",
        "",
        f"Machine: {core.machine()}.",
        f"Workload: criteo-like {args.rows:,} rows, {len(tf_files)} TFRecord files, batch "
        f"{core.BATCH}. Benchmark space (the grid and the tuner search the same values): "
        + "; ".join(f"`{k}` {list(v)}" for k, v in SPACE.items())
        + " (-1 = AUTOTUNE).",
        "",
    ]

    # ---------------------------------------------------------- input only
    if "grid" not in args.skip:
        t0 = time.time()
        ranked = grid(pipeline, base, args.grid_windows, wb, warm, args.grid_configs)
        grid_s = time.time() - t0
        t1 = time.time()
        res = study(
            pipeline,
            base,
            steps.input_only(),
            args.n_trials,
            windows=args.trial_windows,
            window_batches=wb,
            warmup_batches=warm,
            confirm_top=top,
            confirm_windows=args.confirm_windows,
            **quiet,
        )
        tune_s = time.time() - t1
        final = {"autotune": autotune, "tuned": res.best_config}
        for i, (_, config) in enumerate(ranked[:3]):
            if config not in final.values():
                final[f"grid #{i + 1}"] = config
        fin = bench.measure(
            pipeline,
            final,
            measurement=MeasureOptions(
                windows=args.final_windows, window_batches=wb, warmup_batches=warm
            ),
            baseline="autotune",
        )
        by = {s.name: s for s in fin.results}
        grid_best = max(
            (s for n, s in by.items() if n.startswith("grid") or n == "tuned"),
            key=lambda s: s.median,
        )
        best_grid_only = max(
            (s for n, s in by.items() if n.startswith("grid")),
            key=lambda s: s.median,
            default=by["tuned"],
        )
        tuned = by["tuned"]
        # The grid's best config is grid #1 (or the tuner found the very same config).
        grid1 = by.get("grid #1", tuned)
        paired = [
            a.examples_per_s / b.examples_per_s
            for a, b in zip(tuned.windows, grid1.windows, strict=True)
        ]
        lines += [
            "#### Input only",
            "",
            f"Grid: {len(ranked)} configs, {args.grid_windows} windows of {wb} batches each "
            f"({grid_s:.0f} s). Tuner: {args.n_trials} trials incl. baselines, 3 windows each, "
            f"then its own confirmation ({tune_s:.0f} s in all; trials: {res.trials}). Final "
            f"round: {args.final_windows} interleaved windows of {wb} batches per config, "
            f"{warm} warm-up batches, fresh iterator per window.",
            "",
            "| config | median examples/s | min-max | CV | vs autotune (per-round range) |",
            "|---|---:|---:|---:|---:|",
        ]
        for s in sorted(fin.results, key=lambda s: s.median, reverse=True):
            lines.append(
                f"| {s.name} | {fmt(s.median)} | {fmt(s.minimum)}-{fmt(s.maximum)} | "
                f"{s.cv:.1%} | {s.ratio:.2f}x ({s.ratio_min:.2f}-{s.ratio_max:.2f}) |"
            )
        lines += [
            "",
            f"- tuned / autotune: **{tuned.ratio:.2f}x** (target >= 2.5x).",
            f"- tuned / the grid's best config (grid #1), re-measured in the same rounds: "
            f"**{tuned.median / grid1.median:.1%}** of its median (per-round ratios: median "
            f"{statistics.median(paired):.1%}, range {min(paired):.1%}-{max(paired):.1%}; "
            "target >= 95%).",
            f"- tuned / the best of the grid's top 3 as re-measured here: "
            f"{tuned.median / best_grid_only.median:.1%} (best of all in this round: "
            f"{grid_best.name}). Picking the maximum of several noisy re-measurements "
            "favours whichever config had lucky windows (the grid's own #1 is subject to the "
            "same effect), so the line above is the comparison the target means.",
            f"- tuned config: `{_diff(res.best_config, autotune)}`; grid #1 in the grid "
            f"pass: `{_diff(ranked[0][1], autotune)}` at {fmt(ranked[0][0])}/s.",
            "",
        ]

    # --------------------------------------------------------- ranking step
    if "ranking" not in args.skip:
        rschema = core.criteo_schema()  # 100k x 16 tables; --smoke: few, small
        rpipe = tfinput.tfrecord(tf_files, rschema)
        model = models.ranking_model(rschema, jit_compile=True)
        t0 = time.time()
        res = study(
            rpipe,
            base,
            steps.keras_step(model),
            min(12, args.n_trials),
            windows=args.trial_windows,
            window_batches=5,
            warmup_batches=2,
            confirm_top=min(top, 2),
            confirm_windows=args.confirm_windows,
            **quiet,
        )
        res.best_config.to_json(Path(args.data_dir) / "tuned-ranking.json", **res.record())
        lines += _confirmed_table(
            "Keras DCN-style ranking step",
            f"`tfinput.models.ranking_model`: 13 dense, 26 + 4 tables of 100k x 16, Adam, "
            f"XLA; 12 trials of 3 windows x 5 batches, confirmation 5 interleaved windows "
            f"per config. Study took {time.time() - t0:.0f} s; trials: {res.trials}.",
            res,
        )

    # ------------------------------------------------------- simulated step
    if "simulated" not in args.skip:
        t0 = time.time()
        res = study(
            pipeline,
            base,
            steps.simulated_step(0.020),
            min(20, args.n_trials),
            windows=args.trial_windows,
            window_batches=wb,
            warmup_batches=warm,
            confirm_top=min(top, 2),
            confirm_windows=args.confirm_windows,
            **quiet,
        )
        res.best_config.to_json(Path(args.data_dir) / "tuned-simulated.json", **res.record())
        bound = core.BATCH / 0.020
        lines += _confirmed_table(
            "Simulated accelerator step, 20 ms per batch",
            f"Step-bound rate {fmt(bound)} examples/s. 20 trials of 3 windows x {wb} "
            f"batches, confirmation 5 interleaved windows per config. Study took "
            f"{time.time() - t0:.0f} s; trials: {res.trials}.",
            res,
        )
        auto = next((c for c in res.confirmed if c.name == "autotune"), None)
        if auto is not None:
            lines.append(
                f"- tuned / step-bound rate: **{res.confirmed[0].median / bound:.1%}** "
                "(target >= 90%)."
            )
            lines.append(f"- autotune / step-bound rate: {auto.median / bound:.1%}.")
            lines.append("")
    lines.append("<!-- tune:end -->")
    section = "\n".join(lines)
    print(section)
    if args.write:
        write_section("tune", section)
    return 0


def _fields(config: Any) -> dict[str, Any]:
    # layout None is the pipeline's own, per_feature here: not a difference.
    return {**config.to_dict(), "layout": config.layout or "per_feature"}


def _diff(config: Any, ref: Any) -> str:
    d = {k: v for k, v in _fields(config).items() if _fields(ref).get(k) != v}
    return ", ".join(f"{k}={v}" for k, v in d.items()) or "same as autotune"


def _confirmed_table(title: str, method: str, res: Any) -> list[str]:
    out = [
        f"#### {title}",
        "",
        method,
        "",
        "| config | median examples/s | min-max | CV | vs autotune (per-round range) |",
        "|---|---:|---:|---:|---:|",
    ]
    for c in res.confirmed:
        ratio = f"{c.ratio:.2f}x ({c.ratio_min:.2f}-{c.ratio_max:.2f})" if c.ratio else ""
        out.append(
            f"| {c.name} | {fmt(c.median)} | {fmt(c.minimum)}-{fmt(c.maximum)} | "
            f"{c.cv:.1%} | {ratio} |"
        )
    auto = next((c for c in res.confirmed if c.name == "autotune"), None)
    if auto is None:  # the tuner confirms nothing when the search completed autotune alone
        return [*out, "", "- no confirmation: the search completed no config but autotune.", ""]
    out += [
        "",
        f"- confirmed best ({res.best_name}) / autotune: "
        f"**{res.confirmed[0].median / auto.median:.2f}x**; best config: "
        f"`{_diff(res.best_config, auto.config)}`.",
        "",
    ]
    return out


if __name__ == "__main__":
    sys.exit(main())
