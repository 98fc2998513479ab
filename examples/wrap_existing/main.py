"""An existing hand-written tf.data pipeline, wrapped by tfinput and tuned as it is.

Many CTR code bases feed their models with an input function like DeepCTR's
``input_fn_tfrecord``: ``TFRecordDataset(files).map(parse_fn)`` where ``parse_fn``
calls ``tf.io.parse_single_example`` with ``tf.io.FixedLenFeature([1])`` columns, then
shuffle and batch. This example keeps that code unchanged:

1. the existing preprocessing (DeepCTR's Criteo recipe: fill missing values, label
   encode the categorical columns, min-max scale the dense ones) writes TFRecords of the
   real Criteo sample (``../shared/data/criteo_sample.txt``);
2. the existing input function reads them, ``[B, 1]`` columns and all;
3. a tfinput schema says what each column is (the counterpart of DeepCTR's
   ``SparseFeat`` / ``DenseFeat`` lists), and ``tfinput.wrap`` wraps the input
   function's batches: the transforms, the fixed shapes and the layouts apply;
4. ``tuners.tune`` searches the knobs tfinput controls against a Keras ``model.fit``
   step, and a model trains with the best config.

    python examples/wrap_existing/main.py            # under a minute on 2 cores
    python examples/wrap_existing/main.py --quick    # 2 tuning trials (CI)

The sample is found at ``shared/data`` beside the repository, or ``$TFINPUT_DATA_DIR``.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path

import keras
import tensorflow as tf

import tfinput
import tuners
from tfinput import models, steps

SPARSE = [f"C{i}" for i in range(1, 27)]
DENSE = [f"I{i}" for i in range(1, 14)]
BATCH = 32


def data_dir() -> Path:
    """The real sample data: ``$TFINPUT_DATA_DIR`` or ``shared/data`` beside the repo."""
    env = os.environ.get("TFINPUT_DATA_DIR") or os.environ.get("TFINPUT_SHARED_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "data"
    if not (path / "criteo_sample.txt").is_file():
        sys.exit(
            f"wrap_existing: no criteo_sample.txt in {path}; set TFINPUT_DATA_DIR to the "
            "directory holding the project's sample data"
        )
    return path


# ----------------------------------------------------------- the existing code
def existing_preprocessing(csv_path: Path, out_dir: Path, shards: int = 2) -> dict[str, int]:
    """DeepCTR's Criteo preprocessing, then its TFRecord writer; returns each sparse
    feature's vocabulary size (``max label + 1``)."""
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    vocab: dict[str, int] = {}
    for feat in SPARSE:  # fillna("-1") then LabelEncoder (sorted classes)
        classes = {v: i for i, v in enumerate(sorted({r[feat] or "-1" for r in rows}))}
        for r in rows:
            r[feat] = classes[r[feat] or "-1"]
        vocab[feat] = len(classes)
    for feat in DENSE:  # fillna(0) then MinMaxScaler((0, 1))
        values = [float(r[feat] or 0) for r in rows]
        low, high = min(values), max(values)
        for r, v in zip(rows, values):
            r[feat] = (v - low) / (high - low) if high > low else 0.0

    def make_example(r: dict) -> tf.train.Example:
        feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=[r[k]])) for k in SPARSE}
        feature.update(
            {k: tf.train.Feature(float_list=tf.train.FloatList(value=[r[k]])) for k in DENSE}
        )
        label = [float(r["label"])]
        feature["label"] = tf.train.Feature(float_list=tf.train.FloatList(value=label))
        return tf.train.Example(features=tf.train.Features(feature=feature))

    out_dir.mkdir(parents=True, exist_ok=True)
    for shard in range(shards):
        with tf.io.TFRecordWriter(str(out_dir / f"criteo-{shard:05d}.tfrecord")) as w:
            for r in rows[shard::shards]:
                w.write(make_example(r).SerializeToString())
    return vocab


FEATURE_DESCRIPTION = {k: tf.io.FixedLenFeature(dtype=tf.int64, shape=1) for k in SPARSE}
FEATURE_DESCRIPTION.update({k: tf.io.FixedLenFeature(dtype=tf.float32, shape=1) for k in DENSE})
FEATURE_DESCRIPTION["label"] = tf.io.FixedLenFeature(dtype=tf.float32, shape=1)


def input_fn_tfrecord(
    filenames: list[str], label: str | None = None, batch_size: int = 256, shuffle_factor: int = 10
) -> tf.data.Dataset:
    """The existing input function (DeepCTR's ``input_fn_tfrecord``, less its Estimator
    wrapper): ``(features, labels)`` batches of ``[B, 1]`` columns."""

    def _parse_examples(serial_exmp):
        features = tf.io.parse_single_example(serial_exmp, features=FEATURE_DESCRIPTION)
        if label is not None:
            labels = features.pop(label)
            return features, labels
        return features

    dataset = tf.data.TFRecordDataset(filenames)
    dataset = dataset.map(_parse_examples, num_parallel_calls=4)
    if shuffle_factor > 0:
        dataset = dataset.shuffle(buffer_size=batch_size * shuffle_factor)
    return dataset.batch(batch_size)


