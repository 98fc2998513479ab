"""``tfinput bench``: pipeline configs measured side by side (`tfinput.bench.measure`),
optionally with the machine's roofline, and their human-readable report."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from tfinput._src.applications.cli.args import (
    add_output_arguments,
    add_source_arguments,
    check_output,
    count,
    pipeline_from_args,
)
from tfinput._src.applications.cli.console import console, progress
from tfinput._src.applications.cli.registry import Command
from tfinput._src.core.errors import ConfigError
from tfinput._src.core.files import create_parents
from tfinput._src.measurement.target import MeasureOptions, Target

if TYPE_CHECKING:
    from tfinput._src.measurement.compare import BenchResult


def _arguments(p: argparse.ArgumentParser) -> None:
    add_source_arguments(
        p,
        help={
            "paths": "data files, globs or directories",
            "schema": "schema JSON (default: schema.json next to the data)",
            "format": "default: columnar if a manifest.json is there, else by extension",
            "service": "read through tf.data service: a dispatcher address, or local:N "
            "(worker processes here; without --config, autotune with 1 to N workers)",
            "service_workers": "the worker count of the --service address",
        },
    )
    p.add_argument(
        "--target-rate",
        type=float,
        metavar="EXAMPLES_PER_S",
        help="with --service: print how many workers each config's rate implies for it",
    )
    p.add_argument(
        "--config",
        action="append",
        metavar="SPEC",
        help="naive, heuristic, autotune, a saved config JSON, or NAME=FILE; repeatable "
        "(default: the three presets)",
    )
    p.add_argument("--baseline", help="config the ratios refer to (default: the first)")
    p.add_argument("--batch-size", type=count, help="override every config's batch size")
    p.add_argument("--windows", type=int, default=5, help="windows per config (default 5)")
    p.add_argument(
        "--window-seconds",
        type=float,
        help="least seconds of each window, its batches sized from the warm-up's rate "
        "(default 0.5; 0: a fixed --window-batches)",
    )
    p.add_argument(
        "--window-batches",
        type=int,
        help="least batches per window (default 20); given without --window-seconds, "
        "the fixed count of every window",
    )
    p.add_argument("--warmup-batches", type=int, default=8, help="untimed batches per window")
    p.add_argument("--roofline", action="store_true", help="also measure the roofline")
    p.add_argument("--roofline-windows", type=int, default=3)
    p.add_argument("--cpu-count", type=int, help="cores to assume (default: affinity mask)")
    p.add_argument(
        "--device-time-ms",
        "--step-ms",
        dest="step_ms",
        type=float,
        help="simulate an accelerator step of this many ms per batch (as in tune and profile)",
    )
    p.add_argument("--out", help="also write the JSON result to this file")
    add_output_arguments(p, json_help="print the JSON result (tfinput.bench/1)")


def _fmt_rate(x: float | None) -> str:
    if x is None:
        return ""
    return f"{x / 1e3:,.1f}k" if x < 1e6 else f"{x / 1e6:,.2f}M"


def _measurement(args: argparse.Namespace) -> MeasureOptions:
    """The measurement ``tfinput bench``'s arguments ask for."""
    return MeasureOptions(
        windows=args.windows,
        window_batches=args.window_batches,
        window_seconds=args.window_seconds,
        warmup_batches=args.warmup_batches,
        cpu_count=args.cpu_count,
    )


def _bench(args: argparse.Namespace) -> int:
    """Measure configs side by side (and optionally the roofline)."""
    from tfinput._src.measurement import compare, steps
    from tfinput._src.measurement.roofline import roofline

    check_output(args.out, "--out", directory=False)
    pipeline = pipeline_from_args(args)
    target = Target.of(pipeline, what="benchmark")
    service = target.service
    if args.target_rate is not None and service is None:
        raise ConfigError("--target-rate needs --service")
    fleet = service.fleet if service is not None else None
    if fleet is not None and not args.config:
        base = compare.load_configs(["autotune"], batch_size=args.batch_size)["autotune"]
        configs = {
            f"{w} worker{'s' if w > 1 else ''}": base.replace(service_workers=w)
            for w in range(1, fleet.max_workers + 1)
        }
    else:
        configs = compare.load_configs(
            args.config or ["naive", "heuristic", "autotune"],
            cpu_count=args.cpu_count,
            batch_size=args.batch_size,
        )
    step = steps.simulated_step(args.step_ms / 1e3) if args.step_ms else steps.input_only()
    rl = None
    with progress() as bar:
        if args.roofline:
            sizes = {c.batch_size for c in configs.values()}
            task = bar.add_task("roofline", total=None)
            rl = roofline(
                pipeline,
                batch_size=max(sizes),
                configs=configs,
                measurement=MeasureOptions(
                    windows=args.roofline_windows,
                    window_batches=args.window_batches,
                    warmup_batches=max(1, min(args.warmup_batches, 3)),
                    cpu_count=args.cpu_count,
                ),
                progress=lambda done, total, w: bar.update(
                    task, completed=done, total=total, description=f"roofline {w.name}"
                ),
            )
        task = bar.add_task("configs", total=args.windows * len(configs))
        result = compare.measure(
            target,
            configs,
            step=step,
            baseline=args.baseline,
            measurement=_measurement(args),
            roofline_result=rl,
            progress=lambda done, total, w: bar.update(
                task,
                completed=done,
                description=f"{w.name} round {w.round + 1}: {_fmt_rate(w.examples_per_s)}/s",
            ),
        )
    if args.out:
        create_parents(args.out)
        result.to_json(args.out)
    if args.json:
        print(result.to_json())
        return 0
    print_bench(result, console())
    if service is not None:
        for line in _service_lines(result, service, args.target_rate):
            console().print(line, markup=False)
    return 0


