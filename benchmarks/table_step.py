"""The built-in ranking step against the rows of its embedding tables, beside the raw
gather/scatter floor on the same ids.

    python benchmarks/table_step.py              # print the markdown section
    python benchmarks/table_step.py --write      # also replace it in RESULTS.md
    python benchmarks/table_step.py --quick      # 10k and 100k rows, few rounds
    git worktree add /tmp/prev 8ea15a4           # then, before and after in one run:
    python benchmarks/table_step.py --trees . /tmp/prev --passes 2

The shape is the criteo-like one (`tfinput.testing.criteo_like_schema(vocabulary_size=V,
dim=16)`: 13 dense features, 26 single ids and 4 multi-hot lists of up to 20 ids, one
table each: 30 tables) at ``--sizes`` rows per table (10k, 100k, 1M), and
``--big-tables`` tables (2 single ids, 1 multi-hot list) at ``--big-rows`` (10M) with
their own 10k baseline: 30 tables of 10M rows are 19 GB. Batches of 4,096 rows,
generated up front (no input pipeline), with two kinds of ids (``--ids``): ``zipf``,
drawn as `tfinput.testing.generate` draws them (Zipf(1.2) modulo the rows: most ids
small, the same rows again and again), and ``uniform`` over the whole table (every
lookup a cache miss: the memory latency a sparse step cannot avoid).

What runs on the same batches, side by side, in every round:

* ``step``: `tfinput.models.ranking_model(schema)` (``jit_compile="auto"``, as ``tfinput
  tune --step ranking`` builds it: XLA on JAX, not on a CPU-only TensorFlow), one
  ``train_on_batch`` per batch;
* ``floor``: the raw work a sparse step cannot skip, per table on the same ids: gather
  the batch's rows, scatter-add a row accumulator, gather it, scatter-subtract the rows
  (TensorFlow: a ``tf.function`` on resource variables; JAX: jitted, buffers donated);
* ``compiled`` (JAX): the model's jitted train step alone, on batches already on the
  device and a copy of its state: ``step`` less Keras's call and transfers.

Each backend runs in a child process (``KERAS_BACKEND=tensorflow`` and ``jax``; JAX on
CPU), one per shape; ``--trees`` names tfinput checkouts whose models are measured
(each child imports ``tfinput`` from its tree: before and after a change in one run,
the trees' children in turn, ``--passes`` times). In a child every model and floor
warms up, then rounds: each runs ``--steps`` steps on each kind of ids, timed
together; a figure is the median over rounds (and passes) of seconds per step, with
min-max. The check: from the smallest size to 1M rows, the step's growth in ms is at
most 1.5x the floor's growth plus a quarter of the smallest step (noise). A shape whose
memory estimate exceeds what the machine has available is not run, and says so.
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

SIZES = (10_000, 100_000, 1_000_000)
DIM = 16
DENSE_FEATURES = 13
MAX_LEN = 20
IDS = ("zipf", "uniform")
LABEL = {"step": "built-in step", "floor": "floor"}


def _schema(rows: int, tables: int):
    from tfinput import testing

    multi = 4 if tables == 30 else max(1, round(tables * 4 / 30))
    return testing.criteo_like_schema(
        n_dense=DENSE_FEATURES,
        n_categorical=tables - multi,
        n_multi_hot=multi,
        vocabulary_size=rows,
        dim=DIM,
        max_len=MAX_LEN,
    )


def _batches(schema, rows: int, kind: str, n: int, batch: int, seed: int) -> list:
    """``n`` batches in the per-feature layout the pipelines emit (multi-hot lists padded
    with id 0 and weight 0)."""
    import numpy as np

    from tfinput.schema import Categorical, MultiHot

    rng = np.random.default_rng(seed)

    def draw(shape):
        if kind == "zipf":
            return (rng.zipf(1.2, shape).astype(np.int64) - 1) % rows
        return rng.integers(0, rows, shape, dtype=np.int64)

    out = []
    for _ in range(n):
        x = {"dense": {}, "ids": {}, "weights": {}}
        for f in schema.dense:
            x["dense"][f.name] = np.log1p(rng.lognormal(1.0, 1.5, batch)).astype(np.float32)
        for f in schema.categorical:
            if isinstance(f, MultiHot):
                mask = np.arange(f.max_len) < rng.integers(0, f.max_len, batch)[:, None]
                x["ids"][f.name] = np.where(mask, draw((batch, f.max_len)), 0)
                x["weights"][f.name] = mask.astype(np.float32)
            elif isinstance(f, Categorical):
                x["ids"][f.name] = draw(batch)
        out.append((x, rng.integers(0, 2, batch).astype(np.float32)))
    return out


def _table_ids(schema, x: dict) -> dict:
    """Each table's ids in a batch, every feature reading it flattened, as int32."""
    import numpy as np

    by_table: dict[str, list] = {}
    for f in schema.categorical:
        by_table.setdefault(f.table, []).append(np.reshape(x["ids"][f.name], -1))
    return {t: np.concatenate(v).astype(np.int32) for t, v in by_table.items()}


