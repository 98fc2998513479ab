"""Feeding benchmark: the ranking model on Keras 3's JAX backend, fed by tfinput.

    KERAS_BACKEND=jax python benchmarks/feed.py            # measure, print the section
    KERAS_BACKEND=jax python benchmarks/feed.py --write    # also replace it in RESULTS.md
    KERAS_BACKEND=jax python benchmarks/feed.py --quick    # tiny run: checks the script

Three tables, one run (issue "Feed a real accelerator"):

1. **Step bound and fed rate.** tfinput's built-in ranking model (`models.ranking_model`,
   XLA-compiled) trained with ``train_on_batch`` (`steps.keras_step`) and with
   ``model.fit(steps_per_execution=k)`` for k in 1, 8, 32 (`steps.keras_fit_step`), on
   batches in the ``per_feature`` and the ``packed`` layout. The *step bound* feeds one
   cached batch repeated (the step alone); the *fed* rates read criteo-like TFRecord and
   columnar records through tfinput at autotune. One model per row, compiled once, so
   every cell of a row trains the same model.
2. **Host CPU cost of packing.** Process CPU seconds per example of the same pipeline,
   on one thread, emitting per-feature and packed batches, alone and with each batch put
   on the JAX device; target: packing costs at most 3% more. ``--cost-only`` measures
   and rewrites this table alone.
3. **Host to device.** ``jax.device_put`` of one batch plus a trivial jitted step, the
   batch as one array per feature vs packed.

Method: every cell is measured in ``--rounds`` rounds; each round visits every cell once
in a rotating order (interleaving cancels the drift of this shared machine). A cell's
measurement is `tuners._objective.measure`: a fresh iterator, warm-up batches untimed,
then one timed window. Figures are medians over rounds with min-max.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import output, parse_args, write_section  # noqa: E402
from benchmarks.columnar import columnar_data  # noqa: E402
from benchmarks.core import data, machine  # noqa: E402

ROWS = 200_000
BATCH = 4096  # the input-only tables
STEP_BATCH = 1024  # the training-step table: a CPU trains the model at ~10k examples/s
SPE = (1, 8, 32)


def _median(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def _fmt(values: list[float]) -> str:
    med, lo, hi = _median(values)
    return f"{med / 1e3:,.1f}k ({lo / 1e3:,.1f}-{hi / 1e3:,.1f})"


def _rounds(
    cells: dict[str, Callable[[], float]], rounds: int, say: Any, deadline: float | None = None
) -> dict[str, list]:
    """Every cell once per round, the order rotated each round; no new round starts
    after ``deadline`` (`time.monotonic`), so a lent machine's time bounds the run."""
    out: dict[str, list[float]] = {name: [] for name in cells}
    names = list(cells)
    for r in range(rounds):
        if r and deadline is not None and time.monotonic() > deadline:
            say(f"deadline: stopping after {r} of {rounds} rounds")
            break
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            out[name].append(cells[name]())
        say(f"round {r + 1}/{rounds} done")
    return out


def step_table(pipelines: dict[str, Any], schema: Any, args: argparse.Namespace, say: Any):
    import tensorflow as tf

    from tfinput import models, steps
    from tfinput.bench import WindowPlan
    from tfinput.config import PipelineConfig
    from tuners._objective import measure

    rows: dict[tuple[str, str], Any] = {}
    for layout in args.layouts:
        rows[(layout, "train_on_batch")] = steps.keras_step(
            models.ranking_model(schema, jit_compile=True)
        )
        for k in args.spe:
            rows[(layout, f"fit spe {k}")] = steps.keras_fit_step(
                models.ranking_model(schema, jit_compile=True)
            )
    cached_batches: dict[str, Any] = {}

    def cached(layout: str) -> Callable[[Any], Any]:
        def make(cfg: PipelineConfig) -> Any:
            if layout not in cached_batches:
                first = next(iter(pipelines["TFRecord"].build(cfg)))
                cached_batches[layout] = first
            return tf.data.Dataset.from_tensors(cached_batches[layout]).repeat()

        return make

    cells: dict[str, Callable[[], float]] = {}
    for (layout, mode), step in rows.items():
        spe = int(mode.rsplit(" ", 1)[1]) if mode.startswith("fit") else 1
        config = PipelineConfig(batch_size=args.step_batch, layout=layout, steps_per_execution=spe)
        window = max(args.window_batches, spe)
        window -= window % spe
        sources = {"step bound": cached(layout), **pipelines}
        for source, target in sources.items():

            def cell(target=target, step=step, config=config, window=window, spe=spe) -> float:
                m = measure(
                    target,
                    config,
                    step,
                    plan=WindowPlan(
                        windows=1, window_batches=window, warmup_batches=max(args.warmup, spe)
                    ),
                )
                return m.median

            cells[f"{layout}|{mode}|{source}"] = cell
    return _rounds(cells, args.rounds, say, args.deadline)


