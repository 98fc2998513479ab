"""SparseCore preprocessing on the training thread (keras-io's generator pattern) against
tfinput's feed (background workers), side by side, with a simulated TPU step.

    python benchmarks/sparsecore_feed.py              # measure and print the markdown section
    python benchmarks/sparsecore_feed.py --write      # also replace the section in RESULTS.md
    python benchmarks/sparsecore_feed.py --quick      # small data, 2 rounds: checks the script
    python benchmarks/sparsecore_feed.py --step none --workers 1,2,4,8 --section sparsecore-feed-16
                                                      # a many-core host: scaling, no step

Needs jax-tpu-embedding (``pip install 'tfinput[sparsecore]'``, CPython 3.12+).

Workload: criteo-like rows (13 dense, 26 single ids, 4 multi-hot lists of 0-19 ids, ids
below 100,000) as columnar records (so that parsing does not hide the rest), global
batch 4,096 = 8 devices x 512, 4 SparseCores per device, one table per feature, stacked as
keras-rs does on JAX (``SparseCorePlan.from_schema(..., stacking="auto")``:
jax-tpu-embedding's ``auto_stack_tables``), jax-tpu-embedding's default limits (256) unless
said otherwise.

Method:

1. **Preprocessing alone**: the median wall and CPU time of one
   ``preprocess_sparse_dense_matmul_input`` call on the first batches, serially.
2. **Does it hold the GIL?** A Python thread counts in a loop, alone and while another
   thread runs preprocessing calls; the ratio of its rates (1.0: the GIL is free during
   the call). Then N threads preprocessing the same batches at once, batches/s.
3. **Side by side**, ``--rounds`` interleaved rounds, the order rotated each round, each
   measurement a fresh iterator, ``--warmup`` untimed and ``--batches`` timed batches:
   the generator pattern (``for batch in dataset: preprocess(batch); step()``) and the
   feed with 1 and 2 workers (``for batch in sparsecore_feed(dataset, plan): step()``),
   with tfinput's simulated accelerator step (a sleep) of device time equal to the
   measured preprocessing time (``--step none``: no step, the input side's own rate;
   ``--workers``: the worker thread counts measured; ``--process-workers``: worker
   process counts, ``sparsecore_feed(..., processes=True)``). Reported: examples/s (median, min-max), the ratio to the
   generator (median of per-round ratios), and per batch the training thread's time
   outside the step (waiting for or preparing the next batch: wall time) and its CPU
   time there (``time.thread_time``; the preprocessing's own threads not counted).
4. **Buffer usage**: the share of the COO buffers that carried ids over the timed
   batches, at the default limits and at the limits ``tfinput.sparsecore_stats``
   measured from the data.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402
from benchmarks.columnar import columnar_data  # noqa: E402
from benchmarks.core import BATCH, data, machine  # noqa: E402

DEVICES = 8
SC = 4


def _plan(schema: Any, limits: Any = None) -> Any:
    from tfinput.sparsecore import SparseCorePlan

    return SparseCorePlan.from_schema(
        schema,
        batch_size=BATCH,
        local_device_count=DEVICES,
        num_sc_per_device=SC,
        stacking="auto",
        limits=limits,
        allow_id_dropping=True,
    )


def _alone(plan: Any, batches: list[Any], calls: int) -> dict[str, float]:
    walls, cpus = [], []
    for i in range(calls):
        features = batches[i % len(batches)][0]
        t0, c0 = time.perf_counter(), time.process_time()
        plan.preprocess(features, batch_number=i)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return {"wall_ms": 1e3 * statistics.median(walls), "cpu_ms": 1e3 * statistics.median(cpus)}


def _gil(plan: Any, batches: list[Any], calls: int, threads: list[int]) -> dict[str, Any]:
    count = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            count[0] += 1

    thread = threading.Thread(target=spin)
    thread.start()
    time.sleep(0.2)
    c0, t0 = count[0], time.perf_counter()
    time.sleep(1.0)
    idle = (count[0] - c0) / (time.perf_counter() - t0)
    c0, t0 = count[0], time.perf_counter()
    for i in range(calls):
        plan.preprocess(batches[i % len(batches)][0], batch_number=i)
    busy = (count[0] - c0) / (time.perf_counter() - t0)
    stop.set()
    thread.join()
    from concurrent.futures import ThreadPoolExecutor

    rates = {}
    for n in sorted({1, 2, 4, *threads}):
        with ThreadPoolExecutor(n) as pool:
            t0 = time.perf_counter()
            list(
                pool.map(
                    lambda i: plan.preprocess(batches[i % len(batches)][0], batch_number=i),
                    range(calls),
                )
            )
            rates[n] = calls / (time.perf_counter() - t0)
    return {"spin_ratio": busy / idle, "batches_per_s_by_threads": rates}


def _process_calls(features: Any, calls: int, barrier: Any) -> tuple[float, float]:
    """One process: its own plan (the same specs), two untimed calls, then ``calls``
    timed ones started together with the other processes."""
    from tfinput import testing

    plan = _plan(testing.criteo_like_schema())
    for i in range(2):
        plan.preprocess(features, batch_number=i)
    barrier.wait()
    t0 = time.time()
    for i in range(calls):
        plan.preprocess(features, batch_number=i)
    return t0, time.time()


def _processes(features: Any, counts: list[int], calls: int) -> dict[int, float]:
    """Batches/s with ``n`` processes preprocessing at once (each its own library
    instance and thread pool), for each ``n`` in ``counts``."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    ctx = mp.get_context("spawn")
    rates = {}
    for n in counts:
        with ctx.Manager() as manager:
            barrier = manager.Barrier(n)
            with ProcessPoolExecutor(n, mp_context=ctx) as pool:
                spans = list(pool.map(_process_calls, [features] * n, [calls] * n, [barrier] * n))
        rates[n] = n * calls / (max(e for _, e in spans) - min(s for s, _ in spans))
    return rates


