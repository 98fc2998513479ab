"""Criteo click logs -> tfinput -> a DCN ranking model, served with the training transforms.

The steps a user runs on their own data, on the real Criteo sample (200 rows of the
Kaggle display-advertising logs, ``../shared/data/criteo_sample.txt``):

1. ``tfinput convert``: the CSV into TFRecord files (150 rows to train, 50 held out);
2. ``tfinput schema infer`` on the training file, then a review of the schema in Python;
3. ``tfinput tune`` against the built-in ranking step, and the saved best config loaded;
4. the DCN ranking model (`tfinput.models.ranking_model`) trained with that config;
   log loss and AUC on the held-out rows;
5. ``tfinput export``: a SavedModel that takes serialized ``tf.train.Example`` bytes and
   applies the training transforms; its predictions on held-out records match the
   trained model's.

    python examples/criteo_dcn/main.py            # about a minute on 2 cores
    python examples/criteo_dcn/main.py --quick    # 2 tuning trials instead of 4 (CI)

The sample is found at ``shared/data`` beside the repository, or ``$TFINPUT_DATA_DIR``.
With 150 training rows the metrics are noisy; on your data, point step 1 at your files.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tfinput
from tfinput import cli

TRAIN_ROWS = 150  # the first 150 rows train, the last 50 are held out


def data_dir() -> Path:
    """The real sample data: ``$TFINPUT_DATA_DIR`` or ``shared/data`` beside the repo."""
    env = os.environ.get("TFINPUT_DATA_DIR") or os.environ.get("TFINPUT_SHARED_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "data"
    if not (path / "criteo_sample.txt").is_file():
        sys.exit(
            f"criteo_dcn: no criteo_sample.txt in {path}; set TFINPUT_DATA_DIR to the "
            "directory holding the project's sample data"
        )
    return path


def tfinput_cli(*argv: str) -> None:
    """Run one ``tfinput`` command in this process, echoing it as a shell line."""
    print(f"$ tfinput {shlex.join(argv)}", flush=True)
    code = cli.main(list(argv))
    if code != 0:
        sys.exit(f"criteo_dcn: tfinput {argv[0]} exited with {code}")


_START = time.perf_counter()


def step(title: str) -> None:
    print(f"\n== {title}  [{time.perf_counter() - _START:.0f} s]", flush=True)


def review(schema: tfinput.Schema) -> tfinput.Schema:
    """What a person changes after reading the inferred schema, done in code."""
    kinds: dict[str, int] = {}
    for f in schema.features:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    print(f"features: {kinds}; labels: {[lab.name for lab in schema.labels]}")
    sizes = sorted({t.vocabulary_size for t in schema.tables})
    print(f"{len(schema.tables)} tables, hash buckets {sizes}, dim {schema.tables[0].dim}")
    logged = [f.name for f in schema.dense if f.log1p]
    print(f"dense clipped at 0 then log1p: {logged}")
    # 1. Any Criteo column can be empty in the full logs, even where the sample never
    #    is: give every categorical a default ("" hashes to a bucket of its own) so a
    #    missing value is not an error in training or in serving.
    # 2. 150 rows do not support 32-wide embeddings: 8 is plenty.
    features = tuple(
        dataclasses.replace(f, default="") if isinstance(f, tfinput.Categorical) else f
        for f in schema.features
    )
    tables = tuple(dataclasses.replace(t, dim=8) for t in schema.tables)
    print('review: every categorical defaults to "" when missing; embedding dim 32 -> 8')
    return schema.replace(features=features, tables=tables)


def log_loss(labels: np.ndarray, logits: np.ndarray) -> float:
    """Binary cross-entropy on logits, computed stably."""
    return float(np.mean(np.logaddexp(0.0, logits) - labels * logits))


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC: the chance a random click scores above a random non-click (ties half)."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * ties)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 tuning trials instead of 4")
    p.add_argument("--work", help="keep every file here (default: a temporary directory)")
    args = p.parse_args()
    trials, epochs = (2, 10) if args.quick else (4, 10)
    csv = data_dir() / "criteo_sample.txt"

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = work / "data"

        step("1. convert the CSV to TFRecord (150 rows train, 50 held out)")
        tfinput_cli(
            "convert", str(csv), "--out", str(data), "--to", "tfrecord",
            "--label", "label", "--rows-per-file", str(TRAIN_ROWS), "--overwrite",
        )  # fmt: skip
        train, held_out = sorted(str(f) for f in data.glob("part-*.tfrecord"))

        step("2. infer the schema from the training file and review it")
        inferred = work / "inferred_schema.json"
        tfinput_cli("schema", "infer", train, "--label", "label", "--out", str(inferred))
        schema = review(tfinput.Schema.from_json(inferred))
        schema_path = work / "schema.json"
        schema.to_json(schema_path)
        print(f"reviewed schema written to {schema_path}")

        step(f"3. tune the input pipeline against the ranking step ({trials} trials)")
        tuned = work / "tune"
        tfinput_cli(
            "tune", train, "--schema", str(schema_path), "--step", "ranking",
            "--batch-size", "32", "--n-trials", str(trials), "--windows", "1",
            "--window-batches", "4", "--warmup-batches", "2", "--confirm-top", "1",
            "--confirm-windows", "1", "--no-breakdown", "--no-format-advice",
            "--out", str(tuned),
        )  # fmt: skip
        best = tfinput.PipelineConfig.from_json(tuned / "best_config.json")
        layout = best.layout or "per_feature"
        print(
            f"best config: batch_size {best.batch_size}, layout {layout}, "
            f"steps_per_execution {best.steps_per_execution}, prefetch {best.prefetch}, "
            f"map_parallelism {best.map_parallelism}"
        )

        step(f"4. train the DCN ranking model ({epochs} epochs) and evaluate on held-out rows")
        import keras  # Keras loads here

        from tfinput import models

        keras.utils.set_random_seed(0)  # the same initial weights every run
        pipeline = tfinput.tfrecord([train], schema)
        # XLA (jit_compile=True, the default) pays off on accelerators and long runs;
        # for a few dozen steps on CPU its compile time would dominate.
        model = models.ranking_model(
            schema, jit_compile=False, steps_per_execution=best.steps_per_execution
        )
        shuffled = best.replace(shuffle_buffer=TRAIN_ROWS, shuffle_seed=0)
        history = model.fit(
            pipeline.build(shuffled).repeat(),
            steps_per_epoch=TRAIN_ROWS // best.batch_size,
            epochs=epochs,
            verbose=0,
        )
        print(f"train loss {history.history['loss'][0]:.4f} -> {history.history['loss'][-1]:.4f}")
        # Held-out rows in file order, one batch, the same transforms and layout.
        evaluation = tfinput.tfrecord([held_out], schema).build(
            best.replace(batch_size=64, drop_remainder=False, deterministic=True)
        )
        labels = np.concatenate([np.asarray(y) for _, y in evaluation])
        logits = np.asarray(model.predict(evaluation, verbose=0)).reshape(-1)
        every_row = pipeline.build(best.replace(drop_remainder=False))
        train_labels = np.concatenate([np.asarray(y) for _, y in every_row])
        base_rate = float(np.clip(train_labels.mean(), 1e-3, 1 - 1e-3))
        base_logit = np.log(base_rate / (1 - base_rate))
        print(f"held-out rows {len(labels)}, clicks {int(labels.sum())}")
        print(
            f"baseline (training click rate {base_rate:.3f}) log loss "
            f"{log_loss(labels, np.full_like(logits, base_logit)):.4f}"
        )
        print(f"held-out log loss {log_loss(labels, logits):.4f}")
        print(f"held-out AUC {auc(labels, logits):.4f}")

        step("5. export for serving and check served predictions")
        model_path = work / "model.keras"
        model.save(model_path)
        served_dir = work / "served"
        shutil.rmtree(served_dir, ignore_errors=True)  # a rerun with --work replaces it
        tfinput_cli(
            "export", str(served_dir), "--model", str(model_path),
            "--schema", str(schema_path), "--layout", layout,
        )  # fmt: skip
        import tensorflow as tf

        serve = tf.saved_model.load(str(served_dir)).signatures["serving_default"]
        records = [r.numpy() for r in tf.data.TFRecordDataset(held_out).take(8)]
        outputs = serve(examples=tf.constant(records))
        served = outputs["predictions"].numpy().reshape(-1)
        diff = float(np.max(np.abs(served - logits[: len(records)])))
        ok = np.allclose(served, logits[: len(records)], atol=1e-5)
        first = ", ".join(f"{x:.4f}" for x in served[:3])
        print(f"served outputs: {sorted(outputs)}; first logits {first}")
        print(
            f"served vs trained on {len(records)} held-out records: max |diff| {diff:.2e} "
            f"{'OK' if ok else 'MISMATCH'}"
        )
        print(f"\ndone in {time.perf_counter() - _START:.0f} s")
        if not ok:
            sys.exit("criteo_dcn: the served predictions differ from the trained model's")


if __name__ == "__main__":
    main()