def packing_cost(pipelines: dict[str, Any], args: argparse.Namespace, say: Any):
    """Process CPU microseconds per example, per source, layout and feed: ``input`` (the
    pipeline alone) and ``to device`` (each batch also converted to numpy and put on the
    JAX device, as `steps.jax_step` and `steps.keras_step` on JAX do)."""
    import jax
    import tensorflow as tf

    from tfinput.config import PipelineConfig

    def put(batch: Any) -> None:
        arrays = jax.device_put([t.numpy() for t in tf.nest.flatten(batch)])
        jax.block_until_ready(arrays)

    cells = {}
    # --smoke: the batches put on the device only (that feed reads them as "input" does)
    feeds = ("to device",) if args.smoke else ("input", "to device")
    for source, pipeline in pipelines.items():
        for feed in feeds:
            for layout in ("per_feature", "packed"):
                # One thread for everything: the CPU time a batch costs, without
                # tf.data's autotuning, idle polling or thread hand-offs (which vary far
                # more than packing costs).
                config = PipelineConfig.naive(
                    batch_size=BATCH,
                    layout=layout,
                    private_threadpool_size=1,
                    max_intra_op_parallelism=1,
                )
                dataset = pipeline.build(config).repeat()

                def cell(dataset=dataset, feed=feed) -> float:
                    it = iter(dataset)
                    for _ in range(args.warmup):
                        put(next(it))
                    start = time.process_time()
                    for _ in range(args.input_batches):
                        batch = next(it)
                        if feed == "to device":
                            put(batch)
                    return (time.process_time() - start) / (args.input_batches * BATCH) * 1e6

                cells[f"{source}|{feed}|{layout}"] = cell
    return _paired_rounds(cells, args.cost_rounds, say)


def _paired_rounds(
    cells: dict[str, Callable[[], float]], rounds: int, say: Any
) -> dict[str, list[float]]:
    """Like `_rounds`, but the two layouts of one source and feed are measured back to
    back (which goes first alternates by round), so each per-round ratio compares two
    measurements a second apart rather than spread over the round."""
    out: dict[str, list[float]] = {name: [] for name in cells}
    keys = list(dict.fromkeys(name.rsplit("|", 1)[0] for name in cells))
    for r in range(rounds):
        order = keys[r % len(keys) :] + keys[: r % len(keys)]
        layouts = ("per_feature", "packed") if r % 2 == 0 else ("packed", "per_feature")
        for key in order:
            for layout in layouts:
                out[f"{key}|{layout}"].append(cells[f"{key}|{layout}"]())
        say(f"round {r + 1}/{rounds} done")
    return out


