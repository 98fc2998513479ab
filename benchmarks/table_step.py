"""The built-in ranking step's time against the rows of its embedding table.

    python benchmarks/table_step.py              # print the markdown section
    python benchmarks/table_step.py --write      # also replace it in RESULTS.md
    python benchmarks/table_step.py --quick      # small tables, few rounds: checks the script

A scaling measurement, not a workload: one `tfinput.models.ranking_model` per table
size (10k, 100k, 1M, 10M rows), each with one table at the dim `tfinput schema infer`
gives it (``6 · rows^¼`` rounded to 4, capped at 128) read by ``--features`` single-id
features, plus 13 dense features; batches of 4,096 rows with uniform random ids,
generated up front (no input pipeline). One table, not Criteo's 26: 10M x 128 float32
is 5 GB per table, and every size is held in memory at once so that they can be
interleaved. Variants side by side (``--variants``):

* ``sparse``: the model as built (`tfinput.models.SparseTableAdam`: row-wise Adagrad
  on the rows a batch touches, Adam on the dense layers; low-rank cross layers);
* ``full``: the same with full-rank cross layers (``cross_projection_dim=None``), up
  to ``--full-max-rows``;
* ``dense``: the model as built compiled with ``keras.optimizers.Adam`` (its two slots
  updated in full every step), up to ``--dense-max-rows`` (3x the table in memory).

Each backend runs in its own process (``KERAS_BACKEND=tensorflow`` and ``jax``; JAX on
CPU), at most ``--jax-max-rows`` rows on JAX. Per backend: every model warms up
(compiles), then rounds: each model in turn runs ``--steps`` ``train_on_batch`` calls,
timed together; a figure is the median over rounds of seconds per step, with min-max.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402

SIZES = (10_000, 100_000, 1_000_000, 10_000_000)
BATCH = 4096
DENSE_FEATURES = 13


def _dim(rows: int) -> int:
    """The inferred dim, or ``--dim`` when given (``FIXED_DIM``)."""
    from tfinput._src.applications.inference._decide import _dim as inferred

    return FIXED_DIM[0] or inferred(rows)


FIXED_DIM = [0]


def _schema(rows: int, features: int):
    from tfinput.schema import Categorical, Dense, Label, Schema, Table

    return Schema(
        features=(
            *(Dense(name=f"I{i}") for i in range(DENSE_FEATURES)),
            *(Categorical(name=f"C{i}", table="t") for i in range(features)),
        ),
        tables=(Table(name="t", vocabulary_size=rows, dim=_dim(rows)),),
        labels=(Label(name="label"),),
    )


def _batches(rows: int, features: int, n: int, seed: int) -> list:
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = {
            "dense": {f"I{i}": rng.random(BATCH, dtype=np.float32) for i in range(DENSE_FEATURES)},
            "ids": {f"C{i}": rng.integers(0, rows, BATCH, dtype=np.int64) for i in range(features)},
        }
        out.append((x, rng.integers(0, 2, BATCH).astype(np.float32)))
    return out


VARIANTS = {
    "sparse": "sparse (built-in)",
    "full": "full-rank cross",
    "dense": "dense (Keras Adam)",
}


def _model(rows: int, features: int, optimizer: str):
    import keras

    from tfinput import models

    kwargs = {"cross_projection_dim": None} if optimizer == "full" else {}
    model = models.ranking_model(_schema(rows, features), jit_compile=True, **kwargs)
    if optimizer == "dense":
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.BinaryCrossentropy(from_logits=True),
            jit_compile=True,
        )
    return model


def measure(args: argparse.Namespace) -> dict:
    """Seconds per step by (optimizer, rows), the models interleaved round by round."""
    import keras

    backend = keras.config.backend()
    cap = args.jax_max_rows if backend == "jax" else max(args.sizes)
    runs = {}
    for rows in args.sizes:
        if rows > cap:
            continue
        for opt in args.variants:
            if rows > {"dense": args.dense_max_rows, "full": args.full_max_rows}.get(opt, rows):
                continue
            batches = _batches(rows, args.features, 4, seed=rows)
            model = _model(rows, args.features, opt)
            for x, y in batches[:2]:  # builds, compiles
                model.train_on_batch(x, y)
            runs[f"{opt} {rows}"] = (model, batches, [])
            print(f"{backend}: built {opt} {rows:,}", file=sys.stderr, flush=True)
    for r in range(args.rounds):
        for key, (model, batches, times) in runs.items():
            start = time.perf_counter()
            for i in range(args.steps):
                x, y = batches[i % len(batches)]
                float(model.train_on_batch(x, y)[0])
            times.append((time.perf_counter() - start) / args.steps)
            print(f"{backend} round {r}: {key}: {times[-1]:.4f} s/step", file=sys.stderr)
    return {"backend": backend, "times": {k: v[2] for k, v in runs.items()}}


def section(results: list[dict], args: argparse.Namespace, took: float) -> str:
    from benchmarks.core import machine

    lines = []
    for res in results:
        t = res["times"]
        first = min(args.sizes)
        base = {
            o: statistics.median(t[f"{o} {first}"]) for o in args.variants if f"{o} {first}" in t
        }
        for rows in args.sizes:
            cells = []
            for opt in args.variants:
                ts = t.get(f"{opt} {rows}")
                if not ts:
                    cells.append("not run")
                    continue
                med = statistics.median(ts)
                cells.append(
                    f"{med * 1e3:,.0f} ms ({min(ts) * 1e3:,.0f}-{max(ts) * 1e3:,.0f}), "
                    f"{med / base[opt]:.2f}x"
                )
            lines.append(
                f"| {res['backend']} | {rows:,} | {_dim(rows)} | "
                f"{rows * _dim(rows) * 4 / 1e6:,.0f} MB | {' | '.join(cells)} |"
            )
    return "\n".join(
        [
            "<!-- table-step:begin (benchmarks/table_step.py writes this section) -->",
            "## The ranking step against its tables' rows",
            "",
            f"Machine: {machine()}.",
            "",
            f"Method: `python benchmarks/table_step.py` ({took:.0f} s): one "
            f"`ranking_model` per size, one table at "
            f"{f'dim {args.dim}' if args.dim else 'the inferred dim'} read by "
            f"{args.features} single-id features plus {DENSE_FEATURES} dense features "
            f"(one table, not 26: 10M x 128 float32 is 5 GB), batch {BATCH}, uniform random "
            "ids, `train_on_batch` under XLA; every model warmed up, then "
            f"{args.rounds} rounds, each running every model in turn for {args.steps} "
            "steps; median seconds per step over rounds (min-max), and its ratio to the "
            f"smallest table's. `sparse`: the built-in model (`SparseTableAdam`, "
            f"low-rank cross layers); `full`: its cross layers full-rank, run up to "
            f"{args.full_max_rows:,} rows; "
            f"`dense`: the built-in model under `keras.optimizers.Adam`, run up to "
            f"{args.dense_max_rows:,} rows (its slots are twice the table); JAX (CPU) up "
            f"to {args.jax_max_rows:,} rows.",
            "",
            "| backend | rows | dim | table | "
            + " | ".join(VARIANTS[v] for v in args.variants)
            + " |",
            "|---|---|---|---|" + "---|" * len(args.variants),
            *lines,
            "<!-- table-step:end -->",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--features", type=int, default=2, help="single-id features on the table")
    p.add_argument("--dim", type=int, default=0, help="one dim for every size (0: inferred)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=3, help="timed steps per model per round")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    p.add_argument("--dense-max-rows", type=int, default=1_000_000)
    p.add_argument("--full-max-rows", type=int, default=1_000_000)
    p.add_argument("--jax-max-rows", type=int, default=1_000_000)
    p.add_argument("--backends", nargs="+", default=["tensorflow", "jax"])
    p.add_argument("--quick", action="store_true", help="10k and 100k rows, 2 rounds")
    p.add_argument("--write", action="store_true", help="update RESULTS.md")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parse_args(
        p,
        argv,
        smoke=dict(sizes=[1_000], rounds=1, steps=1, backends=["jax"], variants=["sparse"]),
    )
    FIXED_DIM[0] = args.dim
    if args.quick:
        args.sizes, args.rounds, args.steps = [10_000, 100_000], 2, 2
    if args.child:
        print(json.dumps(measure(args)))
        return 0
    start = time.perf_counter()
    results = []
    for backend in args.backends:
        if args.smoke and backend == os.environ.get("KERAS_BACKEND"):
            results.append(measure(args))  # --smoke: this process's backend, no child
            continue
        env = {**os.environ, "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu"}
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        child = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--write"]
        out = subprocess.run(
            [sys.executable, __file__, *child, "--child"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    text = section(results, args, time.perf_counter() - start)
    print(text)
    if args.write:
        write_section("table-step", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
