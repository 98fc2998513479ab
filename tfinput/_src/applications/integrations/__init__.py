"""Integrations with other libraries, on top of tfinput's core and measurement layers.

- `tfinput.integrations.sparsecore_feed`: the TPU SparseCore input preprocessing of
  jax-tpu-embedding (what keras-rs's ``DistributedEmbedding.preprocess`` runs on JAX),
  applied to each batch on background workers (`sparsecore_feed`).

Nothing here is imported by ``import tfinput``; each module imports its library lazily
and says how to install it when it is missing.
"""
