"""The built-in pipeline profiled by ``tfinput profile --demo``.

`demo_pipeline` is the single factory to swap for tfinput's own criteo-like pipeline
(``tfinput.Pipeline.build(config)``) once it exists. Until then it is a plain tf.data
pipeline over small synthetic files of the same shape: 13 dense floats, 26 single-id
categoricals and 4 multi-hot lists of 0-19 ids per example, stored as
``tf.train.Example`` in TFRecord files, read through interleave, batched, then parsed
(vectorized ``parse_example``) and prefetched, with every `PipelineConfig` knob
applied.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["demo_files", "demo_keras_model", "demo_pipeline"]

N_DENSE, N_CAT, N_MULTI, MAX_IDS = 13, 26, 4, 20
_FILES, _PER_FILE = 4, 1024
_VERSION = "v1"


def demo_files(data_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Write (once) and return the demo TFRecord files."""
    import numpy as np
    import tensorflow as tf

    root = Path(data_dir or Path(tempfile.gettempdir()) / f"tfinput-profile-demo-{_VERSION}")
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    files = []
    for k in range(_FILES):
        path = root / f"part-{k:02d}.tfrecord"
        files.append(str(path))
        if path.is_file() and path.stat().st_size > 0:
            continue
        tmp = path.with_suffix(".tmp")
        with tf.io.TFRecordWriter(str(tmp)) as writer:
            for _ in range(_PER_FILE):
                feature = {"label": _int64([int(rng.integers(0, 2))])}
                for i in range(N_DENSE):
                    feature[f"I{i + 1}"] = tf.train.Feature(
                        float_list=tf.train.FloatList(value=[float(rng.exponential(3.0))])
                    )
                for i in range(N_CAT):
                    feature[f"C{i + 1}"] = _int64([int(rng.integers(0, 100_000))])
                for i in range(N_MULTI):
                    n = int(rng.integers(0, MAX_IDS))
                    feature[f"M{i + 1}"] = _int64(rng.integers(0, 10_000, size=n).tolist())
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
        tmp.replace(path)
    return files


def _int64(values: list[int]) -> Any:
    import tensorflow as tf

    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def demo_pipeline(config: Any = None, *, data_dir: str | os.PathLike[str] | None = None) -> Any:
    """The demo input pipeline, built with a `tfinput.config.PipelineConfig`.

    Args:
      config: Pipeline knobs; default ``PipelineConfig(batch_size=1024)``.
      data_dir: Where to write the demo files (default: the system temp directory).

    Returns:
      An endless ``tf.data.Dataset`` of ``(features, labels)`` batches.
    """
    import tensorflow as tf

    from tfinput.config import AUTOTUNE, PipelineConfig

    cfg = config if config is not None else PipelineConfig(batch_size=1024)
    files = tf.data.Dataset.from_tensor_slices(demo_files(data_dir))
    if cfg.shuffle_buffer:
        files = files.shuffle(_FILES, seed=cfg.shuffle_seed)
    block = None if cfg.interleave_block_length == AUTOTUNE else cfg.interleave_block_length
    deterministic = None if cfg.deterministic is AUTOTUNE else bool(cfg.deterministic)
    records = files.interleave(
        tf.data.TFRecordDataset,
        cycle_length=cfg.interleave_cycle_length,
        block_length=block,
        num_parallel_calls=cfg.interleave_parallelism,
        deterministic=deterministic,
    )
    if cfg.cache:
        records = records.cache()
    if cfg.shuffle_buffer:
        records = records.shuffle(cfg.shuffle_buffer, seed=cfg.shuffle_seed)
    spec = {"label": tf.io.FixedLenFeature([], tf.int64)}
    spec.update({f"I{i + 1}": tf.io.FixedLenFeature([], tf.float32) for i in range(N_DENSE)})
    spec.update({f"C{i + 1}": tf.io.FixedLenFeature([], tf.int64) for i in range(N_CAT)})
    spec.update({f"M{i + 1}": tf.io.RaggedFeature(tf.int64) for i in range(N_MULTI)})

    def parse(serialized: Any) -> Any:
        parsed = tf.io.parse_example(serialized, spec)
        labels = parsed.pop("label")
        for i in range(N_MULTI):
            ids = parsed[f"M{i + 1}"]
            parsed[f"M{i + 1}"] = ids.to_tensor(default_value=0, shape=[None, MAX_IDS])
            parsed[f"M{i + 1}_weight"] = tf.cast(
                tf.sequence_mask(ids.row_lengths(), MAX_IDS), tf.float32
            )
        return parsed, labels

    ds = records.repeat().batch(cfg.batch_size, drop_remainder=cfg.drop_remainder)
    ds = ds.map(
        parse, num_parallel_calls=cfg.map_parallelism, deterministic=deterministic, name="parse"
    )
    if cfg.prefetch != 0:
        ds = ds.prefetch(cfg.prefetch)
    options = tf.data.Options()
    if cfg.private_threadpool_size != AUTOTUNE:
        options.threading.private_threadpool_size = cfg.private_threadpool_size
    if cfg.max_intra_op_parallelism != AUTOTUNE:
        options.threading.max_intra_op_parallelism = cfg.max_intra_op_parallelism
    if cfg.autotune_ram_budget != AUTOTUNE:
        options.autotune.ram_budget = cfg.autotune_ram_budget
    return ds.with_options(options)


def demo_keras_model(element_spec: Any) -> Any:
    """A tiny compiled Keras model accepting any batch of dense numeric features.

    Every feature is cast to float, flattened and concatenated into one dense layer:
    it only exists to exercise the Keras step path (``--step keras``) on an arbitrary
    pipeline; pass your own model with ``--model module:function``.

    Raises:
      ConfigError: A feature is not a dense numeric tensor.
    """
    import keras
    import tensorflow as tf

    from tfinput.errors import ConfigError

    if not (isinstance(element_spec, tuple) and len(element_spec) == 2):
        raise ConfigError(
            "--step keras needs a pipeline of (features, labels) batches; got element_spec "
            f"{element_spec}; pass your own model with --model module:function"
        )
    features, _ = element_spec
    named = features if isinstance(features, dict) else {"x": features}
    inputs, flat = {}, []
    for name, spec in named.items():
        if not isinstance(spec, tf.TensorSpec) or not (
            spec.dtype.is_floating or spec.dtype.is_integer or spec.dtype.is_bool
        ):
            raise ConfigError(
                f"--step keras: feature {name!r} is {spec}; the built-in model takes dense "
                "numeric tensors only: pass your own model with --model module:function"
            )
        inp = keras.Input(shape=tuple(spec.shape[1:]), dtype=spec.dtype.name, name=name)
        inputs[name] = inp
        x = keras.ops.cast(inp, "float32")
        flat.append(
            keras.layers.Flatten()(x) if len(spec.shape) > 1 else keras.ops.expand_dims(x, -1)
        )
    x = keras.layers.Concatenate()(flat) if len(flat) > 1 else flat[0]
    x = keras.layers.Dense(32, activation="relu")(x)
    out = keras.layers.Dense(1)(x)
    model = keras.Model(inputs if isinstance(features, dict) else inputs["x"], out)
    model.compile(optimizer="adam", loss="mse")
    return model
