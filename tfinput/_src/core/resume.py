"""Resume exactly after preemption: save the input position, restore it in a new process.

A training job on preemptible hosts checkpoints its model every K steps; when it
restarts from the last checkpoint, the input must continue from the same batch, or the
first part of the epoch is trained twice and the rest never. tfinput pipelines are
native tf.data graphs whose iterators TensorFlow can checkpoint, on every source:

- **TensorFlow training loops**: ``tf.train.Checkpoint(model=..., iterator=it)`` with
  ``it = iter(pipeline.build(config))``, as for any tf.data pipeline.
- **Any loop (JAX, Keras, plain Python)**: `InputIterator` (``pipeline.iterator(config)``)
  yields the same batches and gives its position as bytes, ``it.get_state()``, to store
  next to an Orbax or Keras checkpoint; ``it.set_state(state)`` on a freshly built
  iterator continues exactly there. Batches already taken from the iterator but not yet
  trained on (a prefetcher's or Keras's look-ahead) are part of the state
  (``get_state(unconsumed=n)``) and come out again first.
- **Keras ``fit``**: `KerasInputCheckpoint` saves the model and the input position
  together every N steps and restores both at the start of the next run.
- **``tf.distribute``**: `distributed_steps` hands one host's `InputIterator` batches to
  the strategy's replicas as ``distribute_datasets_from_function`` would, while the
  position stays the iterator's (TensorFlow's distributed iterator cannot be saved).

What a state holds: TensorFlow's iterator checkpoint (positions in the files, plus the
elements of the shuffle and prefetch buffers: its size grows with the shuffle buffer,
see ``docs/resume.md``), a small JSON header naming the pipeline it belongs to, and any
unconsumed batches. A state is refused, with the reason, by a pipeline over other files,
another schema, other batch-shaping knobs or another read plan (``docs/resume.md``
lists the knobs that may change).
"""

from __future__ import annotations

from tfinput._src.core._input_iterator import InputIterator, distributed_steps, epoch_seed
from tfinput._src.core._resume_identity import (
    COMPACT_FORMAT,
    STATE_FORMAT,
    identified,
    identity_differences,
    pipeline_identity,
)
from tfinput._src.core._resume_keras import KerasInputCheckpoint
from tfinput._src.core._resume_verify import verify

__all__ = [
    "COMPACT_FORMAT",
    "InputIterator",
    "KerasInputCheckpoint",
    "STATE_FORMAT",
    "distributed_steps",
    "epoch_seed",
    "identified",
    "identity_differences",
    "pipeline_identity",
    "verify",
]
