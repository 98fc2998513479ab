"""Resumable input: the saved iterator state per source and shuffle mode, and how well
each shuffle mixes the data.

    python benchmarks/resume_state.py               # quick: small data, buffers 1k and 16k
    python benchmarks/resume_state.py --size full   # 1.2M criteo-like rows, buffers up to 1M

State: for each source (columnar, TFRecord, Parquet) and shuffle mode (none; buffer
shuffle of 1k, 100k (quick: 16k) and 1M records; columnar's ``shuffle="global"``), a
pipeline (batch 4096, ``deterministic=True``, ``shuffle_seed=1``, other knobs AUTOTUNE)
is iterated ``--after`` batches, then ``tf.train.Checkpoint(iterator=it).write`` saves
it and ``read`` restores it into a fresh iterator of a fresh build: the bytes of the
checkpoint files, and the median of ``--repeats`` save and restore times (restore: the
``read`` call alone; a restored buffer refills nothing, the buffer is in the file). A
source that cannot be saved shows its error. Columnar buffers count rows (a buffer of
``ceil(rows / 1024)`` chunks), the others records.

Mixing: ``tfinput.testing`` rows (a ``row_id`` column) in 8 files, as columnar
(chunks of 1024 rows), read with batch 4096: per batch, the distinct source files among
its rows and the spread of its rows' positions within their files (std over that of a
uniform draw: 1.0 is as spread as a random sample), averaged over one epoch, and the
correlations between a batch's index in the epoch and its rows' mean position in their
files and in the data set (near 1: the epoch walks through the files in order; 0: it
does not), for the
global shuffle against the buffer shuffle of 1k, 16k and 100k rows (rows shuffled
within batches in both). Chunk-level shuffles put at most ``4096 / 1024 = 4`` files in
a batch; the interleave over files already spreads consecutive chunks over files.

Data lives under ``benchmarks/.data/`` (ignored by git) and is written on first use.
Timings come from whatever machine runs it (recorded in the output header); they are
single-process wall times, noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks import _results  # noqa: E402

DATA = HERE / ".data"
BATCH = 4096
SIZES = {
    # smoke: columnar saved with the global shuffle only (its compact state too), one
    # mixing table row (the global shuffle)
    "smoke": {"rows": 8_192, "buffers": (), "mix_rows": 8_192, "mix_buffers": ()},
    "quick": {"rows": 40_000, "buffers": (1_000, 16_000), "mix_rows": 100_000},
    "full": {"rows": 1_200_000, "buffers": (1_000, 100_000, 1_000_000), "mix_rows": 200_000},
}


# ------------------------------------------------------------------ data
def mixing_data(rows: int, files: int = 8) -> list[str]:
    """``tfinput.testing`` rows with a ``row_id``, as columnar files (chunks of 1024)."""
    from tfinput import testing

    out = DATA / f"mix-{rows}-{files}"
    if not (out / "manifest.json").exists():
        schema = testing.small_schema()
        testing.write_columnar(out, schema, rows=rows, files=files, chunk_rows=1024)
    return [str(out)]


def state_data(size: str) -> dict[str, Any]:
    """``{kind: pipeline}`` over the same rows as TFRecord, Parquet and columnar."""
    import tfinput
    from tfinput import testing

    rows = SIZES[size]["rows"]
    base = DATA / f"state-{size}"
    if size != "full":
        schema = testing.small_schema()
        cols = testing.generate(schema, rows, seed=1)
        if not (base / "columnar" / "manifest.json").exists():
            testing.write_tfrecord(base / "tfrecord", schema, rows=rows, files=8, columns=cols)
            testing.write_parquet(base / "parquet", schema, rows=rows, files=8, columns=cols)
            testing.write_columnar(base / "columnar", schema, rows=rows, files=8, columns=cols)
    else:
        tool = [str(Path(sys.executable).with_name("tfinput"))]
        for fmt in ("tfrecord", "parquet"):
            if not (base / fmt).exists():
                subprocess.run(
                    [*tool, "datagen", "--preset", "criteo-like", "--rows", str(rows),
                     "--files", "8", "--format", fmt, str(base / fmt)],
                    check=True,
                )  # fmt: skip
        if not (base / "columnar" / "manifest.json").exists():
            subprocess.run(
                [*tool, "convert", *sorted(map(str, (base / "parquet").glob("*.parquet"))),
                 "--to", "columnar", "--out", str(base / "columnar")],
                check=True,
            )  # fmt: skip
        schema = tfinput.Schema.from_json(str(base / "tfrecord" / "schema.json"))
    return {
        "columnar": tfinput.columnar(base / "columnar", schema),
        "tfrecord": tfinput.tfrecord(sorted(map(str, (base / "tfrecord").glob("*.tfrecord"))), schema),
        "parquet": tfinput.parquet(sorted(map(str, (base / "parquet").glob("*.parquet"))), schema),
    }  # fmt: skip


# --------------------------------------------------------------- measures
def mixing(pipeline: Any, config: Any, *, rows: int, files: int) -> dict[str, float]:
    """How well one epoch of ``pipeline`` mixes its rows: per batch, the distinct
    source files among its rows and the spread of their positions within their files
    (std over that of a uniform draw; 1.0: as spread as a random sample), averaged over
    batches; and the correlations between a batch's index in the epoch and its rows'
    mean position within their files (``order``), and in the whole data set
    (``order_all``): 0 when position does not predict when a row is trained, near 1
    when the epoch walks through the files (interleaved or one after another) in order. Rows must be
    ``row_id`` 0..rows-1 in ``files`` files of ``ceil(rows / files)`` rows (rounded up
    to whole chunks of 1024, as `mixing_data` writes them)."""
    import numpy as np

    per_file = -(-rows // files)
    per_file = -(-per_file // 1024) * 1024
    uniform = per_file / np.sqrt(12)
    distinct, spread, in_file, overall = [], [], [], []
    for features, _ in pipeline.build(config):
        ids = features["dense"]["row_id"].numpy().astype(np.int64)
        distinct.append(len(np.unique(ids // per_file)))
        spread.append(float(np.std(ids % per_file)) / uniform)
        in_file.append(float(np.mean(ids % per_file)))
        overall.append(float(np.mean(ids)))
    steps = np.arange(len(in_file))
    return {
        "files": float(np.mean(distinct)),
        "spread": float(np.mean(spread)),
        "order": float(np.corrcoef(steps, in_file)[0, 1]),
        "order_all": float(np.corrcoef(steps, overall)[0, 1]),
    }


def state(pipeline: Any, config: Any, *, after: int, repeats: int) -> dict[str, Any]:
    """Checkpoint bytes and median save / restore seconds, or the error."""
    import tensorflow as tf

    saves, restores, size = [], [], 0
    try:
        for _ in range(repeats):
            it = iter(pipeline.build(config))
            for _ in range(after):
                next(it)
            with tempfile.TemporaryDirectory() as d:
                t = time.perf_counter()
                prefix = tf.train.Checkpoint(iterator=it).write(os.path.join(d, "ckpt"))
                saves.append(time.perf_counter() - t)
                size = sum(p.stat().st_size for p in Path(d).glob("ckpt*"))
                fresh = iter(pipeline.build(config))
                t = time.perf_counter()
                tf.train.Checkpoint(iterator=fresh).read(prefix).assert_consumed()
                restores.append(time.perf_counter() - t)
                next(fresh)
            del it, fresh
    except Exception as e:  # any failure is reported in the table
        return {"error": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:100]}"}
    return {
        "bytes": size,
        "save_s": statistics.median(saves),
        "restore_s": statistics.median(restores),
    }


def iterator_state(pipeline: Any, config: Any, *, after: int, repeats: int) -> dict[str, Any]:
    """`InputIterator.get_state()` bytes, median save seconds, and median restore seconds
    (``set_state`` plus the first batch: a compact state recomputes the position)."""
    saves, restores, size = [], [], 0
    for _ in range(repeats):
        it = pipeline.iterator(config)
        for _ in range(after):
            next(it)
        t = time.perf_counter()
        blob = it.get_state()
        saves.append(time.perf_counter() - t)
        size = len(blob)
        fresh = pipeline.iterator(config)
        t = time.perf_counter()
        fresh.set_state(blob)
        next(fresh)
        restores.append(time.perf_counter() - t)
    return {
        "bytes": size,
        "save_s": statistics.median(saves),
        "restore_s": statistics.median(restores),
    }


# ------------------------------------------------------------------ runs
def modes(kind: str, buffers: tuple[int, ...], smoke: bool = False) -> list[tuple[str, int, bool]]:
    """``(label, shuffle_buffer, global)`` for a source kind (``smoke``: columnar's global
    shuffle alone)."""
    out = [("none", 0, False)] + [(f"buffer {b:,}", b, False) for b in buffers]
    if kind == "columnar":
        out = out[1:] if smoke else out
        out.append(("global", 0, True))
    return out


def run(size: str, *, after: int, repeats: int, mix: bool = True, state_: bool = True) -> str:
    import tensorflow as tf

    import tfinput
    from tfinput import testing

    spec = SIZES[size]
    base = tfinput.PipelineConfig(batch_size=BATCH, deterministic=True, shuffle_seed=1)
    lines = [
        f"Resumable input state ({size}: {spec['rows']:,} rows in 8 files; batch {BATCH}; "
        f"saved after {after} batches; median of {repeats}). TF {tf.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs (a shared machine: times are rough).",
        "",
        "| source | shuffle | state bytes | save ms | restore ms |",
        "|---|---|---:|---:|---:|",
    ]
    for kind, pipeline in (state_data(size) if state_ else {}).items():
        for label, buffer, glob_ in modes(kind, spec["buffers"], smoke=size == "smoke"):
            p = pipeline
            if glob_:
                p = dataclasses.replace(
                    pipeline, source=dataclasses.replace(pipeline.source, shuffle="global")
                )
            r = state(p, dataclasses.replace(base, shuffle_buffer=buffer), after=after,
                      repeats=repeats)  # fmt: skip
            if "error" in r:
                lines.append(f"| {kind} | {label} | {r['error']} | | |")
            else:
                lines.append(
                    f"| {kind} | {label} | {r['bytes']:,} | {1e3 * r['save_s']:.1f} | "
                    f"{1e3 * r['restore_s']:.1f} |"
                )
            print(lines[-1], flush=True)
            if glob_:  # the state JAX / Keras / custom loops save: compact for this mode
                r = iterator_state(p, base, after=after, repeats=repeats)
                lines.append(
                    f"| {kind} | {label}, `InputIterator.get_state()` | {r['bytes']:,} | "
                    f"{1e3 * r['save_s']:.1f} | {1e3 * r['restore_s']:.1f} (with 1st batch) |"
                )
                print(lines[-1], flush=True)
    if not mix:
        return "\n".join(lines)
    rows = spec["mix_rows"]
    paths = mixing_data(rows)
    lines += [
        "",
        f"Mixing ({rows:,} rows in 8 columnar files, chunks of 1024, batch {BATCH}; mean "
        "over one epoch; rows shuffled within batches):",
        "",
        "| shuffle | distinct files per batch (of 8) | in-file position spread "
        "(1.0: uniform) | batch index / position in file correlation | batch index / "
        "position in data set correlation |",
        "|---|---:|---:|---:|---:|",
    ]
    schema = testing.small_schema()
    buffers = spec.get("mix_buffers", (1_000, 16_000, 100_000))  # smoke: none
    mixes = [(f"buffer {b:,} rows", b, "buffer") for b in buffers]
    for label, buffer, shuffle in [*mixes, ("global", 0, "global")]:
        p = tfinput.columnar(paths, schema, shuffle=shuffle, shuffle_rows=True)
        m = mixing(p, dataclasses.replace(base, shuffle_buffer=buffer), rows=rows, files=8)
        lines.append(
            f"| {label} | {m['files']:.2f} | {m['spread']:.2f} | {m['order']:.2f} | "
            f"{m['order_all']:.2f} |"
        )
        print(lines[-1], flush=True)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="quick")
    parser.add_argument("--after", type=int, default=3, help="batches before saving")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", choices=["state", "mixing"], help="one of the two tables")
    args = _results.parse_args(parser, argv, smoke=dict(size="smoke", after=1, repeats=1))
    if args.smoke:
        global DATA
        DATA = _results.smoke_dir() / "data"
    table = run(
        args.size,
        after=args.after,
        repeats=args.repeats,
        mix=args.only != "state",
        state_=args.only != "mixing",
    )
    print()
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
