"""Before / after: the same pipelines built by two versions of tfinput, side by side.

    python benchmarks/versions.py --base d8ab1a8            # print the markdown section
    python benchmarks/versions.py --base d8ab1a8 --write    # also update RESULTS.md

Proves that a change did not cost throughput (or measures what it cost). The base
revision is checked out into a temporary git worktree; one worker process per version
imports its own tfinput and keeps it loaded, and the lead process asks them for one
measurement at a time, alternating versions and rotating the order every round, so
both see the same machine state (this 2-core machine drifts by 10-20%). Each
measurement builds a fresh iterator over the repeated dataset, skips ``--warmup``
batches and times ``--batches`` batches. Reported: median examples/s per version and
format over rounds, min-max, CV, and the median of the per-round after/before ratios
with its min-max.

Workload: criteo-like (13 dense, 26 single ids, 4 multi-hot lists of 0-19 ids) as TFRecord,
Parquet and columnar records,
``--rows`` rows in 8 files, batch 4096, one fixed config (interleave 1, map
parallelism 3, prefetch 2) or, with ``--config autotune``, each version's
``PipelineConfig.autotune`` (its own defaults), the data written once by the current
version (the files are the same bytes for both). ``--step keras`` trains tfinput's Keras
ranking model on every batch (``train_on_batch``) instead of only reading. ``--wide``
reads 1,000 features instead (100 dense, 700 single ids, 200 multi-hot lists of 0-9 ids,
one table each: the production shape's width), usually with ``--batch 512``.

    python benchmarks/versions.py --base dfc84f4 --rows 1000000 --config autotune \
        --formats tfrecord --section versions-read-batch --write
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from benchmarks._results import parse_args, write_section  # noqa: E402
from benchmarks.columnar import columnar_data  # noqa: E402
from benchmarks.core import BATCH, data, machine, summarize  # noqa: E402

_WORKER = r"""
import json, sys, time
import tfinput
from tfinput import testing
schema = testing.criteo_like_schema(**json.loads(sys.argv[6]))  # --smoke: its few features
SHUFFLE = int(sys.argv[2])
CONFIG, STEP, NUMPY = sys.argv[3], sys.argv[4], sys.argv[5] == "numpy"
shuffle = dict(shuffle_buffer=SHUFFLE, shuffle_seed=1 if SHUFFLE else None)
if CONFIG == "autotune":
    config = tfinput.PipelineConfig.autotune(batch_size=BATCH, **shuffle)
else:
    config = tfinput.PipelineConfig(batch_size=BATCH, interleave_cycle_length=1,
        interleave_parallelism=1, map_parallelism=3, prefetch=2, **shuffle)
FILES = json.loads(sys.argv[1])
if STEP == "keras":
    from tfinput import models
    model = models.ranking_model(schema, jit_compile=True)
    def step(batch):
        features, labels = batch
        model.train_on_batch(features, labels)
else:
    def step(batch):
        pass
def make(fmt):
    if fmt == "tfrecord":
        return tfinput.tfrecord(FILES["tfrecord"], schema).build(config)
    if fmt == "columnar":
        return tfinput.columnar(FILES["columnar"], schema).build(config)
    return tfinput.parquet(FILES["parquet"], schema).build(config)
print(json.dumps({"ready": tfinput.__file__}), flush=True)
for line in sys.stdin:
    fmt, warmup, batches = line.split()
    ds = make(fmt).repeat()
    it = ds.as_numpy_iterator() if NUMPY else iter(ds)
    for _ in range(int(warmup)):
        step(next(it))
    start = time.perf_counter()
    for _ in range(int(batches)):
        step(next(it))
    rate = int(batches) * BATCH / (time.perf_counter() - start)
    del it
    print(json.dumps({"rate": rate}), flush=True)