# ----------------------------------------------------------------- with tfinput
def schema_for(vocab: dict[str, int]) -> tfinput.Schema:
    """What each column of the existing data is: DeepCTR's ``SparseFeat(feat,
    vocabulary_size)`` is a `tfinput.Categorical` with its `tfinput.Table`, and
    ``DenseFeat(feat, 1)`` a `tfinput.Dense` (already scaled: no clip or log1p)."""
    return tfinput.Schema.of(
        [tfinput.Dense(name=k) for k in DENSE]
        + [tfinput.Categorical(name=k, table=k) for k in SPARSE],
        tables=[tfinput.Table(name=k, vocabulary_size=vocab[k], dim=8) for k in SPARSE],
        labels=["label"],
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 tuning trials instead of 4")
    args = p.parse_args()
    trials = 2 if args.quick else 4
    start = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        print("== 1. the existing preprocessing writes TFRecords", flush=True)
        vocab = existing_preprocessing(data_dir() / "criteo_sample.txt", Path(tmp))
        files = sorted(str(f) for f in Path(tmp).glob("criteo-*.tfrecord"))
        print(f"{len(files)} files; vocabulary sizes {min(vocab.values())}..{max(vocab.values())}")

        print("\n== 2. the existing input function, unchanged", flush=True)
        existing = input_fn_tfrecord(files, label="label", batch_size=BATCH)
        features_spec, label_spec = existing.element_spec
        print(
            f"its batches: ({len(features_spec)} feature columns, e.g. C1 "
            f"{features_spec['C1'].shape.as_list()} {features_spec['C1'].dtype.name}, "
            f"I1 {features_spec['I1'].shape.as_list()}; label {label_spec.shape.as_list()})"
        )

        print("\n== 3. wrapped by tfinput", flush=True)
        schema = schema_for(vocab)

        # A callable, so every build (every tuning trial) reads from the start. The
        # parse function and the input function stay as they are: wrap takes their
        # (features, label) batches as they come, and rebatch=True re-cuts them to the
        # config's batch size, dropping the partial last batch that would break the
        # fixed shapes (PipelineConfig.drop_remainder).
        def existing_batches() -> tf.data.Dataset:
            return input_fn_tfrecord(files, label="label", batch_size=BATCH)

        pipeline = tfinput.wrap(existing_batches, schema, batched=True, rebatch=True)
        features, label = next(iter(pipeline.build(tfinput.PipelineConfig(batch_size=BATCH))))
        print(
            f"tfinput batches: dense {len(features['dense'])} x {features['dense']['I1'].shape}, "
            f"ids {len(features['ids'])} x {features['ids']['C1'].shape} "
            f"{features['ids']['C1'].dtype.name}, label {label.shape}"
        )

        print(f"\n== 4. tuned against model.fit ({trials} trials)", flush=True)
        # The batch size is the input function's; the search covers what tfinput adds
        # after it (transform parallelism, prefetch, the layout, steps_per_execution).
        probe = models.ranking_model(schema, jit_compile=False)
        result = tuners.tune(
            pipeline,
            step=steps.keras_fit_step(probe),
            n_trials=trials,
            base=tfinput.PipelineConfig(batch_size=BATCH),
            options=tuners.TuneOptions(
                measurement=tuners.MeasureOptions(windows=1, window_batches=4, warmup_batches=2),
                confirmation=tuners.ConfirmOptions(
                    confirm_top=1, confirm_windows=1, breakdown=False, advise_format=False
                ),
            ),
        )
        best = result.best_config
        default = tfinput.PipelineConfig(batch_size=BATCH)
        autotune = next((c.config for c in result.confirmed if c.name == "autotune"), default)
        changed = {k: v for k, v in best.to_dict().items() if v != autotune.to_dict().get(k)}
        print(f"best config ({result.best_name}), knobs changed from autotune: {changed}")
        for line in result.verdicts:
            print("verdict:", line)

        keras.utils.set_random_seed(0)  # the same weights and shuffles every run
        model = models.ranking_model(
            schema, jit_compile=False, steps_per_execution=best.steps_per_execution
        )
        history = model.fit(pipeline.build(best), epochs=3, verbose=0)
        losses = history.history["loss"]
        print(f"trained with it: 3 epochs, loss {losses[0]:.4f} -> {losses[-1]:.4f}")
        print(f"\ndone in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