def _generator(dataset: Any, plan: Any, step_s: float, warmup: int, batches: int) -> Any:
    it = dataset.as_numpy_iterator()
    cpu = wall = 0.0
    for i in range(warmup + batches):
        if i == warmup:
            t0, cpu, wall = time.perf_counter(), 0.0, 0.0
        c0, w0 = time.thread_time(), time.perf_counter()
        features, _labels = next(it)
        plan.preprocess(features, batch_number=i)
        cpu += time.thread_time() - c0
        wall += time.perf_counter() - w0
        time.sleep(step_s)
    rate = batches * BATCH / (time.perf_counter() - t0)
    return rate, cpu / batches, wall / batches, None


def _feed(
    dataset: Any,
    plan: Any,
    step_s: float,
    warmup: int,
    batches: int,
    workers: int,
    processes: bool = False,
) -> Any:
    from tfinput.sparsecore import sparsecore_feed

    cpu = wall = 0.0
    with sparsecore_feed(dataset, plan, workers=workers, processes=processes) as feed:
        for i in range(warmup + batches):
            if i == warmup:
                t0, cpu, wall = time.perf_counter(), 0.0, 0.0
                used0 = {
                    t: (u.used_entries, u.buffer_entries) for t, u in feed.stats.tables.items()
                }
                dropped0 = feed.stats.dropped_ids
            c0, w0 = time.thread_time(), time.perf_counter()
            next(feed)
            cpu += time.thread_time() - c0
            wall += time.perf_counter() - w0
            time.sleep(step_s)
        rate = batches * BATCH / (time.perf_counter() - t0)
        used = sum(u.used_entries - used0[t][0] for t, u in feed.stats.tables.items())
        size = sum(u.buffer_entries - used0[t][1] for t, u in feed.stats.tables.items())
        dropped = (feed.stats.dropped_ids - dropped0) / batches
    return rate, cpu / batches, wall / batches, (used / size, dropped)


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    import tfinput
    from benchmarks.core import criteo_schema
    from tfinput.config import PipelineConfig

    schema = criteo_schema()
    _, _, pq_files = data(root, args.rows)
    pipeline = tfinput.columnar(columnar_data(root, args.rows, pq_files), schema)
    config = PipelineConfig(batch_size=BATCH)
    dataset = pipeline.build(config, repeat=True)
    sample = list(dataset.take(8).as_numpy_iterator())
    plan = _plan(schema)
    stats = tfinput.sparsecore_stats(
        pipeline, per_replica_batch_size=BATCH // DEVICES, devices=DEVICES,
        sparsecores_per_device=SC,
    )  # fmt: skip
    measured_plan = _plan(schema, limits=stats)
    alone = _alone(plan, sample, args.calls)
    gil = _gil(plan, sample, args.calls, args.workers)
    if args.processes:
        gil["batches_per_s_by_processes"] = _processes(sample[0][0], args.processes, args.calls)
    step_s = alone["wall_ms"] / 1e3 if args.step == "measured" else 0.0
    variants = {
        "generator (preprocess on the training thread)": lambda: _generator(
            dataset, plan, step_s, args.warmup, args.batches
        ),
    }
    for n in args.workers:
        variants[f"sparsecore_feed, {n} worker{'s' if n > 1 else ''}"] = lambda n=n: _feed(
            dataset, plan, step_s, args.warmup, args.batches, n
        )
    for n in args.process_workers:
        variants[f"sparsecore_feed, {n} worker process{'es' if n > 1 else ''}"] = lambda n=n: _feed(
            dataset, plan, step_s, args.warmup, args.batches, n, True
        )
    most = max(args.workers)
    variants[f"sparsecore_feed, {most} worker{'s' if most > 1 else ''}, measured limits"] = lambda: (
        _feed(dataset, measured_plan, step_s, args.warmup, args.batches, most)
    )
    names = list(variants)
    out: dict[str, dict[str, list[Any]]] = {
        n: {"rate": [], "cpu": [], "wall": [], "usage": []} for n in names
    }
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            rate, cpu, wall, usage = variants[name]()
            out[name]["rate"].append(rate)
            out[name]["cpu"].append(cpu)
            out[name]["wall"].append(wall)
            out[name]["usage"].append(usage)
        print(
            f"round {r + 1}/{args.rounds}: "
            + ", ".join(f"{n.split(' (')[0]} {out[n]['rate'][-1]:,.0f}" for n in names),
            file=sys.stderr,
        )
    base = out[names[0]]["rate"]
    result: dict[str, Any] = {
        "machine": machine(),
        "rows": args.rows,
        "rounds": args.rounds,
        "alone": alone,
        "gil": gil,
        "step_ms": step_s * 1e3,
        "workers": args.workers,
        "limits": stats.table_limits(),
        "variants": {},
    }
    for name in names:
        rates = out[name]["rate"]
        ratios = [a / b for a, b in zip(rates, base)]
        usage = [u[0] for u in out[name]["usage"] if u is not None]
        dropped = [u[1] for u in out[name]["usage"] if u is not None]
        result["variants"][name] = {
            "median": statistics.median(rates),
            "min": min(rates),
            "max": max(rates),
            "ratio": [statistics.median(ratios), min(ratios), max(ratios)],
            "thread_cpu_ms": 1e3 * statistics.median(out[name]["cpu"]),
            "thread_wall_ms": 1e3 * statistics.median(out[name]["wall"]),
            "usage": statistics.median(usage) if usage else None,
            "dropped_per_batch": statistics.median(dropped) if dropped else None,
        }
    return result