"""


class Worker:
    def __init__(
        self,
        name: str,
        source_root: Path,
        files: dict[str, list[str]],
        shuffle: int = 0,
        config: str = "fixed",
        step: str = "none",
        iterator: str = "tensors",
        schema_kwargs: dict[str, Any] | None = None,
        batch: int = BATCH,
    ) -> None:
        from benchmarks._results import smoke_active
        from benchmarks.core import SMOKE_SCHEMA

        env = {**os.environ, "PYTHONPATH": str(source_root), "TF_CPP_MIN_LOG_LEVEL": "2"}
        code = _WORKER.replace("BATCH", str(batch))
        kwargs = SMOKE_SCHEMA if smoke_active() else {}
        kwargs = {**kwargs, **(schema_kwargs or {})}
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, json.dumps(files), str(shuffle), config, step, iterator]
            + [json.dumps(kwargs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(source_root),
        )
        ready = json.loads(self._line())
        self.module = ready["ready"]
        if not self.module.startswith(str(source_root)):
            raise RuntimeError(f"{name}: imported tfinput from {self.module}, not {source_root}")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} ended (exit {self.proc.wait()})")
        return line

    def measure(self, fmt: str, warmup: int, batches: int) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{fmt} {warmup} {batches}\n")
        self.proc.stdin.flush()
        return float(json.loads(self._line())["rate"])

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


#: ``--wide``: 1,000 features, as criteo_like_schema's arguments.
WIDE = dict(n_dense=100, n_categorical=700, n_multi_hot=200, max_len=10, vocabulary_size=100_000)


def wide_data(root: Path, rows: int) -> dict[str, list[str]]:
    """``--wide``'s rows as TFRecord, Parquet and columnar records (written once)."""
    from benchmarks.core import criteo_schema, every_format

    return every_format(criteo_schema(**WIDE), root / f"wide-{rows}", rows)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.wide:
        files = wide_data(Path(args.data_dir), args.rows)
        files = {f: files[f] for f in args.formats.split(",")}
    else:
        _, tf_files, pq_files = data(Path(args.data_dir), args.rows)
        files = {"tfrecord": tf_files, "parquet": pq_files}
    if "columnar" in args.formats.split(",") and not args.wide:
        # The same rows as columnar records, as benchmarks/columnar.py writes them.
        col_dir = Path(columnar_data(Path(args.data_dir), args.rows, pq_files))
        files["columnar"] = sorted(map(str, col_dir.glob("*.tfcol")))
    base = subprocess.run(
        ["git", "rev-parse", "--short", args.base], capture_output=True, text=True, check=True,
        cwd=ROOT,
    ).stdout.strip()  # fmt: skip
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
        cwd=ROOT,
    ).stdout.strip()  # fmt: skip
    dirty = bool(
        subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "tfinput"],
            capture_output=True, text=True, cwd=ROOT,
        ).stdout.strip()
    )  # fmt: skip
    formats = args.formats.split(",")
    rates: dict[str, dict[str, list[float]]] = {f: {"before": [], "after": []} for f in formats}
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), base],
            check=True, capture_output=True, cwd=ROOT,
        )  # fmt: skip
        workers = {}
        try:
            roots = (("before", tree), ("after", ROOT))
            workers = {
                who: Worker(
                    who,
                    root,
                    files,
                    args.shuffle,
                    args.config,
                    args.step,
                    args.iterator,
                    schema_kwargs=WIDE if args.wide else None,
                    batch=args.batch,
                )
                for who, root in roots[: 1 if args.smoke else 2]
            }
            if args.smoke:  # one worker process (the base's) measures both sides
                workers["after"] = workers["before"]
            for r in range(args.rounds):
                order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
                for fmt in formats:
                    for who in order:
                        rate = workers[who].measure(fmt, args.warmup, args.batches)
                        rates[fmt][who].append(rate)
                print(
                    f"round {r + 1}/{args.rounds}: "
                    + ", ".join(
                        f"{f} {rates[f]['after'][-1] / rates[f]['before'][-1]:.3f}x"
                        for f in formats
                    ),
                    file=sys.stderr,
                )
        finally:
            for w in workers.values():
                w.close()
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True
            )
    out: dict[str, Any] = {
        "base": base,
        "head": head + (" + uncommitted changes" if dirty else ""),
        "machine": machine(),
        "rows": args.rows,
        "wide": args.wide,
        "batch": args.batch,
        "rounds": args.rounds,
        "warmup": args.warmup,
        "batches": args.batches,
        "shuffle": args.shuffle,
        "config": args.config,
        "step": args.step,
        "iterator": args.iterator,
        "backend": os.environ.get("KERAS_BACKEND", "tensorflow"),
        "section": args.section,
        "formats": {},
    }
    for fmt in formats:
        b, a = rates[fmt]["before"], rates[fmt]["after"]
        paired = [x / y for x, y in zip(a, b)]
        out["formats"][fmt] = {
            "before": summarize(b),
            "after": summarize(a),
            "ratio": {"median": statistics.median(paired), "min": min(paired), "max": max(paired)},
        }
    return out


