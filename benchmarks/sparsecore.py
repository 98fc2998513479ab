"""SparseCore statistics pass: how fast it runs, and what the measured limits save.

    python benchmarks/sparsecore.py            # prints the section
    python benchmarks/sparsecore.py --write    # and replaces it in RESULTS.md
    python benchmarks/sparsecore.py --quick    # smoke run (< 1 min): fewer rounds, rows

Throughput (criteo-like preset: 13 dense, 26 single Zipf ids, 4 multi-hot lists of 0-19
ids; 400,000 rows in 8 files; global batch 4096 as 1 device x 4096 or 8 devices x 512;
4 SparseCores per device; auto stacking; dense and sparse multi-hot input):

- *counting only*: the batches are read once into memory (``Dataset.cache()``, filled
  by a first pass), then `tfinput.sparsecore_stats` runs over the cached dataset: the
  counting's own rate;
- *end to end*: `tfinput.sparsecore_stats(pipeline, config=PipelineConfig.naive())`
  from the columnar records and from the TFRecord files (reading, parsing and counting
  share the cores; the naive preset reads fastest on 2 cores, where AUTOTUNE reads
  TFRecord about 5x slower: section ``bench``).

Each is timed from its 4th batch to the end (the first batches carry the graph build),
``--rounds`` times, the configurations interleaved round by round; the table gives
the median, min and max.

Limits (synthetic, 1M-row tables): a Zipf-skewed (a = 1.2) and a uniformly drawn
single-id table and a Zipf multi-hot table (lists of 0-19), per-replica batch 512 on 8
devices x 4 SparseCores (S = 32), 200 global batches: the measured limits, the suggested
ones (margin 20%), the COO buffer a chip allocates per table when no buffer size is given
(jax-tpu-embedding's ``round_up(limit, 8) x SparseCores per chip x S`` entries of 12
bytes) at the 8192 of keras-rs's MLPerf example against at the suggested limit, and
how many batches keras-rs's default limit of 256 would overflow.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks import _results  # noqa: E402

DATA = HERE / ".data"
ROWS = 400_000
BATCH = 4096
CONFIGS = [(1, 4096), (8, 512)]  # (devices, per-replica batch): global batch 4096
FORMATS = ["dense", "sparse"]


def pipelines(rows: int) -> dict[str, Any]:
    """The criteo-like data as columnar records and TFRecord files (written once)."""
    import tfinput
    from benchmarks.core import data
    from tfinput import testing

    schema, tfrecords, _ = data(DATA, rows)
    columnar = DATA / f"criteo-{rows}" / "columnar"
    if not (columnar / "manifest.json").exists():
        cols = testing.generate(schema, rows, seed=0)
        testing.write_columnar(columnar, schema, rows=rows, files=8, columns=cols)
    return {
        "columnar": tfinput.columnar(str(columnar), schema),
        "tfrecord": tfinput.tfrecord(tfrecords, schema),
    }


def timed(run: Any) -> float:
    """Examples/s of ``run(tick)`` from its 4th batch on (``run`` returns the stats)."""
    marks: dict[str, float] = {}

    def tick(n: int) -> None:
        now = time.perf_counter()
        if n == 3:
            marks["start"] = now
        marks["end"], marks["n"] = now, n

    stats = run(tick)
    per_batch = stats.per_replica_batch_size * stats.devices
    return (marks["n"] - 3) * per_batch / (marks["end"] - marks["start"])


def throughput(rows: int, rounds: int) -> list[str]:
    import tensorflow as tf

    from tfinput.config import PipelineConfig
    from tfinput.sparsecore import sparsecore_stats

    sources = pipelines(rows)
    # The reading knobs of the end-to-end runs: the naive preset, the fastest preset on 2
    # cores (AUTOTUNE reads TFRecord 5x slower here: RESULTS.md, section bench).
    naive = PipelineConfig.naive()
    cached = {}
    for fmt in FORMATS:
        p = sources["columnar"].with_multi_hot_format(fmt)
        ds = p.build(PipelineConfig(batch_size=BATCH)).cache()
        for _ in ds:  # fill the cache
            pass
        cached[fmt] = (ds, p.schema)
    results: dict[tuple[str, str, int, int], list[float]] = {}
    for _ in range(rounds):
        for fmt in FORMATS:
            for devices, per_replica in CONFIGS:
                kw: dict[str, Any] = dict(
                    per_replica_batch_size=per_replica, devices=devices, multi_hot_format=fmt
                )
                ds, schema = cached[fmt]
                runs = {
                    "counting only": lambda t, ds=ds, schema=schema, kw=kw: sparsecore_stats(
                        ds, schema=schema, tick=t, **kw
                    ),
                }
                for kind, p in sources.items():
                    runs[f"end to end, {kind}"] = lambda t, p=p, kw=kw: sparsecore_stats(
                        p, config=naive, tick=t, **kw
                    )
                for what, run in runs.items():
                    results.setdefault((what, fmt, devices, per_replica), []).append(timed(run))
    lines = [
        f"| measured | multi-hot | devices x per-replica batch | examples/s (median of {rounds}) "
        "| min | max |",
        "|---|---|---|---:|---:|---:|",
    ]
    for (what, fmt, devices, per_replica), values in sorted(results.items()):
        lines.append(
            f"| {what} | {fmt} | {devices} x {per_replica} | {statistics.median(values):,.0f} | "
            f"{min(values):,.0f} | {max(values):,.0f} |"
        )
    del tf
    return lines


def limits(batches: int) -> list[str]:
    import numpy as np
    import tensorflow as tf

    from tfinput.schema import Categorical, MultiHot, Schema, Table
    from tfinput.sparsecore import KERAS_RS_DEFAULT_LIMIT, MLPERF_LIMIT, sparsecore_stats

    vocab, devices, per_replica, max_len = 1_000_000, 8, 512, 20
    schema = Schema(
        tables=(
            Table(name="zipf", vocabulary_size=vocab, dim=16),
            Table(name="uniform", vocabulary_size=vocab, dim=16),
            Table(name="zipf_lists", vocabulary_size=vocab, dim=16, combiner="sum"),
        ),
        features=(
            Categorical(name="zipf", table="zipf"),
            Categorical(name="uniform", table="uniform"),
            MultiHot(name="zipf_lists", table="zipf_lists", max_len=max_len),
        ),
    )
    rng = np.random.default_rng(0)
    rows = batches * devices * per_replica

    def zipf(n: int) -> Any:
        return ((rng.zipf(1.2, n) - 1) % vocab).astype(np.int32)

    lengths = rng.integers(0, max_len, rows)
    lists = tf.RaggedTensor.from_row_lengths(zipf(int(lengths.sum())), lengths)
    features = {
        "ids": {
            "zipf": zipf(rows),
            "uniform": rng.integers(0, vocab, rows).astype(np.int32),
            "zipf_lists": lists,
        }
    }
    ds = tf.data.Dataset.from_tensor_slices(features).batch(devices * per_replica)
    stats = sparsecore_stats(
        ds,
        schema=schema,
        per_replica_batch_size=per_replica,
        devices=devices,
        stacking="none",
        multi_hot_format="ragged",
    )
    lines = [
        "| table | max ids / partition | max unique ids | buffer / SparseCore | suggested "
        "(ids, unique) | COO buffer per chip at 8192 | at the suggested limit | batches over "
        f"{KERAS_RS_DEFAULT_LIMIT} (of {stats.batches}) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in stats.stacks:
        o, g = s.observed, s.limits(stats.margin)
        over = s.overflow(KERAS_RS_DEFAULT_LIMIT)
        lines.append(
            f"| {s.stack.name} | {o.max_ids_per_partition:,} | {o.max_unique_ids_per_partition:,} "
            f"| {o.required_buffer_size_per_sc:,} | {g.max_ids_per_partition:,}, "
            f"{g.max_unique_ids_per_partition:,} | "
            f"{stats.coo_buffer_bytes(MLPERF_LIMIT) / 2**20:,.1f} MiB | "
            f"{stats.coo_buffer_bytes(g.max_ids_per_partition) / 2**20:,.2f} MiB | "
            f"{over.over_any} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="40,000 rows, 1 round, 20 batches")
    p.add_argument("--write", action="store_true", help="replace the section in RESULTS.md")
    args = _results.parse_args(p, argv, smoke={})
    from benchmarks.core import machine

    rows, rounds, batches = (40_000, 1, 20) if args.quick else (ROWS, args.rounds, 200)
    if args.smoke:  # one multi-hot format, one device layout (8 replicas)
        global DATA, CONFIGS, FORMATS
        DATA, rows, rounds, batches = _results.smoke_dir() / "data", 24_576, 1, 2
        CONFIGS, FORMATS = CONFIGS[1:], FORMATS[:1]
    head = machine()
    speed = throughput(rows, rounds)
    sizes = limits(batches)
    section = "\n".join(
        [
            "<!-- sparsecore:begin (generated by benchmarks/sparsecore.py) -->",
            "## SparseCore statistics pass (issue 12)",
            "",
            f"Machine: {head}. Method: `python benchmarks/sparsecore.py` (see its docstring): "
            f"{rows:,} criteo-like rows, global batch {BATCH}, 4 SparseCores per device, auto "
            "stacking; timed from the 4th batch to the end; configurations interleaved "
            "round by round.",
            "",
            *speed,
            "",
            f"Limits from the data vs fixed limits ({batches} global batches of 8 x 512, "
            "S = 32 SparseCores, 1M-row tables, ragged input, margin 20%):",
            "",
            *sizes,
            "<!-- sparsecore:end -->",
        ]
    )
    print(section)
    if args.write:
        _results.write_section("sparsecore", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