def markdown(res: dict[str, Any], args: argparse.Namespace) -> str:
    g = res["gil"]
    threads = ", ".join(f"{n} thread(s) {r:.1f}" for n, r in g["batches_per_s_by_threads"].items())
    if "batches_per_s_by_processes" in g:
        threads += "; in processes (each its own library instance): " + ", ".join(
            f"{n} process(es) {r:.1f}" for n, r in g["batches_per_s_by_processes"].items()
        )
    if res["step_ms"]:
        step = (
            f"A simulated TPU step sleeps {res['step_ms']:.1f} ms per batch (the preprocessing "
            "time measured alone)."
        )
        title = "SparseCore preprocessing: on the training thread against tfinput's feed"
    else:
        step = "No step: the training thread only takes batches (the input side's own rate)."
        title = "SparseCore preprocessing without a step: how the feed scales with workers"
    section = args.section
    lines = [
        f"<!-- {section}:begin (benchmarks/sparsecore_feed.py writes this section) -->",
        f"## {title}",
        "",
        f"Machine: {res['machine']}.",
        "",
        f"Method (`benchmarks/sparsecore_feed.py`, its docstring has the details): criteo-like "
        f"{res['rows']:,} rows as columnar records, global batch {BATCH} = {DEVICES} devices x "
        f"{BATCH // DEVICES}, {SC} SparseCores per device, one table per feature, "
        f"jax-tpu-embedding's `preprocess_sparse_dense_matmul_input` on CPU. {step} "
        f"{res['rounds']} interleaved rounds, order rotated, {args.warmup} warm-up and "
        f"{args.batches} timed batches each; ratio: median of per-round ratios to the "
        "generator (min-max).",
        "",
        f"- Preprocessing alone: {res['alone']['wall_ms']:.1f} ms per batch "
        f"({res['alone']['cpu_ms']:.1f} ms of CPU: it runs threads of its own).",
        f"- The GIL during a call: a Python thread kept {g['spin_ratio']:.0%} of its idle "
        f"rate. Batches/s with calls on several threads at once: {threads}.",
        "",
        "| variant | examples/s (min-max) | x generator | training thread per batch outside "
        "the step: wall, CPU | COO buffer usage | ids dropped per batch |",
        "|---|---|---|---|---|---|",
    ]
    for name, v in res["variants"].items():
        q = v["ratio"]
        usage = "n/a" if v["usage"] is None else f"{v['usage']:.1%}"
        dropped = "n/a" if v["dropped_per_batch"] is None else f"{v['dropped_per_batch']:,.0f}"
        lines.append(
            f"| {name} | {v['median']:,.0f} ({v['min']:,.0f}-{v['max']:,.0f}) | "
            f"{q[0]:.2f} ({q[1]:.2f}-{q[2]:.2f}) | {v['thread_wall_ms']:.1f} ms, "
            f"{v['thread_cpu_ms']:.2f} ms | {usage} | {dropped} |"
        )
    lines.append(f"<!-- {section}:end -->")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument(
        "--step", choices=("measured", "none"), default="measured",
        help="the simulated step: as long as one preprocessing call (default), or none",
    )  # fmt: skip
    p.add_argument(
        "--workers", type=lambda s: [int(n) for n in s.split(",")], default=[1, 2],
        help="the feed's worker counts to measure, comma-separated (default 1,2)",
    )  # fmt: skip
    p.add_argument(
        "--process-workers", type=lambda s: [int(n) for n in s.split(",")], default=[],
        help="also measure the feed with this many worker processes (comma-separated)",
    )  # fmt: skip
    p.add_argument("--section", default="sparsecore-feed", help="RESULTS.md section to write")
    p.add_argument(
        "--processes", type=lambda s: [int(n) for n in s.split(",")], default=[],
        help="also measure calls in this many processes at once (comma-separated)",
    )  # fmt: skip
    p.add_argument("--data-dir", help="keep the data here (default: a temporary directory)")
    p.add_argument("--quick", action="store_true", help="small data, 2 rounds: checks the script")
    p.add_argument("--write", action="store_true", help="replace the section in RESULTS.md")
    p.add_argument("--json", action="store_true")
    args = parse_args(
        p, argv, smoke=dict(rows=8_192, rounds=1, warmup=1, batches=2, calls=1, workers=[2])
    )
    if args.quick:
        args.rows, args.rounds, args.warmup, args.batches, args.calls = 40_000, 2, 1, 3, 3
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="tfinput-sparsecore-") as tmp:
        res = run(args, Path(args.data_dir or tmp))
    text = markdown(res, args)
    print(json.dumps(res, indent=2) if args.json else text)
    print(f"took {time.time() - t0:.0f} s", file=sys.stderr)
    if args.write:
        write_section(args.section, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