def _floor(schema, backend: str):
    """``run(table_ids) -> float``: the floor's step on one batch's ids, synchronised."""
    import numpy as np

    rng = np.random.default_rng(0)
    init = {
        t.name: rng.uniform(-0.05, 0.05, (t.vocabulary_size, t.dim)).astype(np.float32)
        for t in schema.tables
    }
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        state = (
            {t: jnp.asarray(v) for t, v in init.items()},
            {t: jnp.zeros((v.shape[0], 1), jnp.float32) for t, v in init.items()},
        )

        def step(tables, accs, ids):
            total = 0.0
            for t, i in ids.items():
                g = jnp.take(tables[t], i, axis=0) * 0.01
                accs[t] = accs[t].at[i].add(jnp.mean(g * g, axis=1, keepdims=True))
                a = jnp.take(accs[t], i, axis=0)
                tables[t] = tables[t].at[i].add(-1e-3 * g / (jnp.sqrt(a) + 1e-8))
                total = total + jnp.sum(a)
            return tables, accs, total

        jitted = jax.jit(step, donate_argnums=(0, 1))

        def run(ids):
            nonlocal state
            tables, accs, total = jitted(*state, ids)
            state = (tables, accs)
            return float(total)

        return run

    import tensorflow as tf

    tables = {t: tf.Variable(v) for t, v in init.items()}
    accs = {t: tf.Variable(tf.zeros((v.shape[0], 1))) for t, v in init.items()}

    @tf.function
    def tf_step(ids):
        total = tf.constant(0.0)
        for t, i in ids.items():
            g = tf.gather(tables[t], i) * 0.01  # ResourceGather: the rows only
            accs[t].scatter_add(tf.IndexedSlices(tf.reduce_mean(g * g, 1, keepdims=True), i))
            a = tf.gather(accs[t], i)
            tables[t].scatter_sub(tf.IndexedSlices(1e-3 * g / (tf.sqrt(a) + 1e-8), i))
            total += tf.reduce_sum(a)
        return total

    return lambda ids: float(tf_step(ids))


def _compiled(model, batches):
    """``run(i)``: the model's jitted train step alone (JAX) on batches already on the
    device, on a copy of its state (what ``train_on_batch`` adds to it is the call)."""
    import jax
    import jax.numpy as jnp

    variables = (
        model.trainable_variables,
        model.non_trainable_variables,
        model.optimizer.variables,
        model.metrics_variables,
    )
    box = [tuple([jnp.copy(v.value) for v in vs] for vs in variables)]
    data = [jax.device_put(jax.tree_util.tree_map(jnp.asarray, b)) for b in batches]
    jitted = jax.jit(model.train_step, donate_argnums=0)

    def run(i):
        logs, box[0] = jitted(box[0], data[i % len(data)])
        return float(jax.tree_util.tree_leaves(logs)[0])

    return run


def measure(args: argparse.Namespace) -> dict:
    """Seconds per step by ``"{step|floor|compiled} {ids} {rows}"``, interleaved round
    by round (``compiled``: JAX only)."""
    import keras

    from tfinput import models

    backend = keras.config.backend()
    runs: dict[str, tuple] = {}
    for rows in args.sizes:
        schema = _schema(rows, args.tables)
        model = models.ranking_model(schema)
        floor = _floor(schema, backend)
        for kind in args.ids:
            batches = _batches(schema, rows, kind, 4, args.batch, seed=rows + len(kind))
            ids = [_table_ids(schema, x) for x, _ in batches]

            def step(i, model=model, batches=batches):
                x, y = batches[i % len(batches)]
                return float(model.train_on_batch(x, y)[0])

            def raw(i, floor=floor, ids=ids):
                return floor(ids[i % len(ids)])

            for fn in (step, raw):  # builds, traces, compiles
                fn(0)
                fn(1)
            runs[f"step {kind} {rows}"] = (step, [])
            runs[f"floor {kind} {rows}"] = (raw, [])
            if backend == "jax":
                runs[f"compiled {kind} {rows}"] = (_compiled(model, batches), [])
                runs[f"compiled {kind} {rows}"][0](0)
        print(f"{backend}: built {rows:,} x {args.tables}", file=sys.stderr, flush=True)
    for r in range(args.rounds):
        for key, (fn, times) in runs.items():
            start = time.perf_counter()
            for i in range(args.steps):
                fn(i)
            times.append((time.perf_counter() - start) / args.steps)
            print(f"{backend} round {r}: {key}: {times[-1] * 1e3:.1f} ms", file=sys.stderr)
    return {"times": {k: v[1] for k, v in runs.items()}}


