"""Service benchmark: a columnar pipeline read locally vs through tf.data service with 1
and 2 local worker processes (`tfinput.service.LocalFleet`), side by side.

    python benchmarks/service.py              # measure and print the markdown section
    python benchmarks/service.py --write      # also replace the section in RESULTS.md
    python benchmarks/service.py --quick      # 40k rows, 2 short rounds: checks the script

Workload: criteo-like rows (13 dense, 26 single ids, 4 multi-hot lists of 0-19 ids),
generated and converted in a temporary directory (``--data-dir`` keeps and reuses them),
the Python equivalents of::

    tfinput datagen RAW --rows 200k --files 8            # criteo-like, tf.Example TFRecord
    tfinput convert 'RAW/*.tfrecord' --schema RAW/schema.json --to columnar \\
        --rows-per-file 25000 --out COL                 # 8 files of 1024-row chunks

``--rows-per-file`` keeps the 8 files: `convert` writes up to 1M rows per file by
default, and with one file the dispatcher (``processing_mode="dynamic"``: each file to one
worker) would leave a second worker idle. Batch 1024 (the chunk size), every other knob
AUTOTUNE (`PipelineConfig.autotune`).

Variants, all the same `tfinput.columnar` pipeline:

- **local**: built and read in this process.
- **1 worker**, **2 workers**: ``pipeline.with_service(LocalFleet(max_workers=2))``
  built with ``service_workers`` 1 and 2 (the configs ``tfinput bench --service
  local:2`` compares): a dispatcher and that many tf.data service worker processes on
  this machine, read with the default ``service_compression="AUTO"`` and outstanding
  requests. Both clusters are started before measuring (their start-up is reported apart).

Method: ``--rounds`` rounds; each round measures one window of every variant, in an order
rotated by one each round. A window is `tfinput._src.measurement.windows.run_window`, as ``tfinput bench``
uses it: a fresh iterator over ``pipeline.build(config).repeat()``, ``--warmup`` untimed
batches (for the service: after the job is created), then ``--batches`` timed batches,
each handed to the ``input only`` step. Warm-up plus window stay inside one epoch (195
batches at 200k rows): with the service every epoch of ``.repeat()`` is a new job, and a
window crossing one would time the job's start. Statistics are `tfinput._src.measurement.compare.summarize`'s:
median examples/s over windows with min-max; the ratio to local is the median of the
per-round ratios. CPU is sampled at the start and end of each timed window: "trainer" is
this process (`time.process_time`), "all" adds the fleet's processes (children of this
process, from ``/proc``; 10 ms ticks). Per worker = median / workers; the workers a target
rate needs come from `tfinput.service.workers_needed` (linear scaling), as ``tfinput bench
--service local:2 --target-rate`` prints them.

The machine has 2 cores shared with other agents: the worker processes, the dispatcher
and the reading (trainer) process all run on those 2 cores, so this measures what the
service costs here, not how it scales with workers on machines of their own.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
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

ROWS = 200_000
FILES = 8
BATCH = 1024
TARGET_RATE = 1_000_000
VARIANTS = ("local", "1 worker", "2 workers")

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def make_data(root: Path, rows: int) -> Path:
    """Criteo-like TFRecord files, converted to columnar records (both written once)."""
    from tfinput import datagen
    from tfinput.columnar_records import MANIFEST
    from tfinput.convert import convert

    raw, col = root / f"criteo-{rows}" / "tfrecord", root / f"criteo-{rows}" / "columnar-8"
    if not (col / MANIFEST).exists():
        from benchmarks import _results
        from benchmarks.core import criteo_schema

        # --smoke: the criteo-like schema's few-features version
        like = (
            dict(preset=None, schema=criteo_schema())
            if _results.smoke_active()
            else dict(preset="criteo-like")
        )
        gen = datagen.generate_files(raw, **like, rows=rows, files=FILES, format="tfrecord", seed=0)
        convert(
            gen.paths,
            col,
            to="columnar",
            schema=gen.schema,
            rows_per_file=-(-rows // FILES),
            overwrite=True,
        )
    return col


def _children() -> list[int]:
    """Processes whose parent is this one (the fleet's dispatchers and workers)."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            out.append(int(entry))
    return out


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:  # gone
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * _PAGE
        except OSError:
            pass
    return total / 2**20


class CpuProbe:
    """A ``cpu_clock`` for `run_window`: CPU seconds of this process (`time.process_time`)
    plus the fleet's processes (``/proc`` ticks); also keeps this process's own share at
    each call."""

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.own: list[float] = []

    def __call__(self) -> float:
        self.own.append(time.process_time())
        return self.own[-1] + sum(_cpu_ticks(p) for p in self.pids) / _TICK

    def trainer_seconds(self) -> float:
        """This process's CPU seconds between the last two calls (one timed window)."""
        return self.own[-1] - self.own[-2]


class InProcessFleet:
    """``--smoke``'s stand-in for `tfinput.service.LocalFleet`: the same clusters (a
    dispatcher and ``w`` workers per worker count, started on first use), as
    tf.data servers in this process rather than processes of their own, so a smoke run
    starts no TensorFlow beside its own. Its figures are no results."""

    def __init__(self, max_workers: int):
        self.max_workers = max_workers
        self._clusters: dict[int, tuple[str, list[Any]]] = {}

    def __enter__(self) -> InProcessFleet:
        return self

    def __exit__(self, *exc: Any) -> None:
        import gc

        gc.collect()  # iterators left in cycles would keep a worker's stop waiting
        for _, servers in self._clusters.values():
            for server in reversed(servers):
                server.stop()
        self._clusters.clear()

    def address_for(self, workers: int) -> str:
        from tfinput.service import start_dispatcher, start_worker

        workers = workers or self.max_workers
        if workers not in self._clusters:
            dispatcher = start_dispatcher()
            servers = [dispatcher, *(start_worker(dispatcher.target) for _ in range(workers))]
            self._clusters[workers] = (dispatcher.target, servers)
        return self._clusters[workers][0]


def fleet_for(smoke: bool, max_workers: int) -> Any:
    """The fleet a run reads through: worker processes (`LocalFleet`), or with
    ``--smoke`` the same clusters in this process (`InProcessFleet`)."""
    from tfinput.service import LocalFleet

    return InProcessFleet(max_workers) if smoke else LocalFleet(max_workers=max_workers)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--warmup", type=int, default=8, help="untimed batches per window")
    p.add_argument("--batches", type=int, default=150, help="timed batches per window")
    p.add_argument("--target-rate", type=float, default=TARGET_RATE)
    p.add_argument("--data-dir", help="keep the data here (default: a temporary directory)")
    p.add_argument("--quick", action="store_true", help="40k rows, 2 rounds: checks the script")
    p.add_argument("--write", action="store_true", help="replace the section in RESULTS.md")
    args = parse_args(p, argv, smoke=dict(rows=12_288, rounds=1, warmup=1, batches=2))
    if args.quick:
        args.rows, args.rounds, args.warmup, args.batches = 40_000, 2, 4, 20
    per_epoch = args.rows // BATCH
    if args.warmup + args.batches > per_epoch - FILES:
        p.error(
            f"--warmup + --batches must stay inside one epoch ({per_epoch} batches, less "
            f"{FILES} for partial chunks): with the service each epoch is a new job"
        )

    t0 = time.time()
    machine_line = machine()
    import tfinput
    from tfinput._src.measurement.compare import summarize
    from tfinput._src.measurement.probes import available_cpus
    from tfinput._src.measurement.windows import run_window
    from tfinput.config import PipelineConfig
    from tfinput.service import workers_needed
    from tfinput.steps import input_only

    with tempfile.TemporaryDirectory(prefix="tfinput-service-") as tmp:
        col = make_data(Path(args.data_dir or tmp) / ("service" if args.smoke else ""), args.rows)
        pipeline = tfinput.columnar(str(col))
        files = len(pipeline.source.files())
        data_s = time.time() - t0
        base = PipelineConfig.autotune(batch_size=BATCH)
        configs = {
            "local": base,
            "1 worker": base.replace(service_workers=1),
            "2 workers": base.replace(service_workers=2),
        }
        if args.smoke:  # one cluster of one worker, in this process
            del configs["2 workers"]
        variants = tuple(configs)
        with fleet_for(args.smoke, len(variants) - 1) as fleet:
            served = pipeline.with_service(fleet)
            t = time.perf_counter()
            for w in range(1, len(variants)):
                fleet.address_for(w)
            startup_s = time.perf_counter() - t
            pids = _children()
            rss_start = rss_mb(pids)
            probe = CpuProbe(pids)
            step = input_only()
            windows: dict[str, list[Any]] = {n: [] for n in variants}
            trainer: dict[str, list[float]] = {n: [] for n in variants}
            for r in range(args.rounds):
                order = variants[r % len(variants) :] + variants[: r % len(variants)]
                for name in order:
                    config = configs[name]
                    source = served if config.service_workers else pipeline
                    w = run_window(
                        lambda source=source, config=config: source.build(config).repeat(),
                        warmup_batches=args.warmup,
                        window_batches=args.batches,
                        step=step,
                        batch_size=BATCH,
                        cpu_clock=probe,
                    )
                    windows[name].append(dataclasses.replace(w, name=name, round=r))
                    trainer[name].append(probe.trainer_seconds() / w.seconds)
                print(
                    f"round {r + 1}/{args.rounds} ({', '.join(order)}): "
                    + ", ".join(f"{n} {windows[n][-1].examples_per_s:,.0f}/s" for n in variants),
                    file=sys.stderr,
                    flush=True,
                )
            rss_end = rss_mb(pids)
            services = {
                n: served.service.worker_count(c) for n, c in configs.items() if n != "local"
            }
    stats = {
        s.name: s
        for s in summarize(windows, configs=configs, baseline="local", cpu_count=available_cpus())
    }
    total_s = time.time() - t0

    def rate(x: float) -> str:
        return f"{x:,.0f}"

    def med(xs: list[float]) -> float:
        return statistics.median(xs)

    # The trainer's CPU per example, per window (cores busy / examples per second).
    us = {n: [c / w.examples_per_s * 1e6 for c, w in zip(trainer[n], windows[n])] for n in variants}
    lines = [
        "<!-- service:begin (generated by benchmarks/service.py) -->",
        "## tf.data service: local vs 1 and 2 local workers",
        "",
        f"Machine: {machine_line}; the load average is the only record of other work on these cores. "
        f"Method: `python benchmarks/service.py` (see its docstring): criteo-like "
        f"{args.rows:,} rows (`tfinput datagen`, TFRecord) converted to columnar records "
        f"in {files} files, batch {BATCH}, `PipelineConfig.autotune`; the same pipeline read "
        "in this process and through `with_service(LocalFleet(max_workers=2))` with "
        f"`service_workers` 1 and 2 (compression `AUTO`); {args.rounds} rounds, one window "
        f"per variant per round in rotating order, fresh iterator per window, {args.warmup} "
        f"warm-up batches excluded, {args.batches} timed batches "
        f"({args.batches * BATCH:,} examples). Total time {total_s:.0f} s (data "
        f"{data_s:.0f} s, starting both clusters {startup_s:.0f} s)"
        + (" (--quick: a smoke run, not a result)." if args.quick else "."),
        "",
        "| variant | examples/s (median) | min | max | x local (median, range) | "
        "cores busy: trainer / all | trainer CPU per example | per worker | "
        f"workers for {args.target_rate:,.0f}/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in variants:
        s = stats[name]
        ratio = "1" if name == "local" else f"{s.ratio:.2f} ({s.ratio_min:.2f}-{s.ratio_max:.2f})"
        workers = services.get(name)
        per_worker = rate(s.median / workers) if workers else "-"
        needed = str(workers_needed(s.median, workers, args.target_rate)) if workers else "-"
        lines.append(
            f"| {name} | {rate(s.median)} | {rate(s.minimum)} | {rate(s.maximum)} | {ratio} | "
            f"{med(trainer[name]):.2f} / {s.cores_busy:.2f} | {med(us[name]):.1f} us | "
            f"{per_worker} | {needed} |"
        )
    # --smoke has no 2-worker row: the text below then compares the 1-worker row with itself
    one, two = windows["1 worker"], windows.get("2 workers", windows["1 worker"])
    two_vs_one = [b.examples_per_s / a.examples_per_s for a, b in zip(one, two)]
    s1, s2 = stats["1 worker"], stats.get("2 workers", stats["1 worker"])
    busy = [stats[n].cores_busy for n in variants]
    x21 = med(two_vs_one)
    if max(two_vs_one) < 1 or min(two_vs_one) > 1:
        second = f"{'slower' if x21 < 1 else 'faster'} than one in every round"
    elif abs(x21 - 1) > 0.05:
        second = f"{'slower' if x21 < 1 else 'faster'} than one in most rounds"
    else:
        second = "as fast as one within the spread"
    costs = sorted(med(us[n]) for n in services)
    cost, span = costs[0], f"{costs[0]:.1f}-{costs[-1]:.1f}"
    need = {w: workers_needed(stats[n].median, w, args.target_rate) for n, w in services.items()}
    need.setdefault(2, need[1])
    if cost > 1.1 * med(us["local"]):
        freed = "so here the service frees none of the trainer's CPU: each example costs it more"
    elif cost >= 0.9 * med(us["local"]):
        freed = "so here the service frees none of the trainer's CPU per example"
    else:
        freed = f"so the service frees {1 - cost / med(us['local']):.0%} of it per example"
    # The service path's overhead per batch: wall time between batches, and the trainer's
    # CPU per batch, each against reading locally.
    wall = {n: BATCH / stats[n].median * 1e3 for n in variants}
    cpu = {n: med(us[n]) * BATCH / 1e3 for n in variants}
    per_batch = "; ".join(
        f"{n}: {wall[n]:.2f} ms wall (+{wall[n] - wall['local']:.2f}), "
        f"{cpu[n]:.2f} ms trainer CPU (+{cpu[n] - cpu['local']:.2f})"
        for n in services
    )
    lines += [
        "",
        f"Per batch of {BATCH} (wall time between batches, and the trainer's CPU, from the "
        f"medians above): local {wall['local']:.2f} ms wall, {cpu['local']:.2f} ms trainer "
        f"CPU; {per_batch}.",
        "",
        f"2 workers / 1 worker, per round: median {x21:.2f} (range {min(two_vs_one):.2f}-"
        f"{max(two_vs_one):.2f}). Resident memory of the fleet's processes (2 dispatchers, "
        f"3 workers, each with TensorFlow loaded): {rss_start:,.0f} MiB after start-up, "
        f"{rss_end:,.0f} MiB at the end.",
        "",
        "Reading: on these 2 shared cores the local workers compete with the trainer (the "
        "reading process) for the same cores, so this measures the service's overhead, not "
        f"its scaling: all processes together keep {min(busy):.2f}-{max(busy):.2f} cores "
        f"busy in every variant. Through the service the trainer gets {s1.ratio:.2f}x "
        f"(1 worker) and {s2.ratio:.2f}x (2 workers) of the local {rate(stats['local'].median)}"
        " examples/s. Receiving a batch (gRPC over loopback, snappy under `AUTO`, "
        f"deserializing every tensor) costs the trainer {span} us of CPU per example, "
        f"against {med(us['local']):.1f} us to read and decode the columnar records itself, "
        f"{freed}. A second worker adds no cores, only a second process on the same two: "
        f"2 workers are {second}, so the 2-worker row's per-worker rate is "
        f"{s2.median / 2 / s1.median:.2f}x the 1-worker row's and its workers-needed "
        f"estimate {need[2]} instead of {need[1]}, an effect of the "
        "shared cores, not of the workers. The per-worker rate and the workers-needed "
        "estimate are what `tfinput bench --service` prints for sizing; `workers_needed` "
        "scales the per-worker rate linearly and assumes the trainer takes the rate, which "
        f"at {span} us per example means about {costs[0] * args.target_rate / 1e6:.1f}-"
        f"{costs[-1] * args.target_rate / 1e6:.1f} trainer cores busy receiving "
        f"{args.target_rate:,.0f} examples/s. Size a real fleet from one worker measured "
        "on a machine of its own (`tfinput bench --service grpc://...`).",
        "<!-- service:end -->",
    ]
    section = "\n".join(lines)
    print(section)
    if args.write:
        write_section("service", section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