def cost_section(cost: dict, args: argparse.Namespace) -> str:
    """The packing-cost table, a section of its own (``--cost-only`` rewrites it alone)."""
    lines = [
        "<!-- feedcost:begin (generated by benchmarks/feed.py) -->",
        "### Host CPU cost of packing",
        "",
        f"Process CPU microseconds per example, batch {BATCH}, the pipeline on one thread "
        "(`map_parallelism=1, prefetch=0, private_threadpool_size=1, "
        "max_intra_op_parallelism=1`: no autotuning or idle threads in the figure), "
        f"{args.input_batches} batches per cell after {args.warmup} warm-up batches, "
        f"{args.cost_rounds} rounds; in each round the two layouts of a row are measured "
        "back to back (which goes first alternates) and the rows in a rotating order. "
        "*input*: the "
        "pipeline alone; *to device*: each batch also converted to numpy and put on the "
        "JAX device (`jax.device_put`, CPU device here), which is what a JAX or "
        "Keras-on-JAX step does with it. Paired ratio: median of the per-round "
        "packed / per_feature ratios (min-max); target: packed <= 1.03x.",
        f"Machine: {machine()}.",
        "",
        "| source | feed | per_feature | packed | packed / per_feature |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for key in dict.fromkeys(k.rsplit("|", 1)[0] for k in cost):
        source, feed = key.split("|")
        a, b = cost[f"{key}|per_feature"], cost[f"{key}|packed"]
        paired = sorted(y / x for x, y in zip(a, b))
        lines.append(
            f"| {source} | {feed} | {statistics.median(a):.2f} ({min(a):.2f}-{max(a):.2f}) | "
            f"{statistics.median(b):.2f} ({min(b):.2f}-{max(b):.2f}) | "
            f"{statistics.median(paired):.3f}x ({paired[0]:.3f}-{paired[-1]:.3f}) |"
        )
    lines.append("<!-- feedcost:end -->")
    return "\n".join(lines)


def transfer_cost(pipeline: Any, args: argparse.Namespace) -> dict[str, list[float]]:
    import jax
    import tensorflow as tf

    from tfinput.config import PipelineConfig

    batches = {}
    for layout in ("per_feature", "packed"):
        batch = next(iter(pipeline.build(PipelineConfig(batch_size=BATCH, layout=layout))))
        batches[layout] = [a.numpy() for a in tf.nest.flatten(batch)]
    trivial = jax.jit(lambda xs: sum(x.reshape(-1)[0].astype("float32") for x in xs))
    out: dict[str, list[float]] = {k: [] for k in batches}
    for arrays in batches.values():
        trivial(jax.device_put(arrays)).block_until_ready()
    for _ in range(args.rounds):
        for layout, arrays in batches.items():
            start = time.perf_counter()
            for _ in range(20):
                trivial(jax.device_put(arrays)).block_until_ready()
            out[layout].append((time.perf_counter() - start) / 20 * 1e3)
    out["arrays"] = [float(len(batches["per_feature"])), float(len(batches["packed"]))]
    return out


def _step_lines(step: dict) -> list[str]:
    """The step-bound / fed-rate table and the packed-over-per-feature ratios."""
    sources = [
        s for s in ("step bound", "TFRecord", "columnar") if any(k.endswith(s) for k in step)
    ]
    lines = [
        "### Step bound and fed rate (examples/s)",
        "",
        "| layout | step | " + " | ".join(sources) + " | fed / bound (columnar) |",
        "| --- | --- | " + " | ".join("---:" for _ in sources) + " | ---: |",
    ]
    by_row: dict[tuple[str, str], dict[str, list[float]]] = {}
    for key, values in step.items():
        layout, mode, source = key.split("|")
        by_row.setdefault((layout, mode), {})[source] = values
    for (layout, mode), cells in by_row.items():
        share = statistics.median(cells[sources[-1]]) / statistics.median(cells["step bound"])
        row = " | ".join(_fmt(cells[s]) for s in sources)
        lines.append(f"| {layout} | {mode} | {row} | {share:.0%} |")
    lines += ["", "Packed over per-feature, same step and source (ratio of medians):", ""]
    lines += [
        "| step | " + " | ".join(sources) + " |",
        "| --- | " + " | ".join("---:" for _ in sources) + " |",
    ]
    for mode in dict.fromkeys(m for _, m in by_row):
        if ("packed", mode) not in by_row or ("per_feature", mode) not in by_row:
            continue  # --smoke: one layout
        ratios = [
            statistics.median(by_row[("packed", mode)][s])
            / statistics.median(by_row[("per_feature", mode)][s])
            for s in sources
        ]
        lines.append(f"| {mode} | " + " | ".join(f"{r:.2f}x" for r in ratios) + " |")
    return lines


def section(step: dict, cost: dict, transfer: dict, args: argparse.Namespace) -> str:
    import jax
    import keras

    lines = [
        "<!-- feed:begin (generated by benchmarks/feed.py) -->",
        "## Feeding the step: layouts, steps_per_execution, Keras on JAX",
        "",
        "Regenerate with `KERAS_BACKEND=jax python benchmarks/feed.py --write`.",
        "",
        "### Machine",
        "",
        f"- {machine()}",
        f"- Keras {keras.__version__} on the {keras.config.backend()} backend, JAX "
        f"{jax.__version__} ({jax.devices()[0].platform}); no GPU on this machine",
        f"- generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "### Method",
        "",
        f"- criteo-like synthetic, {args.rows:,} rows (13 dense, 26 ids, 4 multi-hot lists "
        f"of 0-19 ids); 8 TFRecord files and the same rows as columnar records",
        "- model: `tfinput.models.ranking_model(schema)` (DCN-style, XLA-compiled), one "
        "model per row; `train_on_batch` = `steps.keras_step`, `fit spe k` = "
        "`steps.keras_fit_step` with `PipelineConfig(steps_per_execution=k)`",
        f"- training-step table: batch {args.step_batch} (JAX on 2 CPU cores trains this "
        "model at about 10k examples/s; a batch of 4096 would make each cell minutes); "
        "step bound: one cached batch repeated; fed: the tfinput pipeline at autotune",
        f"- each cell: `tuners._objective.measure`, fresh iterator, {args.warmup}+ warm-up "
        f"batches, one window of {args.window_batches} batches (rounded to a multiple of "
        f"k); {args.rounds} rounds, cells visited in a rotating order; median (min-max)",
        "",
    ]
    lines += _step_lines(step)
    lines += [
        "",
        cost_section(cost, args) if cost else "",
    ]
    n_per, n_packed = (int(x) for x in transfer["arrays"])
    lines += [
        "",
        "### Host to device (`jax.device_put` + a trivial jitted step, CPU device)",
        "",
        "| layout | arrays per batch | ms per batch |",
        "| --- | ---: | ---: |",
        f"| per_feature | {n_per} | {statistics.median(transfer['per_feature']):.2f} |",
        f"| packed | {n_packed} | {statistics.median(transfer['packed']):.2f} |",
        "",
        'GPU figures: the next section ("Feeding the step on a GPU"), the same script '
        "on an H100 host (`benchmarks/device.sh`).",
        "<!-- feed:end -->",
    ]
    return "\n".join(lines)


def gpu_section(step: dict, transfer: dict, args: argparse.Namespace) -> str:
    """The same tables measured on an accelerator (``--write`` on a GPU host writes this
    section, keeping the CPU one)."""
    import jax
    import keras

    dev = jax.devices()[0]
    rounds = min(len(v) for v in step.values())
    bound = {k: statistics.median(v) for k, v in step.items() if k.endswith("|step bound")}
    spe_max = max(args.spe)
    per = bound.get(f"per_feature|fit spe {spe_max}|step bound")
    packed = bound.get(f"packed|fit spe {spe_max}|step bound")
    n_per, n_packed = (int(x) for x in transfer["arrays"])
    lines = [
        "<!-- feedgpu:begin (generated by benchmarks/feed.py on a GPU host) -->",
        f"## Feeding the step on a GPU: {dev.device_kind}",
        "",
        "Regenerate on a GPU host (`../shared/device/README.md`; the script "
        "`benchmarks/device.sh` does all of it in one lent-machine call): "
        "`KERAS_BACKEND=jax python benchmarks/feed.py --write`.",
        "",
        "### Machine",
        "",
        f"- {machine()}",
        f"- {dev.device_kind} ({dev.platform}, {len(jax.devices())} device(s)); Keras "
        f"{keras.__version__} on the {keras.config.backend()} backend, JAX {jax.__version__}; "
        "TensorFlow is the CPU build (tf.data on the host cores)",
        f"- generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "### Method",
        "",
        f"- criteo-like synthetic, {args.rows:,} rows (13 dense, 26 ids, 4 multi-hot lists "
        "of 0-19 ids); 8 TFRecord files and the same rows as columnar records, repeated",
        "- model: `tfinput.models.ranking_model(schema)` (DCN-style), one model per row; "
        "`train_on_batch` = `steps.keras_step`, `fit spe k` = `steps.keras_fit_step` with "
        f"`PipelineConfig(steps_per_execution=k)`; batch {args.step_batch}",
        "- step bound: one cached batch repeated (the step alone); fed: the tfinput "
        "pipeline at autotune (no tuning)",
        f"- each cell: `tuners._objective.measure`, fresh iterator, {args.warmup}+ warm-up "
        f"batches, one window of {args.window_batches} batches (rounded to a multiple of "
        f"k); {rounds} rounds, cells visited in a rotating order; median (min-max)",
        "",
        *_step_lines(step),
        "",
    ]
    if per and packed:
        lines += [
            f'Target (issue "Feed a real accelerator"): the packed step bound at least 2x '
            f"the per-feature one, `fit spe {spe_max}`: {packed / 1e3:,.0f}k / "
            f"{per / 1e3:,.0f}k = **{packed / per:.2f}x**.",
            "",
        ]
    lines += [
        f"### Host to device (`jax.device_put` + a trivial jitted step, {dev.device_kind})",
        "",
        f"One batch of {BATCH}, 20 puts per measurement, {len(transfer['packed'])} "
        "measurements; median (min-max).",
        "",
        "| layout | arrays per batch | ms per batch |",
        "| --- | ---: | ---: |",
        f"| per_feature | {n_per} | {_ms(transfer['per_feature'])} |",
        f"| packed | {n_packed} | {_ms(transfer['packed'])} |",
        "<!-- feedgpu:end -->",
    ]
    return "\n".join(lines)


def _ms(values: list[float]) -> str:
    med, lo, hi = _median(values)
    return f"{med:.2f} ({lo:.2f}-{hi:.2f})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cost-rounds", type=int, default=21)
    p.add_argument(
        "--cost-only", action="store_true", help="measure and write only the packing cost"
    )
    p.add_argument("--step-batch", type=int, default=STEP_BATCH)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--window-batches", type=int, default=32)
    p.add_argument("--input-batches", type=int, default=60)
    p.add_argument("--spe", type=lambda s: [int(x) for x in s.split(",")], default=list(SPE))
    p.add_argument("--data-dir", default=str(HERE / ".data"))
    p.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="start no new round of the step table after this many seconds",
    )
    p.add_argument("--skip-cost", action="store_true", help="skip the packing-cost table")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--write", action="store_true", help="update RESULTS.md")
    args = parse_args(
        p,
        argv,
        smoke=dict(
            rows=8_192,
            rounds=1,
            cost_rounds=1,
            step_batch=256,
            warmup=1,
            window_batches=2,
            input_batches=2,
            spe=[],  # train_on_batch rows only: two models to compile, not four
        ),
    )
    if args.quick:
        args.rows, args.rounds, args.window_batches, args.input_batches = 40_000, 1, 4, 4
        args.cost_rounds = 1
        args.spe, args.warmup = [1, 2], 2

    args.deadline = time.monotonic() + args.deadline_s if args.deadline_s else None
    # --smoke: the step table trains one model (packed) fed from TFRecord; the packing
    # cost reads the columnar records
    args.layouts = ("packed",) if args.smoke else ("per_feature", "packed")
    import jax

    import tfinput

    on_gpu = jax.devices()[0].platform != "cpu"

    def say(msg: str) -> None:
        print(f"[feed {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    schema, tf_files, pq_files = data(Path(args.data_dir), args.rows)
    col_dir = columnar_data(Path(args.data_dir), args.rows, pq_files)
    pipelines = {
        "TFRecord": tfinput.tfrecord(tf_files, schema),
        "columnar": tfinput.columnar(col_dir),
    }
    cost: dict[str, list[float]] = {}
    if not (args.skip_cost or on_gpu):  # host CPU cost: measured on the CPU machine
        say("packing cost")  # first: the most sensitive to a loaded machine
        cost = packing_cost(
            {"columnar": pipelines["columnar"]} if args.smoke else pipelines, args, say
        )
    if args.cost_only:
        text = cost_section(cost, args)
        print(text)
        if args.write and not args.quick:
            write_section("feedcost", text)
            path = output("results-feed.json")
            raw = json.loads(path.read_text()) if path.exists() else {}
            raw["cost_us_per_example"] = cost
            path.write_text(json.dumps(raw, indent=1) + "\n")
        return 0
    say("step bound and fed rates")
    step = step_table(
        {"TFRecord": pipelines["TFRecord"]} if args.smoke else pipelines, schema, args, say
    )
    transfer = transfer_cost(pipelines["TFRecord"], args)
    if on_gpu:
        text = gpu_section(step, transfer, args)
        print(text)
        raw = {"step": step, "transfer_ms": transfer, "device": jax.devices()[0].device_kind}
        output("results-feed-gpu.json").write_text(json.dumps(raw, indent=1) + "\n")
        if args.write and not args.quick:
            write_section("feedgpu", text)
        return 0
    text = section(step, cost, transfer, args)
    print(text)
    if args.write and not args.quick:
        write_section("feed", text)
        raw = {"step": step, "cost_us_per_example": cost, "transfer_ms": transfer}
        (output("results-feed.json")).write_text(json.dumps(raw, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