def _service_lines(result: BenchResult, service: Any, target_rate: float | None) -> list[str]:
    """Per config: examples/s per worker and, with a target, the workers it implies."""
    from tfinput._src.core.service.servers import workers_needed

    lines = []
    for r in result.results:
        workers = service.worker_count(r.config) if r.config is not None else None
        if not workers:
            lines.append(f"{r.name}: worker count unknown (pass --service-workers)")
            continue
        text = f"{r.name}: {r.median / workers:,.0f} examples/s per worker ({workers} worker(s))"
        if target_rate:
            need = workers_needed(r.median, workers, target_rate)
            text += f"; {target_rate:,.0f} examples/s needs about {need}"
        lines.append(text)
    return lines


def _window_size(method: dict[str, Any]) -> str:
    """A window's size as the method records it: a time target or a count."""
    seconds = method.get("window_seconds") or 0
    if seconds > 0:
        return f">= {seconds:g} s (>= {method['window_batches']} batches)"
    return f"{method['window_batches']} batches"


def print_bench(result: BenchResult, console: Any) -> None:
    """The human-readable report of a `tfinput.bench.BenchResult`."""
    from rich.table import Table as RichTable

    m, hw = result.method, result.machine
    t = RichTable(
        title=f"{hw['cpu_model']} x{hw['cpu_count']}, TensorFlow {hw['tensorflow']}; "
        f"{m['windows']} windows x {_window_size(m)} after {m['warmup_batches']} "
        "warm-up, interleaved"
    )
    cols = [
        "config",
        "examples/s",
        "min-max",
        "CV",
        "p50 ms",
        "p99 ms",
        "stall",
        "cores busy",
        "RSS MiB",
        f"x {result.baseline}",
    ]
    if result.roofline is not None:
        cols.append("of roofline")
    for c in cols:
        t.add_column(c, justify="left" if c == "config" else "right")
    for r in result.results:
        ratio = ""
        if r.ratio is not None:
            ratio = f"{r.ratio:.2f} ({r.ratio_min:.2f}-{r.ratio_max:.2f})"
        row = [
            r.name,
            _fmt_rate(r.median),
            f"{_fmt_rate(r.minimum)}-{_fmt_rate(r.maximum)}",
            f"{100 * r.cv:.0f}%",
            f"{r.latency_p50_ms:.1f}",
            f"{r.latency_p99_ms:.1f}",
            "n/a" if r.stall is None else f"{100 * r.stall:.0f}%",  # unknown inside fit
            f"{r.cores_busy:.2f}",
            f"{r.peak_rss_mb:,.0f}",
            ratio,
        ]
        if result.roofline is not None:
            row.append(f"{100 * (r.roofline_fraction or 0):.0f}%")
        t.add_row(*row)
    console.print(t)
    rl = result.roofline
    if rl is not None:
        for line in roofline_lines(rl):
            console.print(line, markup=False)
    best = result.best
    console.print(f"best: {best.name} ({_fmt_rate(best.median)} examples/s)", markup=False)


def roofline_lines(rl: Any) -> list[str]:
    """The lines explaining a `tfinput.bench.Roofline`: the parallel bound, the CPU
    cost per example, then each probed config's serial stage and prediction."""
    cost = rl.cost_us()
    full, read = rl.stage("full"), rl.stage("read")
    lines = [
        f"roofline: {_fmt_rate(rl.bound)} examples/s, {rl.limited_by}-bound "
        f"(CPU: {rl.cores} cores x {_fmt_rate(full.examples_per_cpu_s)} examples per "
        f"CPU-second = {_fmt_rate(rl.cpu_bound)}; read: {max(1, min(rl.cores, rl.files))} "
        f"stream(s) x {_fmt_rate(read.examples_per_cpu_s)} = {_fmt_rate(rl.read_bound)})",
        f"CPU cost per example on one core: read {cost['read']:.2f} us + parse "
        f"{cost['parse']:.2f} us + transforms {cost['transform']:.2f} us = "
        f"{cost['total']:.2f} us (stages ran at {full.cores_busy:.2f}/"
        f"{rl.stage('parse').cores_busy:.2f}/{read.cores_busy:.2f} cores busy: full/parse/read)",
    ]
    from tfinput._src.measurement.roofline import serial_advice

    for s in rl.serial:
        p = rl.predict(s.config)
        lines.append(
            f"{s.config}: serial stage {s.elements_per_batch:,.0f} element(s) per batch x "
            f"{s.us_per_element:.2f} us = {_fmt_rate(s.examples_per_s)} examples/s; "
            f"predicted {_fmt_rate(p.bound)} examples/s ({p.limited_by}-bound)"
        )
        if p.limited_by == "serial":
            lines.append("  " + serial_advice(s))
    return lines


BENCH_COMMAND = Command(
    name="bench",
    help="measure pipeline configs side by side, interleaved, with spread",
    description="Configs take turns window by window; each window uses a fresh iterator "
    "and excludes its warm-up. --roofline adds the machine's estimated upper bound.",
    arguments=_arguments,
    run=_bench,
    error_first_line=True,
)
