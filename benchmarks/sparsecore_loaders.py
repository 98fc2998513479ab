"""tfinput's SparseCore feed against the loader users write: keras-rs's MLPerf
``ThreadedDataLoader`` and the generator pattern, side by side, with a simulated TPU step.

    python benchmarks/sparsecore_loaders.py            # measure, print the markdown section
    python benchmarks/sparsecore_loaders.py --write    # also replace the section in RESULTS.md
    python benchmarks/sparsecore_loaders.py --threads 4 --section sparsecore-loaders-16

Needs jax-tpu-embedding (``pip install 'tfinput[sparsecore]'``, CPython 3.12+).

The three patterns, each fed the same batches and running the same step:

- **generator**: ``for batch in dataset: step(preprocess(batch))``, keras-rs's own JAX
  example (the preprocessing on the training thread);
- **threaded loader**: keras-rs's ``examples/ml_perf/main.py`` ``ThreadedDataLoader``,
  re-created from its code: N Python threads each take the next batch from the shared
  iterator, call the preprocessing and append the result to a ``deque(maxlen=12)``
  under a ``threading.Condition``; the training loop pops from it. Its batches come in
  the order the threads finish, and its threads are never stopped (here: stopped after
  each measurement); the one change is a lock around the shared iterator's ``next``
  (a Python generator refuses two callers at once) and the batch number passed to the
  preprocessing;
- **feed**: ``sparsecore_feed(dataset, plan, workers=N)``: in order, resumable.

Two distributions, each its own ``SparseCorePlan`` (8 devices, 4 SparseCores each,
global batch 4,096, jax-tpu-embedding's default limits, ids beyond them dropped and
counted):

- **criteo-like**: benchmarks/core.py's rows as columnar records (13 dense, 26 single
  ids, 4 multi-hot lists of 0-19 ids, ids below 100,000), one table per feature,
  stacked as keras-rs does (``stacking="auto"``);
- **production-derived**: jax-tpu-embedding's ``input_preprocessing_benchmark.cc``
  distribution: per row and feature round(exp(N(1.5, 1.9))) ids, cut at ``--max-len``
  (256: the share cut is reported), 42.43% of them from Zipf(q = 1.00278) over a
  vocabulary of 1e8 (inverse CDF of the bounded power law), the rest uniform; 8 multi-hot
  features, one table each; generated once as numpy batches and cycled.

Method: the preprocessing time of one batch alone (median of ``--calls`` serial calls);
the simulated step sleeps that long. Then ``--rounds`` interleaved rounds, the order
rotated each round, each measurement a fresh loader, ``--warmup`` untimed and
``--batches`` timed batches. Reported: examples/s (median, min-max), the ratio to the
threaded loader (median of per-round ratios, min-max), and the training thread's share:
the part of its wall time spent outside the step (taking or waiting for the next batch).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402
from benchmarks.columnar import columnar_data  # noqa: E402
from benchmarks.core import BATCH, data, machine  # noqa: E402

DEVICES = 8
SC = 4
VOCAB = 100_000_000
ZIPF_SHARE, ZIPF_Q = 0.4243, 1.00278
PRODUCTION_FEATURES = 8


# ----------------------------------------------------------------- the data
def _zipf(rng: np.random.Generator, n: int, q: float, vocab: int) -> np.ndarray:
    """``n`` ids in ``[0, vocab)`` with P(k) ~ (k + 1)^-q: the inverse CDF of the bounded
    continuous power law (q near 1 would overflow numpy's unbounded ``zipf``)."""
    u = rng.random(n)
    e = 1.0 - q
    k = ((vocab**e - 1.0) * u + 1.0) ** (1.0 / e)
    return np.minimum(k.astype(np.int64) - 1, vocab - 1)


def production_batches(count: int, max_len: int, seed: int = 0) -> tuple[list[Any], float]:
    """``count`` batches of the production-derived distribution, and the share of ids
    cut by ``max_len``."""
    rng = np.random.default_rng(seed)
    batches, cut, total = [], 0, 0
    for _ in range(count):
        ids, weights = {}, {}
        for f in range(PRODUCTION_FEATURES):
            lengths = np.rint(np.exp(rng.normal(1.5, 1.9, BATCH))).astype(np.int64)
            total += int(lengths.sum())
            lengths = np.minimum(lengths, max_len)
            cut_here = int(lengths.sum())
            cut += cut_here
            values = rng.integers(0, VOCAB, cut_here)
            zipf = rng.random(cut_here) < ZIPF_SHARE
            values[zipf] = _zipf(rng, int(zipf.sum()), ZIPF_Q, VOCAB)
            mask = np.arange(max_len) < lengths[:, None]
            dense = np.zeros((BATCH, max_len), np.int32)
            dense[mask] = values
            ids[f"P{f}"], weights[f"P{f}"] = dense, mask.astype(np.float32)
        features = {"dense": {"x": rng.random(BATCH, dtype=np.float32)}, "ids": ids}
        features["weights"] = weights
        batches.append((features, rng.integers(0, 2, BATCH).astype(np.float32)))
    return batches, 1.0 - cut / total


def production_schema(max_len: int) -> Any:
    from tfinput.schema import Dense, Label, MultiHot, Schema, Table

    return Schema(
        features=(
            Dense(name="x"),
            *(
                MultiHot(name=f"P{f}", table=f"t{f}", max_len=max_len)
                for f in range(PRODUCTION_FEATURES)
            ),
        ),
        tables=tuple(
            Table(name=f"t{f}", vocabulary_size=VOCAB, dim=16) for f in range(PRODUCTION_FEATURES)
        ),
        labels=(Label(name="label"),),
    )


def _plan(schema: Any, stacking: str) -> Any:
    from tfinput.sparsecore import SparseCorePlan

    return SparseCorePlan.from_schema(
        schema,
        batch_size=BATCH,
        local_device_count=DEVICES,
        num_sc_per_device=SC,
        stacking=stacking,
        allow_id_dropping=True,
    )


# ----------------------------------------------------------------- the loaders
class ThreadedDataLoader:
    """keras-rs's MLPerf loader (examples/ml_perf/main.py), as the module docstring says."""

    def __init__(self, process_fn: Any, dataset: Any, num_workers: int) -> None:
        self.process_fn = process_fn
        self.dataset = iter(dataset)
        self._next = threading.Lock()
        self._numbers = itertools.count()
        self._buffer: collections.deque[Any] = collections.deque(maxlen=12)
        self._sync = threading.Condition()
        self._stop = False
        self._workers = [
            threading.Thread(target=self._worker_loop, daemon=True) for _ in range(num_workers)
        ]
        for worker in self._workers:
            worker.start()

    def _worker_loop(self) -> None:
        while not self._stop:
            with self._next:
                features, labels = next(self.dataset)
                number = next(self._numbers)
            item = (self.process_fn(features, number), labels)
            with self._sync:
                self._sync.wait_for(lambda: len(self._buffer) < 12 or self._stop)
                self._buffer.append(item)
                self._sync.notify_all()

    def __iter__(self) -> ThreadedDataLoader:
        return self

    def __next__(self) -> Any:
        with self._sync:
            self._sync.wait_for(lambda: self._buffer)
            item = self._buffer.popleft()
            self._sync.notify_all()
            return item

    def stop(self) -> None:
        with self._sync:
            self._stop = True
            self._buffer.clear()
            self._sync.notify_all()
        for worker in self._workers:
            worker.join(timeout=30)


def _timed(it: Any, step_s: float, warmup: int, batches: int) -> tuple[float, float]:
    """Examples/s over the timed batches, and the training thread's share outside the step."""
    for _ in range(warmup):
        next(it)
        time.sleep(step_s)
    outside = 0.0
    t0 = time.perf_counter()
    for _ in range(batches):
        w0 = time.perf_counter()
        next(it)
        outside += time.perf_counter() - w0
        time.sleep(step_s)
    wall = time.perf_counter() - t0
    return batches * BATCH / wall, outside / wall


def _generator(source: Any, plan: Any, step_s: float, warmup: int, batches: int) -> Any:
    def gen() -> Any:
        for number, (features, labels) in enumerate(source()):
            yield plan.preprocess(features, batch_number=number), labels

    return _timed(gen(), step_s, warmup, batches)


def _threaded(source: Any, plan: Any, step_s: float, warmup: int, batches: int, n: int) -> Any:
    def process(features: Any, number: int) -> Any:
        return plan.preprocess(features, batch_number=number)

    loader = ThreadedDataLoader(process, source(), n)
    try:
        return _timed(loader, step_s, warmup, batches)
    finally:
        loader.stop()


def _feed(source: Any, plan: Any, step_s: float, warmup: int, batches: int, n: int) -> Any:
    from tfinput.sparsecore import sparsecore_feed

    with sparsecore_feed(source(), plan, workers=n, prefetch=12) as feed:
        return _timed(feed, step_s, warmup, batches)


# ----------------------------------------------------------------- the runs
def _alone(plan: Any, sample: list[Any], calls: int) -> float:
    walls = []
    for i in range(calls):
        features, _ = sample[i % len(sample)]
        t0 = time.perf_counter()
        plan.preprocess(features, batch_number=i)
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


def _distribution(name: str, source: Any, plan: Any, args: argparse.Namespace) -> dict[str, Any]:
    sample = list(itertools.islice(source(), 4))
    step_s = _alone(plan, sample, args.calls)
    n = args.threads
    variants = {
        "generator (preprocessing on the training thread)": lambda: _generator(
            source, plan, step_s, args.warmup, args.batches
        ),
        f"keras-rs MLPerf ThreadedDataLoader, {n} threads": lambda: _threaded(
            source, plan, step_s, args.warmup, args.batches, n
        ),
        f"sparsecore_feed, {n} workers": lambda: _feed(
            source, plan, step_s, args.warmup, args.batches, n
        ),
    }
    names = list(variants)
    rates: dict[str, list[float]] = {v: [] for v in names}
    shares: dict[str, list[float]] = {v: [] for v in names}
    for r in range(args.rounds):
        for v in names[r % len(names) :] + names[: r % len(names)]:
            rate, share = variants[v]()
            rates[v].append(rate)
            shares[v].append(share)
        print(
            f"{name} round {r + 1}/{args.rounds}: "
            + ", ".join(f"{v.split(',')[0].split(' (')[0]} {rates[v][-1]:,.0f}" for v in names),
            file=sys.stderr,
        )
    base = rates[names[1]]
    return {
        "preprocess_ms": step_s * 1e3,
        "variants": {
            v: {
                "median": statistics.median(rates[v]),
                "min": min(rates[v]),
                "max": max(rates[v]),
                "ratio": _spread([a / b for a, b in zip(rates[v], base)]),
                "share": statistics.median(shares[v]),
            }
            for v in names
        },
    }


def _spread(xs: list[float]) -> list[float]:
    return [statistics.median(xs), min(xs), max(xs)]


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    import tfinput
    from benchmarks.core import criteo_schema
    from tfinput.config import PipelineConfig

    schema = criteo_schema()
    _, _, pq_files = data(root, args.rows)
    pipeline = tfinput.columnar(columnar_data(root, args.rows, pq_files), schema)
    dataset = pipeline.build(PipelineConfig(batch_size=BATCH), repeat=True)
    criteo = _distribution("criteo-like", dataset.as_numpy_iterator, _plan(schema, "auto"), args)
    batches, cut = production_batches(args.production_batches, args.max_len)
    production = _distribution(
        "production-derived",
        lambda: itertools.cycle(batches),
        _plan(production_schema(args.max_len), "none"),
        args,
    )
    ids = statistics.mean(
        float(sum(w.sum() for w in f["weights"].values())) / BATCH for f, _ in batches
    )
    return {
        "machine": machine(),
        "rows": args.rows,
        "rounds": args.rounds,
        "threads": args.threads,
        "distributions": {"criteo-like": criteo, "production-derived": production},
        "production": {"cut_share": cut, "ids_per_row": ids, "max_len": args.max_len},
    }


def markdown(res: dict[str, Any], args: argparse.Namespace) -> str:
    section = args.section
    prod = res["production"]
    lines = [
        f"<!-- {section}:begin (benchmarks/sparsecore_loaders.py writes this section) -->",
        "## SparseCore preprocessing: the feed against the loader users write",
        "",
        f"Machine: {res['machine']}.",
        "",
        "Method (`benchmarks/sparsecore_loaders.py`, its docstring has the details): the "
        "generator pattern, keras-rs's MLPerf `ThreadedDataLoader` (re-created: threads "
        "calling the preprocessing into a `deque(maxlen=12)`) and `sparsecore_feed`, "
        f"{res['threads']} threads each, with a simulated TPU step as long as one batch's "
        f"preprocessing; global batch {BATCH} = {DEVICES} devices x {BATCH // DEVICES}, {SC} "
        f"SparseCores per device, jax-tpu-embedding's default limits; {res['rounds']} "
        f"interleaved rounds, order rotated, {args.warmup} warm-up and {args.batches} timed "
        "batches each. Criteo-like: "
        f"{res['rows']:,} rows as columnar records. Production-derived: "
        f"{PRODUCTION_FEATURES} multi-hot features, {prod['ids_per_row']:.0f} ids per row "
        f"over all of them, {prod['cut_share']:.1%} of the ids cut at max_len "
        f"{prod['max_len']}. Ratio: median of per-round ratios to the threaded loader "
        "(min-max). Training thread's share: the part of its wall time outside the step.",
        "",
        "| data | preprocessing per batch | variant | examples/s (min-max) | x threaded loader "
        "| training thread's share |",
        "|---|---|---|---|---|---|",
    ]
    for name, d in res["distributions"].items():
        for v, r in d["variants"].items():
            q = r["ratio"]
            lines.append(
                f"| {name} | {d['preprocess_ms']:.1f} ms | {v} | {r['median']:,.0f} "
                f"({r['min']:,.0f}-{r['max']:,.0f}) | {q[0]:.2f} ({q[1]:.2f}-{q[2]:.2f}) | "
                f"{r['share']:.1%} |"
            )
    lines.append(f"<!-- {section}:end -->")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--calls", type=int, default=8)
    p.add_argument("--threads", type=int, default=2, help="threads of each loader (default 2)")
    p.add_argument("--max-len", type=int, default=256, help="production ids per row kept")
    p.add_argument("--production-batches", type=int, default=8, help="generated, then cycled")
    p.add_argument("--section", default="sparsecore-loaders", help="RESULTS.md section")
    p.add_argument("--data-dir", help="keep the data here (default: a temporary directory)")
    p.add_argument("--write", action="store_true", help="replace the section in RESULTS.md")
    p.add_argument("--json", action="store_true")
    args = parse_args(
        p,
        argv,
        smoke=dict(
            rows=8_192, rounds=1, warmup=1, batches=2, calls=1, max_len=16, production_batches=2
        ),
    )
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
