"""How well a ``shuffle_buffer`` mixes an epoch: the default TFRecord plan
(``read_batch`` mini-batches) against records handed over one at a time
(``read_batch=0``) at the same ``shuffle_buffer``, for per-replica batches 32, 256 and
4096 and shuffle buffers 100, 1,000 and 10,000; and, with ``--every-source``, every
source (TFRecord with both plans, Parquet, columnar with and without ``shuffle_rows``, a
wrapped dataset of rows and one of batches) for batches 32, 256, 1,024 and 4,096 and
buffers 10, 100, 1,000 and 10,000.

    python benchmarks/mixing.py                  # TFRecord's two plans; print the section
    python benchmarks/mixing.py --write          # also replace the section in RESULTS.md
    python benchmarks/mixing.py --every-source --write   # the every-source section
    python benchmarks/mixing.py --smoke          # 2,048 rows, a cell or so of each

Data: ``tfinput.testing.small_schema`` rows, ``--files`` files of consecutive ``row_id``
values (file ``f`` holds rows ``f * n .. (f + 1) * n - 1``, like logs written in time
order): tf.Example TFRecord; with ``--every-source`` also Parquet (one row group per
file), columnar records (chunks of 1,024 rows, the default; read as they are and with
``shuffle_rows=True``) and the same rows in order as a ``tf.data`` dataset of rows
(``tfinput.wrap``) and of batches of 1,024 rows re-cut (``wrap(..., batched=True,
rebatch=True)``). The pipelines parse only ``row_id``. Every other knob is the default
(AUTOTUNE: the interleave cycle is the machine's core count) unless ``--cycle`` sets
``interleave_cycle_length``; ``deterministic=True`` and ``shuffle_seed=--seed``.

Measures, over one epoch's full batches:

- identical (``--every-source``): batches whose rows are exactly the rows of a batch of
  the same source's unshuffled read at the same batch size (0 when every batch mixes
  rows across batch boundaries; all of them when the buffer only reorders rows inside
  each batch);
- runs: the runs of consecutive rows of one file among a batch's rows (its rows
  sorted; the batch's content, whatever its order): ``batch_size`` when no two rows
  are neighbours, 1 when the batch is one run of one file;
- files: the distinct files among a batch's rows;
- correlation: Pearson's r between a row's index in the epoch and its index in the
  unshuffled read (``read_batch=0``, no shuffle, the same interleave; with
  ``--every-source``, the source's own unshuffled read): 1 when nothing moved; and the
  mean distance, in rows, between the two.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402
from benchmarks.core import machine  # noqa: E402

BATCHES = (32, 256, 4096)
SHUFFLES = (100, 1_000, 10_000)
#: The every-source table's batches and buffers.
SOURCE_BATCHES = (32, 256, 1024, 4096)
SOURCE_SHUFFLES = (10, 100, 1_000, 10_000)
#: The every-source table's sources: (name, how it is read).
SOURCES = (
    ("TFRecord", "read_batch=64 (default)"),
    ("TFRecord", "read_batch=0"),
    ("Parquet", "pyarrow"),
    ("columnar", "chunks of 1,024"),
    ("columnar", "shuffle_rows=True"),
    ("wrapped", "rows"),
    ("wrapped", "batches of 1,024, rebatch=True"),
)
FILES = 8
ROWS = FILES * 16_384


def epoch_rows(pipeline: Any, config: Any) -> list[Any]:
    """The row ids of one epoch, batch by batch."""
    return [f["dense"]["row_id"].numpy().astype("int64").ravel() for f, _ in pipeline.build(config)]


def measure(
    batches: list[Any], *, rows: int, files: int, reference: Any, unshuffled: list[Any] = ()
) -> dict[str, float]:
    """identical (against ``unshuffled``'s batches), runs, files per batch, correlation
    and mean distance (see the docstring)."""
    import numpy as np

    per_file = rows // files
    full = [b for b in batches if len(b) == len(batches[0])]
    runs = [1 + int(np.count_nonzero(np.diff(np.sort(b)) != 1)) for b in full]
    distinct = [len(np.unique(b // per_file)) for b in full]
    order = np.concatenate(batches)
    assert len(order) == rows and len(np.unique(order)) == rows, "not every row exactly once"
    plain = {np.sort(b).tobytes() for b in unshuffled}
    moved = reference[order]
    at = np.arange(rows)
    return {
        "identical": sum(np.sort(b).tobytes() in plain for b in batches),
        "batches": len(batches),
        "runs": float(np.mean(runs)),
        "files": float(np.mean(distinct)),
        "r": float(np.corrcoef(at, moved)[0, 1]),
        "distance": float(np.mean(np.abs(at - moved))),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--files", type=int, default=FILES)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cycle", type=int, default=0, help="interleave_cycle_length (0: AUTOTUNE)")
    p.add_argument(
        "--every-source",
        action="store_true",
        help="every source at batches 32-1,024 and buffers 10-10,000 (the mixing-sources section)",
    )
    p.add_argument("--data-dir", help="keep the data here (default: a temporary directory)")
    p.add_argument("--write", action="store_true", help="replace the section in RESULTS.md")
    args = parse_args(p, argv, smoke=dict(rows=2_048))

    t0 = time.time()
    machine_line = machine()
    with tempfile.TemporaryDirectory(prefix="tfinput-mixing-") as tmp:
        data = Path(args.data_dir or tmp)
        if args.smoke or not args.every_source:
            shuffles, batches = ((100,), (32,)) if args.smoke else (SHUFFLES, BATCHES)
            results = tfrecord_plans(args, data, shuffles, batches)
            report(args, results, shuffles, batches, machine_line, time.time() - t0)
        if args.smoke or args.every_source:
            t0 = time.time()
            shuffles, batches = ((10,), (32,)) if args.smoke else (SOURCE_SHUFFLES, SOURCE_BATCHES)
            results = every_source(args, data, shuffles, batches)
            report_sources(args, results, shuffles, batches, machine_line, time.time() - t0)
    return 0


def _ids_only() -> Any:
    from tfinput.schema import Dense, Label, Schema

    return Schema(features=(Dense(name="row_id", dtype="int64"),), labels=(Label(name="label"),))


def _base_config(args: Any) -> Any:
    from tfinput.config import AUTOTUNE, PipelineConfig

    return PipelineConfig(
        deterministic=True,
        drop_remainder=False,
        shuffle_seed=args.seed,
        interleave_cycle_length=args.cycle or AUTOTUNE,
    )


def tfrecord_plans(
    args: Any, data: Path, shuffles: tuple[int, ...], batches: tuple[int, ...]
) -> dict[tuple[int, int, int], dict[str, float]]:
    """TFRecord with ``read_batch=0`` and the default, by (buffer, batch, read_batch)."""
    import numpy as np

    import tfinput
    from tfinput import testing
    from tfinput.config import PipelineConfig

    out = data / f"mixing-{args.rows}-{args.files}"
    if not out.exists():
        testing.write_tfrecord(out, testing.small_schema(), rows=args.rows, files=args.files)
    pipeline = tfinput.tfrecord(sorted(map(str, out.iterdir())), _ids_only())
    base = _base_config(args)
    unshuffled = np.concatenate(epoch_rows(pipeline, base.replace(batch_size=4096, read_batch=0)))
    reference = np.empty(args.rows, np.int64)
    reference[unshuffled] = np.arange(args.rows)
    results: dict[tuple[int, int, int], dict[str, float]] = {}
    for s in shuffles:
        for b in batches:
            for r in (0, PipelineConfig().read_batch):
                config = base.replace(batch_size=b, shuffle_buffer=s, read_batch=r)
                results[s, b, r] = measure(
                    epoch_rows(pipeline, config),
                    rows=args.rows,
                    files=args.files,
                    reference=reference,
                )
            print(f"shuffle {s:,} batch {b}: done", file=sys.stderr, flush=True)
    return results


def _source_pipelines(args: Any, data: Path) -> dict[tuple[str, str], tuple[Any, dict]]:
    """Each of `SOURCES` over the same rows: ``(pipeline, config overrides)``."""
    import numpy as np
    import tensorflow as tf

    import tfinput
    from tfinput import testing

    schema, ids = testing.small_schema(), _ids_only()
    out = data / f"mixing-sources-{args.rows}-{args.files}"
    if not (out / "columnar" / "manifest.json").exists():
        cols = testing.generate(schema, args.rows, seed=0)
        for fmt in ("tfrecord", "parquet", "columnar"):
            write = getattr(testing, f"write_{fmt}")
            write(out / fmt, schema, rows=args.rows, files=args.files, columns=cols)
    rows = {"row_id": np.arange(args.rows), "label": np.zeros(args.rows, np.float32)}

    def in_order() -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices(rows)

    tfrecord = tfinput.tfrecord(sorted(map(str, (out / "tfrecord").iterdir())), ids)
    return {
        SOURCES[0]: (tfrecord, {}),
        SOURCES[1]: (tfrecord, {"read_batch": 0}),
        SOURCES[2]: (tfinput.parquet(sorted(map(str, (out / "parquet").iterdir())), ids), {}),
        SOURCES[3]: (tfinput.columnar(out / "columnar", ids), {}),
        SOURCES[4]: (tfinput.columnar(out / "columnar", ids, shuffle_rows=True), {}),
        SOURCES[5]: (tfinput.wrap(in_order, ids), {}),
        SOURCES[6]: (
            tfinput.wrap(lambda: in_order().batch(1024), ids, batched=True, rebatch=True),
            {},
        ),
    }


def every_source(
    args: Any, data: Path, shuffles: tuple[int, ...], batches: tuple[int, ...]
) -> dict[tuple[tuple[str, str], int, int], dict[str, float]]:
    """Every source of `SOURCES`, by (source, buffer, batch), each against its own
    unshuffled read at the same batch size."""
    import numpy as np

    base = _base_config(args)
    results = {}
    for source, (pipeline, knobs) in _source_pipelines(args, data).items():
        for b in batches:
            plain = epoch_rows(pipeline, base.replace(batch_size=b, **knobs))
            reference = np.empty(args.rows, np.int64)
            reference[np.concatenate(plain)] = np.arange(args.rows)
            for s in shuffles:
                config = base.replace(batch_size=b, shuffle_buffer=s, **knobs)
                results[source, s, b] = measure(
                    epoch_rows(pipeline, config),
                    rows=args.rows,
                    files=args.files,
                    reference=reference,
                    unshuffled=plain,
                )
            print(f"{' '.join(source)} batch {b}: done", file=sys.stderr, flush=True)
    return results


def _finish(args: Any, name: str, lines: list[str]) -> None:
    lines.append(f"<!-- {name}:end -->")
    text = "\n".join(lines)
    print(text)
    if args.write:  # under --smoke, to the smoke directory's RESULTS.md
        write_section(name, text)


def report(
    args: Any,
    results: dict[tuple[int, int, int], dict[str, float]],
    shuffles: tuple[int, ...],
    batches: tuple[int, ...],
    machine_line: str,
    total_s: float,
) -> None:
    from tfinput.config import PipelineConfig

    rb = PipelineConfig().read_batch
    cycle = f"interleave_cycle_length={args.cycle}" if args.cycle else "AUTOTUNE interleave cycle"
    name = f"mixing-cycle{args.cycle}" if args.cycle else "mixing"
    lines = [
        f"<!-- {name}:begin (generated by benchmarks/mixing.py) -->",
        "## Mixing at every batch size: the default `read_batch` against `read_batch=0`"
        + (f", {args.cycle} files read at once" if args.cycle else ""),
        "",
        f"Machine: {machine_line}. Method: `python benchmarks/mixing.py"
        + (f" --cycle {args.cycle}" if args.cycle else "")
        + "` (see its docstring): one epoch of "
        f"{args.rows:,} rows in {args.files} TFRecord files (consecutive `row_id`s per file), "
        f"{cycle}, `deterministic=True`, `shuffle_seed={args.seed}`, each cell with "
        f"`read_batch=0` and the default `read_batch={rb}` at the same `shuffle_buffer`. "
        "runs: runs of consecutive rows of one file among a batch's rows (higher mixes "
        "more; the batch size when no two rows are neighbours); files: distinct files "
        "per batch; r: correlation of a row's place in the epoch with its place in the "
        "unshuffled read (lower mixes more); distance: mean rows between the two. "
        f"Each figure is `read_batch=0` / `read_batch={rb}`. Total time {total_s:.0f} s"
        + (" (--smoke: a check of the script, not a result)." if args.smoke else "."),
        "",
        "| shuffle_buffer | batch | runs per batch | files per batch | r | distance |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for s in shuffles:
        for b in batches:
            a, d = results[s, b, 0], results[s, b, rb]
            lines.append(
                f"| {s:,} | {b:,} | {a['runs']:.1f} / {d['runs']:.1f} | "
                f"{a['files']:.2f} / {d['files']:.2f} | {a['r']:.4f} / {d['r']:.4f} | "
                f"{a['distance']:,.0f} / {d['distance']:,.0f} |"
            )
    _finish(args, name, lines)


def report_sources(
    args: Any,
    results: dict[tuple[tuple[str, str], int, int], dict[str, float]],
    shuffles: tuple[int, ...],
    batches: tuple[int, ...],
    machine_line: str,
    total_s: float,
) -> None:
    cycle = f"interleave_cycle_length={args.cycle}" if args.cycle else "AUTOTUNE interleave cycle"
    name = "mixing-sources" + (f"-cycle{args.cycle}" if args.cycle else "")
    lines = [
        f"<!-- {name}:begin (generated by benchmarks/mixing.py --every-source) -->",
        "## Mixing on every source: TFRecord, Parquet, columnar and wrapped datasets",
        "",
        f"Machine: {machine_line}. Method: `python benchmarks/mixing.py --every-source"
        + (f" --cycle {args.cycle}" if args.cycle else "")
        + "` (see its docstring): one epoch of "
        f"{args.rows:,} rows in {args.files} files of consecutive `row_id`s (TFRecord, "
        "Parquet, columnar records in chunks of 1,024 rows, read as they are and with "
        "`shuffle_rows=True`; the same rows in order as a wrapped dataset of rows and one "
        "of batches of 1,024 re-cut), "
        f"{cycle}, `deterministic=True`, `shuffle_seed={args.seed}`. identical: batches "
        "whose rows are exactly those of a batch of the source's unshuffled read at the "
        "same batch size, of all batches (0: every batch mixes rows across batch "
        "boundaries); runs: runs of consecutive rows of one file among a batch's rows "
        "(higher mixes more; the batch size when no two rows are neighbours); files: "
        "distinct files per batch; r: correlation of a row's place in the epoch with its "
        "place in the source's unshuffled read (lower mixes more); distance: mean rows "
        f"between the two. Total time {total_s:.0f} s"
        + (" (--smoke: a check of the script, not a result)." if args.smoke else "."),
    ]
    heads = [f"{kind} {read}" for kind, read in SOURCES]
    tables = (
        ("identical batches", lambda m: f"{m['identical']:,} of {m['batches']:,}"),
        ("runs per batch / files per batch", lambda m: f"{m['runs']:.1f} / {m['files']:.2f}"),
        ("r / distance", lambda m: f"{m['r']:.4f} / {m['distance']:,.0f}"),
    )
    for title, cell in tables:
        lines += [
            "",
            f"**{title}**",
            "",
            "| shuffle_buffer | batch | " + " | ".join(heads) + " |",
            "|---:|---:|" + "---:|" * len(heads),
        ]
        for s in shuffles:
            for b in batches:
                cells = [cell(results[source, s, b]) for source in SOURCES]
                lines.append(f"| {s:,} | {b:,} | " + " | ".join(cells) + " |")
    _finish(args, name, lines)


if __name__ == "__main__":
    sys.exit(main())
