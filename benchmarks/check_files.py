"""``tfinput check`` over many small files: the seconds it takes against the files' rows.

    python benchmarks/check_files.py                   # 10,000 one-record files
    python benchmarks/check_files.py --files 2000 --records 5
    python benchmarks/check_files.py --write           # also replace its RESULTS.md section

Writes ``--files`` TFRecord files of ``--records`` criteo-like records each (once, into
``--data-dir``), then times ``tfinput check DIR --json`` as a user runs it (a new
process: Python and TensorFlow start-up included; in ``--smoke`` runs, in this process),
``--rounds`` times, and one epoch over the same files through ``Pipeline.build`` (the
default, AUTOTUNE config), the cost of the rows themselves. The check reads the files
together through one pipeline (`Pipeline.check`); before, it built a pipeline and two
iterators per file (about 0.17 s a file on the 2-core development machine). The
machine line carries the load average: on a shared machine the figures move with it.
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

from benchmarks._results import parse_args, smoke_active, write_section  # noqa: E402


def write_files(folder: Path, files: int, records: int) -> list[str]:
    """``files`` TFRecord files of ``records`` criteo-like records each, and
    ``schema.json``, in ``folder`` (kept: a second run reuses them)."""
    from tfinput import testing
    from tfinput._src.core.formats.tfrecord import write_records

    paths = [str(folder / f"part-{i:05d}.tfrecord") for i in range(files)]
    done = folder / "_COMPLETE"
    if done.exists():
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    schema = testing.criteo_like_schema()
    rows = testing.to_examples(testing.generate(schema, rows=files * records, seed=0), schema)
    for i, path in enumerate(paths):
        write_records(path, rows[i * records : (i + 1) * records])
    schema.to_json(folder / "schema.json")
    done.write_text("ok\n")
    return paths


def check_seconds(folder: Path) -> tuple[float, dict]:
    """``tfinput check FOLDER --json``: its wall seconds and its JSON. In ``--smoke``
    runs, in this process (TensorFlow is loaded once for every script run in turn)."""
    argv = ["check", str(folder), "--json"]
    start = time.perf_counter()
    if smoke_active():
        import contextlib
        import io

        from tfinput.cli import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(argv)
        text = out.getvalue()
    else:
        done = subprocess.run(
            [sys.executable, "-m", "tfinput.cli", *argv],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(HERE.parent)},
        )
        code, text = done.returncode, done.stdout
        if code not in (0, 1):
            raise SystemExit(f"tfinput check failed ({code}): {done.stderr[-2000:]}")
    seconds = time.perf_counter() - start
    return seconds, json.loads(text)


def epoch_seconds(paths: list[str], folder: Path) -> float:
    """One epoch over the files through ``Pipeline.build`` (AUTOTUNE config)."""
    import tfinput
    from tfinput.config import PipelineConfig
    from tfinput.schema import Schema

    pipeline = tfinput.tfrecord(paths, Schema.from_json(folder / "schema.json"))
    start = time.perf_counter()
    for _ in pipeline.build(PipelineConfig(batch_size=1024, drop_remainder=False)):
        pass
    return time.perf_counter() - start


def section(args: argparse.Namespace, checks: list[float], report: dict, epoch: float) -> str:
    from benchmarks.core import machine

    rows = args.files * args.records
    return "\n".join(
        [
            "<!-- check-files:begin (benchmarks/check_files.py writes this section) -->",
            "## `tfinput check` over many small files",
            "",
            f"Machine: {machine()}.",
            "",
            f"Method: `python benchmarks/check_files.py --files {args.files} --records "
            f"{args.records} --rounds {args.rounds}`: {args.files:,} TFRecord files of "
            f"{args.records} criteo-like record(s); `tfinput check DIR --json` timed as a new "
            "process (start-up included), and one epoch through `Pipeline.build` (AUTOTUNE, "
            "batch 1,024) in the benchmark's process.",
            "",
            "| files | rows | check (median of rounds) | check rounds | one epoch |",
            "|---|---|---|---|---|",
            f"| {args.files:,} | {rows:,} | {statistics.median(checks):.1f} s | "
            f"{', '.join(f'{c:.1f}' for c in checks)} s | {epoch:.1f} s |",
            "",
            f"Every file counted: {len(report['files']):,} files, {report['records']:,} "
            f"records, ok: {report['ok']}.",
            "<!-- check-files:end -->",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=10_000)
    p.add_argument("--records", type=int, default=1, help="records per file")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--data-dir", default=str(HERE / ".data"))
    p.add_argument("--write", action="store_true", help="update RESULTS.md")
    args = parse_args(p, argv, smoke=dict(files=200, rounds=1))
    folder = Path(args.data_dir) / f"check-files-{args.files}x{args.records}"
    paths = write_files(folder, args.files, args.records)
    checks = []
    report: dict = {}
    for round_ in range(args.rounds):
        seconds, report = check_seconds(folder)
        checks.append(seconds)
        print(f"round {round_ + 1}/{args.rounds}: check {seconds:.1f} s", flush=True)
    if report["records"] != args.files * args.records or len(report["files"]) != args.files:
        raise SystemExit(f"check counted {report['records']} records in {len(report['files'])}")
    epoch = epoch_seconds(paths, folder)
    text = section(args, checks, report, epoch)
    print(text)
    if args.write:
        write_section("check-files", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
