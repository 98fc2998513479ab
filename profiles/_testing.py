"""Pipelines with a known bottleneck, for tests and for trying the analysis, and a tiny
Keras model for ``tfinput profile --step keras`` on datasets that are not tfinput
pipelines (`demo_keras_model`; tfinput pipelines get the built-in ranking model, and the
``--demo`` pipeline itself is tfinput's built-in default, `tfinput._src.applications.cli.args`).

Each pipeline has one deliberately slow stage, so an analysis of its trace must name
that stage:

- `slow_map_pipeline`: a map named ``parse`` that sleeps, with parallelism 1 (answer:
  ``ParallelMapV2 (parse)``, knob ``map_parallelism``);
- `small_interleave_pipeline`: GZIP TFRecord files read one at a time through an
  interleave with ``cycle_length=1, num_parallel_calls=1`` (answer: the ``TFRecord``
  reader under ``ParallelInterleaveV4``, knobs ``interleave_cycle_length`` and
  ``interleave_parallelism``);
- `fast_pipeline`: nothing slow (the "after" of a before/after comparison).

`cached_capture` profiles one of them once per process, with a simulated 2 ms
accelerator step, and returns the log directory, so several test modules can share
a trace.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any


def slow_map_pipeline(*, delay_s: float = 0.06, batch_size: int = 4) -> Any:
    """Batches whose map (``name="parse"``, parallelism 1) sleeps ``delay_s`` per batch.

    The default (60 ms, thirty times the 2 ms simulated step of `cached_capture`) keeps
    the map the bottleneck however busy the machine is: tests assert on it."""
    import tensorflow as tf

    def parse(x: Any) -> Any:
        def slow(v: Any) -> Any:
            time.sleep(delay_s)
            return v

        y = tf.numpy_function(slow, [x], tf.int64)
        y.set_shape(x.shape)
        return tf.cast(y, tf.float32), tf.cast(y % 2, tf.float32)

    return (
        tf.data.Dataset.range(10**9)
        .batch(batch_size, drop_remainder=True)
        .map(parse, num_parallel_calls=1, name="parse")
        .prefetch(1)
    )


def write_gzip_records(
    directory: str | os.PathLike[str],
    *,
    files: int = 2,
    records: int = 96,
    record_bytes: int = 200_000,
) -> list[str]:
    """Write GZIP-compressed TFRecord files of compressible random bytes (CPU to read).

    The records are written uncompressed by TensorFlow and compressed with Python's
    ``gzip`` at level 1 (TensorFlow's GZIP writer is several times slower); reading
    them back costs the same inflate work either way.
    """
    import gzip

    import numpy as np
    import tensorflow as tf

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for k in range(files):
        path = root / f"records-{k}.tfrecord.gz"
        paths.append(str(path))
        if path.is_file():
            continue
        plain = root / f"records-{k}.tfrecord"
        with tf.io.TFRecordWriter(str(plain)) as writer:
            for _ in range(records):
                writer.write(rng.integers(0, 4, size=record_bytes, dtype=np.uint8).tobytes())
        path.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=1))
        plain.unlink()
    return paths


def small_interleave_pipeline(files: list[str], *, batch_size: int = 8) -> Any:
    """Reads ``files`` through an interleave of cycle length 1 and parallelism 1.

    With the default files of `write_gzip_records`, the profiled steps of
    `cached_capture` read within one file, so the trace shows reading, not opening.
    """
    import tensorflow as tf

    return (
        tf.data.Dataset.from_tensor_slices(files)
        .repeat()
        .interleave(
            lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
            cycle_length=1,
            num_parallel_calls=1,
        )
        .batch(batch_size, drop_remainder=True)
        .prefetch(1)
    )


def fast_pipeline(*, batch_size: int = 64) -> Any:
    """An in-memory pipeline with nothing slow in it."""
    import tensorflow as tf

    return (
        tf.data.Dataset.range(10**9)
        .batch(batch_size, drop_remainder=True)
        .map(
            lambda x: (tf.cast(x, tf.float32), tf.cast(x % 2, tf.float32)),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .prefetch(tf.data.AUTOTUNE)
    )


#: Names accepted by `cached_capture`.
KNOWN_PIPELINES = ("slow_map", "small_interleave", "fast")


@functools.cache
def _scratch() -> Path:
    path = Path(tempfile.mkdtemp(prefix="tfinput-profiles-testing-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@functools.cache
def cached_capture(name: str, *, steps: int = 8, warmup: int = 2) -> Path:
    """Profile a known pipeline once per process (simulated 2 ms step); return its logdir.

    Args:
      name: One of `KNOWN_PIPELINES`.
      steps: Profiled steps.
      warmup: Warm-up steps.
    """
    from profiles._capture import capture
    from tfinput.steps import simulated_step

    root = _scratch()
    if name == "slow_map":
        pipeline = slow_map_pipeline()
    elif name == "small_interleave":
        pipeline = small_interleave_pipeline(write_gzip_records(root / "records"))
    elif name == "fast":
        pipeline = fast_pipeline()
    else:
        from tfinput.errors import ConfigError

        raise ConfigError(f"unknown pipeline {name!r}; known: {KNOWN_PIPELINES}")
    logdir = root / f"{name}-{steps}-{warmup}"
    capture(pipeline, simulated_step(0.002), logdir=logdir, steps=steps, warmup=warmup)
    return logdir


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
