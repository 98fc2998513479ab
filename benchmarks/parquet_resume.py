"""Parquet: the resumable reader (batch positions, `tf.numpy_function`) against the
generator reader it replaced (`tf.data.Dataset.from_generator`), side by side.

    python benchmarks/parquet_resume.py                          # baseline: git HEAD
    python benchmarks/parquet_resume.py --baseline-ref <commit>  # once HEAD has the new one

Workload: criteo-like, 400k rows in 8 Parquet files (`benchmarks/core.py`'s data), batch
4096, under three configs: the default (AUTOTUNE) and `PipelineConfig.naive`, in file
order, and the default with a 16384-row shuffle (the readers' windows differ: the
baseline carries a window's leftover rows into the next, the new one cuts whole-batch
windows, so that batch k is a function of k). The baseline is ``tfinput/sources/_arrow.py`` and
``tfinput/sources/parquet.py`` as of ``--baseline-ref``, imported from a temporary
directory. Method: rounds, each measuring the baseline then the new reader (A B A B ...)
on a fresh iterator of a freshly built, endlessly repeated dataset: ``--warmup`` batches
skipped, then ``--batches`` timed. Per round the ratio new / baseline; the figure is the
median ratio over rounds, with min-max.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.core import BATCH, ROWS, data, machine  # noqa: E402


def baseline_source(ref: str, where: Path) -> Any:
    """The Parquet source class as of git ``ref``, importable beside the current one."""
    repo = HERE.parent
    arrow = subprocess.run(
        ["git", "show", f"{ref}:tfinput/sources/_arrow.py"],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    parquet = subprocess.run(
        ["git", "show", f"{ref}:tfinput/sources/parquet.py"],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    if "from_generator" not in parquet:
        sys.exit(
            f"{ref}: its Parquet source is not the generator reader; pass --baseline-ref "
            "with a commit from before the resumable reader"
        )
    (where / "baseline_arrow.py").write_text(arrow)
    (where / "baseline_parquet.py").write_text(
        parquet.replace(
            "from tfinput._src.core.sources._arrow import", "from baseline_arrow import"
        )
    )
    sys.path.insert(0, str(where))
    return importlib.import_module("baseline_parquet").ParquetSource


def rate(pipeline: Any, config: Any, warmup: int, batches: int) -> float:
    """Examples per second of a fresh iterator, after ``warmup`` batches."""
    it = iter(pipeline.build(config).repeat())
    for _ in range(warmup):
        next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * config.batch_size / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline-ref", default="HEAD")
    p.add_argument("--data-dir", default=str(HERE / ".data"))
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batches", type=int, default=100)
    args = p.parse_args()

    import tfinput
    from tfinput.config import PipelineConfig

    schema, _, files = data(Path(args.data_dir), ROWS)
    with tempfile.TemporaryDirectory() as tmp:
        old_source = baseline_source(args.baseline_ref, Path(tmp))
        new = tfinput.parquet(files, schema)
        old = dataclasses.replace(new, source=old_source(paths=tuple(files)))
        configs = {
            "default (AUTOTUNE)": PipelineConfig(batch_size=BATCH),
            "naive": PipelineConfig.naive(batch_size=BATCH),
            "default, shuffle_buffer 16384": PipelineConfig(
                batch_size=BATCH, shuffle_buffer=16384, shuffle_seed=1
            ),
        }
        rows = []
        for name, config in configs.items():
            rates: dict[str, list[float]] = {"old": [], "new": []}
            for _ in range(args.rounds):
                rates["old"].append(rate(old, config, args.warmup, args.batches))
                rates["new"].append(rate(new, config, args.warmup, args.batches))
            ratios = [n / o for n, o in zip(rates["new"], rates["old"])]
            rows.append(
                f"| {name} | {statistics.median(rates['old']):,.0f} | "
                f"{statistics.median(rates['new']):,.0f} | {statistics.median(ratios):.3f} | "
                f"{min(ratios):.3f}-{max(ratios):.3f} |"
            )
    print(
        f"Parquet reader, resumable vs generator ({args.baseline_ref}): {ROWS:,} criteo-like "
        f"rows, 8 files, batch {BATCH}, {args.rounds} interleaved rounds (baseline, new), "
        f"{args.warmup} warm-up + {args.batches} timed batches each; {machine()}\n"
    )
    print(
        "| config | baseline ex/s (median) | resumable ex/s (median) | ratio (median) | min-max |"
    )
    print("|---|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