def markdown(res: dict[str, Any]) -> str:
    lines = [
        f"<!-- {res['section']}:begin (benchmarks/versions.py writes this section) -->",
        f"## Before / after: {res['base']} vs {res['head']}",
        "",
        f"Machine: {res['machine']}.",
        "",
        (
            "Method: wide (1,000 features: 100 dense, 700 single ids, 200 multi-hot lists "
            "of 0-9 ids, one table each)"
            if res.get("wide")
            else "Method: criteo-like"
        )
        + f", {res['rows']:,} rows, 8 files, batch {res.get('batch', BATCH)}, "
        + _config_words(res)
        + (
            "; each batch trains tfinput's Keras ranking model "
            f"(`models.ranking_model`, `train_on_batch`, Keras backend {res['backend']})"
            if res.get("step") == "keras"
            else "; input only"
        )
        + ("; batches as numpy (`as_numpy_iterator`)" if res.get("iterator") == "numpy" else "")
        + "; one worker process per version "
        "(the base revision from a git worktree), measurements alternating between them with "
        f"the order rotated every round; {res['rounds']} rounds, each a fresh iterator, "
        f"{res['warmup']} warm-up batches, {res['batches']} timed batches. Ratio: median "
        "of the per-round after/before ratios (min-max).",
        "",
        "| format | before (ex/s) | after (ex/s) | after / before |",
        "|---|---|---|---|",
    ]
    for fmt, r in res["formats"].items():
        b, a, q = r["before"], r["after"], r["ratio"]
        lines.append(
            f"| {fmt} | {b['median']:,.0f} ({b['min']:,.0f}-{b['max']:,.0f}, CV "
            f"{b['cv']:.1%}) | {a['median']:,.0f} ({a['min']:,.0f}-{a['max']:,.0f}, CV "
            f"{a['cv']:.1%}) | {q['median']:.3f}x ({q['min']:.3f}-{q['max']:.3f}) |"
        )
    lines.append(f"<!-- {res['section']}:end -->")
    return "\n".join(lines)


def _config_words(res: dict[str, Any]) -> str:
    shuffle = f", shuffle buffer {res['shuffle']:,} rows, seed 1" if res["shuffle"] else ""
    if res.get("config") == "autotune":
        return f"`PipelineConfig.autotune` (each version's defaults{shuffle})"
    return f"one fixed config (interleave 1, map parallelism 3, prefetch 2{shuffle})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", help="git revision to compare against (required)")
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--formats", default="tfrecord,parquet,columnar")
    p.add_argument("--data-dir", default=str(HERE / ".data"))
    p.add_argument("--write", action="store_true", help="update RESULTS.md")
    p.add_argument("--json", action="store_true")
    p.add_argument("--shuffle", type=int, default=0, help="shuffle buffer, rows (0: none)")
    p.add_argument(
        "--config",
        choices=("fixed", "autotune"),
        default="fixed",
        help="fixed: interleave 1, map parallelism 3, prefetch 2; autotune: each version's "
        "PipelineConfig.autotune (its defaults, e.g. read_batch)",
    )
    p.add_argument(
        "--step",
        choices=("none", "keras"),
        default="none",
        help="keras: each batch trains tfinput's Keras ranking model (train_on_batch)",
    )
    p.add_argument(
        "--iterator",
        choices=("tensors", "numpy"),
        default="tensors",
        help="numpy: read batches with as_numpy_iterator (as a JAX or PyTorch loop does)",
    )
    p.add_argument("--wide", action="store_true", help="1,000 features (see the docstring)")
    p.add_argument("--batch", type=int, default=BATCH, help="batch size (default 4096)")
    p.add_argument("--section", default="versions", help="RESULTS.md section written with --write")
    args = parse_args(
        p,
        argv,
        smoke=dict(rows=8_192, rounds=1, warmup=1, batches=2, formats="tfrecord", base="HEAD"),
    )
    if args.base is None:
        p.error("the following arguments are required: --base")
    res = run(args)
    text = markdown(res)
    print(json.dumps(res, indent=2) if args.json else text)
    if args.write:
        write_section(args.section, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