def _estimate_gb(sizes: list[int], tables: int, backend: str) -> float:
    """Memory a child holds: model tables, accumulators and the floor's copies (twice
    more on JAX: the compiled step's copy, and Keras's step's table-sized gradient)."""
    per_row = tables * (DIM + 1) * 4 * 2
    return sum(sizes) * per_row * (3.0 if backend == "jax" else 1.2) / 1e9


def _available_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1e6
    except OSError:
        pass
    return float("inf")


def _label(tree: Path) -> str:
    """The tree's commit, ``+`` when it has uncommitted changes."""
    git = ["git", "-C", str(tree)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    return (head.stdout.strip() or tree.name) + ("+" if dirty.stdout.strip() else "")


def _child(args, backend: str, tree: Path, sizes: list[int], tables: int) -> dict:
    """One child process's measurement of one tree on one backend and shape."""
    env = {**os.environ, "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    cmd = [sys.executable, __file__, "--child", "--tree", str(tree), "--tables", str(tables)]
    cmd += ["--sizes", *map(str, sizes), "--ids", *args.ids, "--batch", str(args.batch)]
    cmd += ["--rounds", str(args.rounds), "--steps", str(args.steps)]
    load = round(os.getloadavg()[0], 1)
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["load"] = (load, round(os.getloadavg()[0], 1))
    res["seconds"] = time.perf_counter() - start
    return res


def run_all(args: argparse.Namespace) -> list[dict]:
    """Every (backend, shape, tree) child, the trees in turn, ``--passes`` times."""
    shapes = [(list(args.sizes), args.tables)]
    if args.big_rows and args.big_tables:
        shapes.append(([min(args.sizes), args.big_rows], args.big_tables))
    trees = [Path(t).resolve() for t in args.trees]
    results = []
    for backend in args.backends:
        for sizes, tables in shapes:
            need, have = _estimate_gb(sizes, tables, backend), _available_gb()
            base = {"backend": backend, "tables": tables, "sizes": sizes}
            if need > 0.8 * have:
                results.append(
                    {**base, "skipped": f"needs about {need:.1f} GB, {have:.1f} GB available"}
                )
                print(
                    f"{backend} {tables} tables: skipped ({results[-1]['skipped']})",
                    file=sys.stderr,
                )
                continue
            for _ in range(args.passes):
                for tree in trees:
                    if args.smoke and backend == os.environ.get("KERAS_BACKEND"):
                        res = {**measure(_for(args, sizes, tables)), "load": None, "seconds": 0}
                    else:
                        res = _child(args, backend, tree, sizes, tables)
                    results.append({**base, "tree": _label(tree), **res})
    return results


def _for(args: argparse.Namespace, sizes: list[int], tables: int) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "sizes": sizes, "tables": tables})


def _merge(results: list[dict]) -> dict:
    """(backend, tables, tree) -> key -> every round's seconds, over passes."""
    merged: dict = {}
    for res in results:
        if "skipped" in res:
            continue
        slot = merged.setdefault((res["backend"], res["tables"], res["tree"]), {})
        for key, times in res["times"].items():
            slot.setdefault(key, []).extend(times)
    return merged


def _ms(ts: list[float]) -> str:
    med, lo, hi = (x * 1e3 for x in (statistics.median(ts), min(ts), max(ts)))
    return f"{med:,.1f} ({lo:,.1f}-{hi:,.1f})" if hi < 100 else f"{med:,.0f} ({lo:,.0f}-{hi:,.0f})"


