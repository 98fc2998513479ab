"""End to end: criteo-like data -> tfinput pipeline -> tune -> train a DCN-style model
with XLA, using the tuned config.

The tuner measures the real training loop (`model.fit`, `steps.keras_fit_step`), so it
searches the feeding knobs too: the packed layout and `steps_per_execution`. The tuned
config carries them; `build` honours the layout and the model is compiled with the
`steps_per_execution` it found. Runs on Keras's TensorFlow or JAX backend
(`KERAS_BACKEND=jax python examples/ranking_dcn.py`).

    python examples/ranking_dcn.py               # ~1-2 minutes on 2 cores
    python examples/ranking_dcn.py --quick       # a smoke run (~30 s): fewer features,
                                                 # the feeding knobs fixed

Replace `make_data` with your own files and schema (`tfinput schema infer`).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import tfinput
import tuners
from tfinput import models, steps, testing


def make_data(directory: str, rows: int, quick: bool = False) -> tfinput.Pipeline:
    if quick:  # every feature kind, a few of each: the step traces and compiles in seconds
        schema = testing.criteo_like_schema(
            n_dense=4, n_categorical=4, n_multi_hot=1, vocabulary_size=1_000, dim=8
        )
    else:
        schema = testing.criteo_like_schema(vocabulary_size=10_000, dim=8)
    files = testing.write_tfrecord(directory, schema, rows=rows, files=4)
    return tfinput.tfrecord(files, schema)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    rows, batch, trials = (4_096, 256, 3) if args.quick else (200_000, 4096, 12)

    with tempfile.TemporaryDirectory() as d:
        pipeline = make_data(d, rows, quick=args.quick)
        base = tfinput.PipelineConfig(batch_size=batch)
        # Tune the input pipeline against the real training step (a throwaway copy of
        # the model: tuning trains it on the data).
        probe = models.ranking_model(pipeline.schema, jit_compile=True)
        step = steps.keras_fit_step(probe)
        space = None  # the default: the tf.data knobs, the layout and steps_per_execution
        if args.quick:
            # The smoke run searches the tf.data knobs only: a new layout or
            # steps_per_execution means a new XLA compile of the step, each time.
            space = tuners.SearchSpace.for_pipeline(pipeline, step=step).fix(
                layout="per_feature", steps_per_execution=1
            )
        result = tuners.tune(
            pipeline,
            step=step,
            space=space,
            n_trials=trials,
            base=base,
            options=tuners.TuneOptions(
                measurement=tuners.MeasureOptions(windows=2, window_batches=4, warmup_batches=2),
                # The smoke run leaves out the extra measurements (the gain by knob, and a
                # columnar sample measured side by side when parsing bounds the input).
                confirmation=tuners.ConfirmOptions(
                    confirm_top=1,
                    confirm_windows=2,
                    breakdown=not args.quick,
                    advise_format=not args.quick,
                ),
            ),
        )
        print(
            f"tuned config ({result.best_name}), confirmed "
            f"{result.saved_stats.median:,.0f} examples/s, "
            f"{result.ratio_vs_autotune or 1:.2f}x autotune"
        )
        for line in result.verdicts:  # beats autotune? input-bound at all?
            print("verdict:", line)

        # Train a fresh model with it: every batch has static shapes, so XLA compiles
        # once. (The synthetic labels are random clicks: expect an AUC near 0.5.)
        best = result.best_config
        model = models.ranking_model(
            pipeline.schema, jit_compile=True, steps_per_execution=best.steps_per_execution
        )
        ds = pipeline.build(best)  # per_feature or packed: the model takes either
        t = time.perf_counter()
        history = model.fit(ds, epochs=1, verbose=0)
        seconds = time.perf_counter() - t
        print(
            f"one epoch: loss {history.history['loss'][-1]:.4f}, "
            f"AUC {history.history['auc'][-1]:.3f}, {rows / seconds:,.0f} examples/s"
        )


if __name__ == "__main__":
    main()
