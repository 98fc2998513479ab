"""Core benchmark: Parquet vs TFRecord at the same config, and tfinput's overhead
against equivalent hand-written tf.data code.

    python benchmarks/core.py              # measure and print the markdown section
    python benchmarks/core.py --write      # also replace the section in RESULTS.md

Workload: criteo-like, 400k rows (13 dense, 26 single ids, 4 multi-hot lists of 0-19
ids), 8 files, batch 4096. Method: the variants are measured in rounds, each round
visiting every variant once in a rotating order (interleaving cancels drift on this
noisy machine); each measurement builds a fresh iterator over an endlessly repeated
dataset, skips ``--warmup`` batches, then times ``--batches`` batches. The figure is
the median over rounds; the spread is min-max and the coefficient of variation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402

ROWS = 400_000
FILES = 8
BATCH = 4096


#: ``--smoke``'s criteo-like schema: every kind of feature, a few of each, small tables
#: (building a pipeline traces, and a model compiles, per feature).
SMOKE_SCHEMA = dict(n_dense=4, n_categorical=4, n_multi_hot=1, vocabulary_size=1_000)


def criteo_schema(**kwargs: Any) -> Any:
    """``testing.criteo_like_schema(**kwargs)``; in a ``--smoke`` run, `SMOKE_SCHEMA`'s
    few features (``kwargs`` still win)."""
    from benchmarks import _results
    from tfinput import testing

    smoke = SMOKE_SCHEMA if _results.smoke_active() else {}
    return testing.criteo_like_schema(**{**smoke, **kwargs})


def data(root: Path, rows: int) -> tuple[Any, list[str], list[str]]:
    from tfinput import testing

    schema = criteo_schema()
    tf_dir, pq_dir = root / f"criteo-{rows}" / "tfrecord", root / f"criteo-{rows}" / "parquet"
    if not (tf_dir.exists() and pq_dir.exists()):
        cols = testing.generate(schema, rows, seed=0)
        testing.write_tfrecord(tf_dir, schema, rows=rows, files=FILES, columns=cols)
        testing.write_parquet(pq_dir, schema, rows=rows, files=FILES, columns=cols)
    return schema, sorted(map(str, tf_dir.iterdir())), sorted(map(str, pq_dir.iterdir()))


def every_format(schema: Any, out: Path, rows: int) -> dict[str, list[str]]:
    """``rows`` rows of ``schema`` as TFRecord, Parquet and columnar records under
    ``out`` (the same rows, `FILES` files each; written once, then reused): the files
    of each format."""
    from tfinput import testing

    if not (out / "done").exists():
        cols = testing.generate(schema, rows, seed=0)
        testing.write_tfrecord(out / "tfrecord", schema, rows=rows, files=FILES, columns=cols)
        testing.write_parquet(out / "parquet", schema, rows=rows, files=FILES, columns=cols)
        testing.write_columnar(out / "columnar", schema, rows=rows, files=FILES, columns=cols)
        (out / "done").touch()
    return {
        fmt: sorted(str(p) for p in (out / fmt).iterdir() if p.suffix != ".json")
        for fmt in ("tfrecord", "parquet")
    } | {"columnar": sorted(map(str, (out / "columnar").glob("*.tfcol")))}


def _handwritten_parse(schema: Any, config: Any) -> Any:
    """The map function a careful user writes by hand for the same output."""
    import tensorflow as tf

    from tfinput.schema import Categorical, Dense, MultiHot

    spec: dict[str, Any] = {}
    for f in schema.features:
        if isinstance(f, Dense):
            spec[f.name] = tf.io.FixedLenFeature([], tf.float32, 0.0)
        elif isinstance(f, Categorical):
            spec[f.name] = tf.io.FixedLenFeature([], tf.int64)
        else:
            spec[f.name] = tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int64)
    spec["label"] = tf.io.FixedLenFeature([], tf.float32)
    batch = config.batch_size

    def parse(serialized: Any) -> Any:
        ex = tf.io.parse_example(serialized, spec)
        dense, ids, weights = {}, {}, {}
        for f in schema.features:
            x = ex[f.name]
            if isinstance(f, Dense):
                dense[f.name] = tf.math.log1p(tf.maximum(x, 0.0))
            elif isinstance(f, Categorical):
                ids[f.name] = tf.cast(x, tf.int32)
            elif isinstance(f, MultiHot):
                x = x[:, : f.max_len]
                ids[f.name] = tf.cast(x, tf.int32).to_tensor(0, shape=[batch, f.max_len])
                weights[f.name] = tf.ones_like(x, tf.float32).to_tensor(
                    0.0, shape=[batch, f.max_len]
                )
        return {"dense": dense, "ids": ids, "weights": weights}, ex["label"]

    return parse


def handwritten(files: list[str], schema: Any, config: Any) -> Any:
    """What a careful user writes by hand for the same output (no validation)."""
    import tensorflow as tf

    parse = _handwritten_parse(schema, config)
    ds = tf.data.Dataset.from_tensor_slices(files).interleave(
        tf.data.TFRecordDataset,
        cycle_length=config.interleave_cycle_length,
        num_parallel_calls=None
        if config.interleave_parallelism == 1
        else config.interleave_parallelism,
    )
    ds = ds.batch(config.batch_size, drop_remainder=True)
    ds = ds.map(parse, num_parallel_calls=config.map_parallelism)
    return ds.prefetch(config.prefetch)


def cpu_cost(
    files: list[str],
    schema: Any,
    rounds: int = 15,
    calls: int = 20,
    *,
    one_thread: bool = True,
    autograph: bool = True,
) -> dict[str, Any]:
    """CPU milliseconds per batch of parse + transform, tfinput vs hand-written, on one
    thread, calls interleaved round by round (run in a fresh process: the thread
    counts must be set before TensorFlow starts; ``one_thread=False`` leaves them).
    ``autograph=False`` traces both functions as written: the same graphs (neither has
    Python control flow on tensors), traced in a tenth of the time."""
    import tensorflow as tf

    if one_thread:
        tf.config.threading.set_inter_op_parallelism_threads(1)
        tf.config.threading.set_intra_op_parallelism_threads(1)
    from tfinput.config import PipelineConfig
    from tfinput.transforms import parse_spec, transform_batch

    records = next(iter(tf.data.TFRecordDataset(files).batch(BATCH)))
    spec = parse_spec(schema)
    ours = tf.function(
        lambda s: transform_batch(tf.io.parse_example(s, spec), schema, batch_size=BATCH),
        autograph=autograph,
    )
    # the hand-written map function, taken from the hand-written pipeline
    theirs = tf.function(
        _handwritten_parse(schema, PipelineConfig(batch_size=BATCH)), autograph=autograph
    )

    def cost(fn: Any) -> float:
        start = time.process_time()
        for _ in range(calls):
            fn(records)
        return (time.process_time() - start) / calls * 1e3

    cost(ours), cost(theirs)
    a, b = [], []
    for _ in range(rounds):
        a.append(cost(ours))
        b.append(cost(theirs))
    return {
        "tfinput_ms": statistics.median(a),
        "handwritten_ms": statistics.median(b),
        "paired": [x / y - 1 for x, y in zip(a, b)],
        "rounds": rounds,
        "calls": calls,
    }


def rate(make: Any, warmup: int, batches: int) -> float:
    it = iter(make().repeat())
    for _ in range(warmup):
        next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * BATCH / (time.perf_counter() - start)


def summarize(values: list[float]) -> dict[str, float]:
    med = statistics.median(values)
    cv = statistics.pstdev(values) / statistics.mean(values) if len(values) > 1 else 0.0
    return {"median": med, "min": min(values), "max": max(values), "cv": cv}


def machine() -> str:
    """One line for the results table, from `tfinput._src.measurement.probes.machine`."""
    from tfinput._src.measurement.probes import machine as probe

    m = probe()
    return (
        f"{m['cpu_model']}, {m['cpu_count']} cores; Python {m['python']}, TensorFlow "
        f"{m['tensorflow']}, pyarrow {m['pyarrow']}, {m['platform']}; load average at start "
        f"{m['load_average']}"
    )


def _cpu_cost_process(args: argparse.Namespace) -> dict[str, Any]:
    """`cpu_cost` in a fresh process of this script (``--cpu-cost``): one thread."""
    proc = subprocess.run(
        [sys.executable, __file__, "--cpu-cost", "--rows", str(args.rows)]
        + ["--data-dir", args.data_dir],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--data-dir", default=str(HERE / ".data"))
    p.add_argument("--write", action="store_true", help="update RESULTS.md")
    p.add_argument("--cpu-cost", action="store_true", help=argparse.SUPPRESS)
    args = parse_args(p, argv, smoke=dict(rows=8_192, rounds=1, warmup=1, batches=2))
    if args.cpu_cost:  # the single-thread measurement, in its own process
        schema, tf_files, _ = data(Path(args.data_dir), args.rows)
        few = {"rounds": 1, "calls": 1} if args.smoke else {}
        print(json.dumps(cpu_cost(tf_files, schema, **few)))
        return 0

    import tfinput
    from tfinput.config import PipelineConfig

    schema, tf_files, pq_files = data(Path(args.data_dir), args.rows)
    # The same config for every variant: the best of the small grid on this machine.
    config = PipelineConfig(
        batch_size=BATCH,
        interleave_cycle_length=1,
        interleave_parallelism=1,
        map_parallelism=3,
        prefetch=2,
    )
    variants = {
        "tfinput TFRecord": lambda: tfinput.tfrecord(tf_files, schema).build(config),
        "hand-written TFRecord": lambda: handwritten(tf_files, schema, config),
        "tfinput Parquet": lambda: tfinput.parquet(pq_files, schema).build(config),
    }
    names = list(variants)
    results: dict[str, list[float]] = {n: [] for n in names}
    t0 = time.time()
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            results[name].append(rate(variants[name], args.warmup, args.batches))
        print(
            f"round {r + 1}/{args.rounds}: "
            + ", ".join(f"{n} {results[n][-1]:,.0f}/s" for n in names),
            file=sys.stderr,
        )
    s = {n: summarize(v) for n, v in results.items()}
    if args.smoke:  # in this process (no second TensorFlow start): its figure is no result
        cpu = cpu_cost(tf_files, schema, rounds=1, calls=1, one_thread=False, autograph=False)
    else:
        cpu = _cpu_cost_process(args)
    overhead = 1 - s["tfinput TFRecord"]["median"] / s["hand-written TFRecord"]["median"]
    pairs = [
        1 - a / b for a, b in zip(results["tfinput TFRecord"], results["hand-written TFRecord"])
    ]
    pq_ratio = s["tfinput Parquet"]["median"] / s["tfinput TFRecord"]["median"]
    lines = [
        "<!-- core:begin (generated by benchmarks/core.py) -->",
        "### Core: Parquet vs TFRecord, and tfinput's overhead",
        "",
        f"Machine: {machine()}.",
        f"Workload: criteo-like {args.rows:,} rows in {FILES} files, batch {BATCH}; config "
        "for every variant: interleave 1, map parallelism 3, prefetch 2. Method: "
        f"{args.rounds} rounds, variants interleaved in rotating order, fresh iterator per "
        f"measurement, {args.warmup} warm-up batches excluded, {args.batches} timed batches "
        f"({args.batches * BATCH:,} examples). Total time {time.time() - t0:.0f} s.",
        "",
        "| variant | median examples/s | min-max | CV |",
        "|---|---:|---:|---:|",
    ]
    for n in names:
        lines.append(
            f"| {n} | {s[n]['median']:,.0f} | {s[n]['min']:,.0f}-{s[n]['max']:,.0f} "
            f"| {s[n]['cv']:.1%} |"
        )
    lines += [
        "",
        f"- Parquet / TFRecord (tfinput, same config): **{pq_ratio:.2f}x** (target >= 2x).",
        f"- tfinput overhead vs hand-written tf.data: **{overhead:+.1%}** of the median "
        f"(per-round paired overheads: median {statistics.median(pairs):+.1%}, range "
        f"{min(pairs):+.1%} to {max(pairs):+.1%}; target <= 5%). The hand-written code does "
        "no validation; tfinput adds id-range, finiteness and weights checks.",
        f"- CPU cost per batch of parse + transform on one thread (no pipeline, no "
        f"threads: {cpu['rounds']} interleaved rounds of {cpu['calls']} calls, "
        f"`time.process_time`): tfinput {cpu['tfinput_ms']:.2f} ms, hand-written "
        f"{cpu['handwritten_ms']:.2f} ms, paired overhead median "
        f"**{statistics.median(cpu['paired']):+.1%}** (range {min(cpu['paired']):+.1%} to "
        f"{max(cpu['paired']):+.1%}). This is the overhead without the machine's scheduling "
        "noise; the throughput rows above include it.",
        "<!-- core:end -->",
    ]
    section = "\n".join(lines)
    print(section)
    if args.write:
        write_section("core", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