def section(results: list[dict], args: argparse.Namespace, took: float) -> str:
    from benchmarks.core import machine

    lines, verdicts = [], []
    for (backend, tables, tree), t in _merge(results).items():
        sizes = sorted({int(k.split()[-1]) for k in t})
        first = sizes[0]
        for kind in args.ids:
            med = {
                (v, n): statistics.median(t[f"{v} {kind} {n}"])
                for v in ("step", "floor")
                for n in sizes
            }
            for n in sizes:
                growth = bound = ok = ""
                if n != first:
                    step_g = (med["step", n] - med["step", first]) * 1e3
                    floor_g = (med["floor", n] - med["floor", first]) * 1e3
                    limit = 1.5 * floor_g + 0.25 * med["step", first] * 1e3
                    growth = f"{step_g:+,.0f} / {floor_g:+,.0f}"
                    bound = f"{limit:,.0f}"
                    ok = "yes" if step_g <= limit else "**no**"
                    if n == 1_000_000 or n == max(sizes):
                        verdicts.append(
                            f"- {backend}, {tables} tables, {kind} ids, {tree}: {first:,} -> "
                            f"{n:,} rows, the step grows {step_g:+,.0f} ms, the floor "
                            f"{floor_g:+,.0f} ms: {'within' if ok == 'yes' else 'beyond'} "
                            f"the bound of {limit:,.0f} ms"
                        )
                compiled = t.get(f"compiled {kind} {n}")
                lines.append(
                    f"| {backend} | {tables} | {n:,} | {kind} | {tree} | "
                    f"{_ms(t[f'step {kind} {n}'])} | {_ms(compiled) if compiled else ''} | "
                    f"{_ms(t[f'floor {kind} {n}'])} | {growth} | {bound} | {ok} |"
                )
    skipped = [
        f"- {r['backend']}, {r['tables']} tables at {', '.join(f'{n:,}' for n in r['sizes'])} "
        f"rows: not run, {r['skipped']}"
        for r in results
        if "skipped" in r
    ]
    loads = sorted(
        {
            f"{r['backend']} {r['tables']} tables {r['tree']}: {r['load']}"
            for r in results
            if r.get("load")
        }
    )
    big = ""
    if args.big_rows and args.big_tables:
        big = f", and {args.big_tables} tables at {args.big_rows:,} rows beside their smallest size"
    return "\n".join(
        [
            "<!-- table-step:begin (benchmarks/table_step.py writes this section) -->",
            "## The ranking step against its tables' rows",
            "",
            f"Machine: {machine()}.",
            "",
            f"Method: `python benchmarks/table_step.py` ({took:.0f} s; "
            f"`--trees {' '.join(args.trees)}` `--passes {args.passes}`): the criteo-like "
            f"shape (`criteo_like_schema(vocabulary_size=V, dim={DIM})`: {DENSE_FEATURES} "
            f"dense features, single ids and multi-hot lists of up to {MAX_LEN} ids, one "
            f"table each: 26 + 4 at 30 tables, 2 + 1 at 3){big}; batch {args.batch}; "
            "ids `zipf` (as `tfinput.testing.generate` draws them) and `uniform` over the "
            "table. `step`: `tfinput.models.ranking_model(schema)` as `tune --step ranking` "
            "builds it, `train_on_batch`; `floor`: per table on the same ids, gather the "
            "rows, scatter-add a row accumulator, gather it, scatter-subtract the rows "
            "(TensorFlow: `tf.function` on resource variables; JAX: jitted, donated); "
            "`compiled step` (JAX): the model's jitted train step alone, on batches "
            "already on the device (`train_on_batch` adds the call and the transfers). "
            f"Every model and floor warmed up, then {args.rounds} rounds of {args.steps} "
            "steps each on each kind of ids, interleaved; ms per step, median over rounds "
            "and passes (min-max). Growth: the step's and the floor's, from the smallest "
            "size; bound: 1.5x the floor's growth plus a quarter of the smallest step.",
            "",
            "| backend | tables | rows | ids | tree | step, ms | compiled step, ms | floor, ms "
            "| growth (step / floor), ms | bound, ms | within |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *lines,
            "",
            *verdicts,
            *skipped,
            "",
            "Load average (1 min) at the start and end of each child: " + "; ".join(loads)
            if loads
            else "",
            "<!-- table-step:end -->",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="rows per table")
    p.add_argument("--tables", type=int, default=30, help="tables of the main shape")
    p.add_argument("--big-rows", type=int, default=10_000_000, help="0: no big shape")
    p.add_argument("--big-tables", type=int, default=3)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--ids", nargs="+", choices=IDS, default=list(IDS))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=3, help="timed steps per round")
    p.add_argument("--backends", nargs="+", default=["tensorflow", "jax"])
    p.add_argument(
        "--trees", nargs="+", default=[str(HERE.parent)], help="tfinput checkouts to measure"
    )
    p.add_argument("--passes", type=int, default=1, help="times each tree's child runs")
    p.add_argument("--quick", action="store_true", help="10k and 100k rows, 2 rounds")
    p.add_argument("--write", action="store_true", help="update RESULTS.md")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tree", help=argparse.SUPPRESS)
    args = parse_args(
        p,
        argv,
        smoke=dict(
            sizes=[1_000, 2_000],
            tables=3,
            big_rows=0,
            batch=256,
            ids=["zipf"],
            rounds=1,
            steps=1,
            backends=["jax"],
        ),
    )
    if args.quick:
        args.sizes, args.big_rows, args.rounds, args.steps = [10_000, 100_000], 0, 2, 2
    if args.child:
        sys.path.insert(0, args.tree)  # the tree's tfinput, before any other
        print(json.dumps(measure(args)))
        return 0
    start = time.perf_counter()
    results = run_all(args)
    text = section(results, args, time.perf_counter() - start)
    print(text)
    if args.write:
        write_section("table-step", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
