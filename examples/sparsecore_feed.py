"""SparseCore-ready batches on JAX: the TPU embedding preprocessing off the training thread.

    python examples/sparsecore_feed.py

Runs on CPU with jax-tpu-embedding (``pip install 'tfinput[sparsecore]'``, CPython 3.12+):
criteo-like data as columnar records, the SparseCore limits measured from the data, and
each batch's SparseCore input (jax-tpu-embedding's ``preprocess_sparse_dense_matmul_input``,
what keras-rs's ``DistributedEmbedding.preprocess`` calls on JAX) prepared on two worker
threads while the training loop takes ready batches.

What changes on a TPU: the device counts come from the mesh
(``local_device_count=mesh.local_mesh.size``, ``global_device_count=mesh.size``,
``num_sc_per_device`` from the chip: 4 on v5p, 2 on v6e), and the loop's step is the
model's (the preprocessed input goes to jax-tpu-embedding's ``tpu_sparse_dense_matmul``).
With keras-rs, the plan comes from the layer instead,
``SparseCorePlan.from_keras_rs(embedding)`` (its specs, limits and mesh), and the feed
yields what ``embedding.preprocess`` returns (docs/sparsecore.md, "With keras-rs").
Nothing else in the recipe changes.
"""

from __future__ import annotations

import tempfile
import time

import tfinput
from tfinput import testing
from tfinput.convert import convert
from tfinput.sparsecore import SparseCorePlan, sparsecore_feed

DEVICES, SPARSECORES, PER_DEVICE = 4, 4, 256


def main() -> None:
    schema = testing.criteo_like_schema(vocabulary_size=50_000, n_categorical=8)
    batch = DEVICES * PER_DEVICE
    with tempfile.TemporaryDirectory() as d:
        parquet = testing.write_parquet(f"{d}/pq", schema, rows=8_000, files=4)
        convert(parquet, f"{d}/col", to="columnar", schema=schema, chunk_rows=256)
        pipeline = tfinput.columnar(f"{d}/col", schema)

        # The limits from the data (tfinput schema sparsecore), then the plan in one call.
        stats = tfinput.sparsecore_stats(
            pipeline,
            per_replica_batch_size=PER_DEVICE,
            devices=DEVICES,
            sparsecores_per_device=SPARSECORES,
        )
        plan = SparseCorePlan.from_schema(
            schema,
            batch_size=batch,
            local_device_count=DEVICES,
            num_sc_per_device=SPARSECORES,
            limits=stats,
        )

        dataset = pipeline.build(tfinput.PipelineConfig(batch_size=batch))
        start = time.perf_counter()
        with sparsecore_feed(dataset, plan, workers=2) as feed:
            for (_dense, sparse), labels in feed:
                # A TPU step would run here on (dense, sparse, labels).
                assert len(labels) == batch and sparse.lhs_embedding_ids
        seconds = time.perf_counter() - start
    s = feed.stats
    print(f"fed {s.batches} batches of {batch} in {seconds:.2f} s; the loop waited "
          f"{s.wait_seconds:.2f} s; preprocessing took {s.preprocess_seconds:.2f} s on the workers")  # fmt: skip
    for table, usage in sorted(s.tables.items())[:4]:
        print(f"stack {table}: COO buffers {usage.usage:.0%} used, {usage.dropped_ids} ids dropped, "
              f"max ids per partition {usage.max_ids_per_partition}")  # fmt: skip
    print(f"dropped ids: {s.dropped_ids}")


if __name__ == "__main__":
    main()
