"""JAX profile vs step bound: does the device compute per step that `tfinput profile`
reads from JAX's own trace agree with the step bound `tune` measures for the same model
and batch?

    KERAS_BACKEND=jax python benchmarks/jax_profile.py            # print the section
    KERAS_BACKEND=jax python benchmarks/jax_profile.py --write    # also into RESULTS.md

Workload: criteo-like rows in TFRecord files, the built-in Keras ranking model
(`tfinput.models.ranking_model`, ``--step ranking``: ``train_on_batch``) on the JAX
backend, one batch size. Each round, in this order, on the same model object:

1. the step bound, as `tune` measures it (`tuners._advice.step_bound_stats`: the step fed
   one cached batch over and over; ``--windows`` windows of ``--window-batches``
   batches): its median examples/s, as milliseconds per step;
2. a profile, as `tfinput profile` takes it (`profiles._capture`, then
   `profiles.analyze`): ``--warmup`` steps, ``--steps`` marked steps; the medians of
   device compute, host-to-device transfer and step time from JAX's trace.

Rounds repeat ``--rounds`` times (interleaved: bound, profile, bound, profile, ...); the
table gives each round and the median ratio device compute / step bound, with its range.
On a GPU the device compute is the kernels on the device's streams; on the CPU it is the
XLA executions, and the step bound also pays Keras' per-call host work, so the ratio is
expected below 1 there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import core  # noqa: E402

from benchmarks._results import parse_args, write_section  # noqa: E402


def one_round(
    pipeline: Any, config: Any, step: Any, args: argparse.Namespace, keep: Path | None = None
) -> dict[str, Any]:
    import profiles
    from tfinput._src.measurement.target import Target
    from tfinput.bench import MeasureOptions
    from tuners._advice import step_bound_stats

    bound = step_bound_stats(
        Target.of(pipeline),
        config,
        step,
        measurement=MeasureOptions(
            windows=args.windows, window_batches=args.window_batches, warmup_batches=3
        ),
    )
    bound_ms = config.batch_size / bound.median * 1e3
    with tempfile.TemporaryDirectory() as d:
        result = profiles.capture(
            pipeline.build(config).repeat(),
            step,
            logdir=Path(d),
            config=profiles.CaptureConfig(steps=args.steps, warmup=args.warmup),
        )
        if keep is not None:
            # JAX's own trace, for reading it again offline (one file per round).
            for i, f in enumerate(sorted((result.run_dir / "jax").rglob("*.xplane.pb"))):
                shutil.copy(f, keep.with_name(f"{keep.name}-{i}.xplane.pb"))
        analysis = profiles.analyze(result.logdir, run=result.run_dir.name)
    jax = analysis.jax_device
    if jax is None:
        raise SystemExit("no JAX trace in the profile: is KERAS_BACKEND=jax set?")
    return {
        "bound_ms": bound_ms,
        "compute_ms": jax.compute_ms,
        "transfer_ms": jax.transfer_ms,
        "step_ms": jax.step_ms,
        "platform": jax.platform,
    }


def mlp_step(pipeline: Any, config: Any, hidden: int, layers: int) -> Any:
    """``--step jax-mlp``: a JAX step whose device work dwarfs its dispatch (an MLP of
    ``layers`` ``hidden``-wide layers over the batch's float features, one SGD update),
    fed by `tfinput.steps.jax_step`: its step bound is device time, so the profile's
    device compute should match it."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from tfinput import steps
    from tfinput._src.measurement.steps.base import to_numpy_tree

    def features(batch: Any) -> Any:
        leaves = [x for x in jax.tree.leaves(batch) if jnp.issubdtype(x.dtype, jnp.floating)]
        return jnp.concatenate([jnp.reshape(x, (x.shape[0], -1)) for x in leaves], axis=1)

    width = features(to_numpy_tree(next(iter(pipeline.build(config))))).shape[1]
    rng = np.random.default_rng(0)
    dims = [width, *([hidden] * layers), 1]
    params = [
        jnp.asarray(rng.normal(0, 1 / np.sqrt(i), (i, o)), jnp.float32)
        for i, o in zip(dims, dims[1:])
    ]

    def loss(params: Any, x: Any) -> Any:
        for w in params[:-1]:
            x = jax.nn.relu(x @ w)
        return jnp.mean((x @ params[-1]) ** 2)

    def train(params: Any, batch: Any) -> Any:
        grads = jax.grad(loss)(params, features(batch))
        return [w - 1e-6 * g for w, g in zip(params, grads)]

    return steps.jax_step(train, params)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument(
        "--batch-size",
        type=lambda v: [int(b) for b in v.split(",")],
        default=[1024],
        help="one batch size, or several separated by commas (rounds run for each)",
    )
    p.add_argument("--data-dir", default=str(HERE / ".data"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--window-batches", type=int, default=20)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument(
        "--keep-traces", type=Path, help="copy JAX's trace of each batch size's first round here"
    )
    p.add_argument(
        "--step",
        choices=["ranking", "jax-mlp"],
        default="ranking",
        help="ranking: the Keras ranking model (train_on_batch); jax-mlp: a device-bound "
        "JAX step (see mlp_step)",
    )
    p.add_argument("--hidden", type=int, default=4096, help="jax-mlp: layer width")
    p.add_argument("--layers", type=int, default=4, help="jax-mlp: hidden layers")
    p.add_argument("--write", action="store_true")
    args = parse_args(
        p,
        argv,
        smoke=dict(  # the tiny JAX step (benchmarks/feed.py's smoke run trains the ranking one)
            rows=8_192,
            batch_size=[1024],
            rounds=1,
            windows=1,
            window_batches=2,
            steps=2,
            warmup=1,
            step="jax-mlp",
            hidden=64,
            layers=1,
        ),
    )
    if os.environ.get("KERAS_BACKEND") != "jax":
        raise SystemExit("run with KERAS_BACKEND=jax (the step must run on JAX)")

    import jax

    import tfinput
    from tfinput import models, steps
    from tfinput.config import PipelineConfig

    _, tf_files, _ = core.data(Path(args.data_dir), args.rows)
    schema = core.criteo_schema()
    pipeline = tfinput.tfrecord(tf_files, schema)
    ranking = steps.keras_step(models.ranking_model(schema)) if args.step == "ranking" else None
    if args.keep_traces is not None:
        args.keep_traces.mkdir(parents=True, exist_ok=True)
    rounds: dict[int, list[dict[str, Any]]] = {}
    for batch_size in args.batch_size:
        config = PipelineConfig.autotune(batch_size=batch_size)
        step = (
            ranking if ranking is not None else mlp_step(pipeline, config, args.hidden, args.layers)
        )
        rounds[batch_size] = []
        for i in range(args.rounds):
            keep = None
            if args.keep_traces is not None and i == 0:
                keep = args.keep_traces / f"batch{batch_size}"
            try:
                rounds[batch_size].append(one_round(pipeline, config, step, args, keep))
            except Exception:  # keep what the other batch sizes measure
                traceback.print_exc()
                break
            print(
                f"batch {batch_size} round {i + 1}/{args.rounds}: {rounds[batch_size][-1]}",
                file=sys.stderr,
            )
    rounds = {b: rs for b, rs in rounds.items() if rs}
    if not rounds:
        raise SystemExit("no round completed")
    platform = next(iter(rounds.values()))[0]["platform"]
    device = jax.devices()[0]
    key = "jax-profile" + ("" if platform == "cpu" else f"-{platform}")
    key += "" if args.step == "ranking" else f"-{args.step}"
    workload = (
        "the built-in Keras ranking model (`--step ranking`: `train_on_batch`) on the JAX backend"
        if args.step == "ranking"
        else f"a device-bound JAX step (`mlp_step`: {args.layers} layers {args.hidden} wide "
        "over the float features, one SGD update; `tfinput.steps.jax_step`)"
    )
    lines = [
        f"<!-- {key}:begin (generated by benchmarks/jax_profile.py) -->",
        "### JAX profile: device compute per step vs the tuner's step bound"
        + ("" if platform == "cpu" else f" ({platform.upper()})")
        + ("" if args.step == "ranking" else f", {args.step} step"),
        "",
        f"Machine: {core.machine()}; JAX {jax.__version__} on {device.platform} "
        f"({getattr(device, 'device_kind', device.platform)}).",
        f"Workload: criteo-like {args.rows:,} rows in {len(tf_files)} TFRecord files, "
        f"{workload}. Each round: the step bound as `tune` measures it (one cached batch, "
        f"{args.windows} windows of {args.window_batches} batches, median), then a profile "
        f"as `tfinput profile` takes it ({args.warmup} warm-up, {args.steps} marked steps; "
        "medians from JAX's own trace). Rounds interleaved on one model object. "
        + (
            "Device compute = the union of kernel intervals on the GPU's streams."
            if platform == "gpu"
            else "Device compute = XLA executions on the CPU; the step bound also pays "
            "Keras' per-call host work."
        ),
        "",
        "| batch | round | step bound ms/step | device compute ms/step | host-to-device ms/step "
        "| profiled step ms | compute / bound | profiled step / bound |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    summary = []
    for batch_size, rs in rounds.items():
        ratios = [r["compute_ms"] / r["bound_ms"] for r in rs]
        step_ratios = [r["step_ms"] / r["bound_ms"] for r in rs]
        for i, (r, ratio, sr) in enumerate(zip(rs, ratios, step_ratios), 1):
            lines.append(
                f"| {batch_size} | {i} | {r['bound_ms']:.2f} | {r['compute_ms']:.2f} "
                f"| {r['transfer_ms']:.3f} | {r['step_ms']:.2f} | {ratio:.2f} | {sr:.2f} |"
            )
        summary.append(
            f"- batch {batch_size}: compute / bound median **{statistics.median(ratios):.2f}** "
            f"(rounds {min(ratios):.2f}-{max(ratios):.2f}); profiled step / bound median "
            f"{statistics.median(step_ratios):.2f} ({min(step_ratios):.2f}-{max(step_ratios):.2f})."
        )
    lines += ["", *summary, "", f"<!-- {key}:end -->"]
    section = "\n".join(lines)
    print(section)
    if args.write:
        write_section(key, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
