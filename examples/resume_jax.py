"""A plain JAX training loop that is preempted and resumes exactly where its input was.

Every K steps the loop writes a checkpoint: the model parameters and the input position
(`it.get_state()`, bytes) side by side, in one step directory written atomically (into
a temporary directory, then renamed). `--stop-after N` simulates a preemption: the
process exits at step N, losing the steps since its last checkpoint, as a preempted job
does. Run again with the same `--workdir`: the loop restores the parameters and the input
position of the last checkpoint and trains to the end of the epoch. It then proves the
resume was exact: the examples trained on by the checkpoint plus those of the second run
are the epoch, each example once.

    python examples/resume_jax.py --workdir /tmp/run --stop-after 50   # "preempted"
    python examples/resume_jax.py --workdir /tmp/run                   # resumes, finishes
    python examples/resume_jax.py --workdir /tmp/run2 --quick --stop-after 13  # smoke run

Batches come from a tfinput pipeline in the packed layout (`docs/accelerators.md`),
moved to the device ahead of the step by `tfinput.device_prefetch.to_jax`; the
prefetcher's `get_state()` accounts for the batches it pulled ahead but the loop has not
trained on yet. Replace `make_pipeline` with your own files and schema.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import uuid

import jax
import jax.numpy as jnp
import numpy as np

import tfinput
from tfinput import device_prefetch, testing

# The input must be rebuilt identically in the second run (same files, schema,
# batch-shaping and read-plan knobs; a state of another pipeline is refused with the
# difference). Parallelism knobs may differ (docs/resume.md lists them). deterministic=True makes the order a function of the
# seed, so the proof below can compare runs; the resume itself does not need it.
SEED = 1


def make_pipeline(workdir: str, rows: int) -> tfinput.Pipeline:
    """Synthetic data (every feature kind plus a `row_id`), written once per workdir."""
    schema = testing.small_schema()
    data = os.path.join(workdir, "data")
    if not os.path.isdir(data):
        tmp = os.path.join(workdir, f".data-{uuid.uuid4().hex}")
        os.mkdir(tmp)  # the user's umask (tempfile.mkdtemp would make it 0700)
        testing.write_tfrecord(tmp, schema, rows=rows, files=4, seed=SEED)
        os.replace(tmp, data)
    files = sorted(os.path.join(data, f) for f in os.listdir(data))
    return tfinput.tfrecord(files, schema).with_layout("packed")


# ---------------------------------------------------------------------- model
def init_params(n_dense: int, vocabulary: int, dim: int) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return {
        "embedding": 0.05 * jax.random.normal(k1, (vocabulary, dim)),
        "w": 0.05 * jax.random.normal(k2, (n_dense + dim,)),
        "b": jnp.zeros(()),
    }


def make_train_step(n_dense: int, row_id_column: int, learning_rate: float):
    """A jitted SGD step of a small logistic model over the packed batch."""
    # The row id is data bookkeeping, not a feature: the model reads the other columns.
    feature_columns = np.array([i for i in range(n_dense) if i != row_id_column])

    def loss_fn(params, dense, ids, labels):
        x = dense[:, feature_columns]
        pooled = params["embedding"][ids].mean(axis=1)
        logits = jnp.concatenate([x, pooled], axis=1) @ params["w"] + params["b"]
        return jnp.mean(jnp.logaddexp(0.0, logits) - labels * logits)

    @jax.jit
    def train_step(params, batch):
        features, labels = batch
        loss, grads = jax.value_and_grad(loss_fn)(
            params, features["dense"], features["ids"], labels
        )
        params = jax.tree_util.tree_map(lambda p, g: p - learning_rate * g, params, grads)
        return params, loss

    return train_step


# ----------------------------------------------------------------- checkpoints
# One directory per checkpoint, step_<N>/, holding params.npz, input.state (the input
# position) and trained_ids.npy (the row ids trained on up to step N: only for the proof
# at the end; a real job does not need it). Written under a temporary name, then renamed,
# so a process killed while writing leaves the previous checkpoint whole.
#
# With Orbax (not needed here), keep the same pairing: save the parameters with an
# `orbax.checkpoint.CheckpointManager` at `step`, and write the input state (bytes) into
# that step's directory, or base64-encoded into a JSON item of the same save, so that the
# model and the input position are always restored from the same step.


def save_checkpoint(
    ckpt_dir: str, step: int, params: dict, input_state: bytes, trained_ids: list
) -> None:
    os.makedirs(ckpt_dir, exist_ok=True)
    tmp = os.path.join(ckpt_dir, f".tmp-{uuid.uuid4().hex}")
    os.mkdir(tmp)  # the user's umask (tempfile.mkdtemp would make it 0700)
    np.savez(os.path.join(tmp, "params.npz"), **jax.device_get(params))
    with open(os.path.join(tmp, "input.state"), "wb") as f:
        f.write(input_state)
    np.save(os.path.join(tmp, "trained_ids.npy"), np.concatenate(trained_ids))
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump({"step": step}, f)
    os.replace(tmp, os.path.join(ckpt_dir, f"step_{step:08d}"))
    for old in sorted(d for d in os.listdir(ckpt_dir) if d.startswith("step_"))[:-2]:
        shutil.rmtree(os.path.join(ckpt_dir, old), ignore_errors=True)  # keep two


def latest_checkpoint(ckpt_dir: str) -> str | None:
    if not os.path.isdir(ckpt_dir):
        return None
    done = sorted(d for d in os.listdir(ckpt_dir) if d.startswith("step_"))
    return os.path.join(ckpt_dir, done[-1]) if done else None


# ------------------------------------------------------------------------ main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", required=True, help="data and checkpoints (kept across runs)")
    p.add_argument("--quick", action="store_true", help="a smoke run on small data")
    p.add_argument("--every", type=int, default=None, help="checkpoint every K steps")
    p.add_argument("--stop-after", type=int, default=None, help="exit at step N (preemption)")
    args = p.parse_args()
    rows, batch_size, every = (2_048, 64, 5) if args.quick else (50_000, 512, 20)
    every = args.every or every
    os.makedirs(args.workdir, exist_ok=True)

    pipeline = make_pipeline(args.workdir, rows)
    config = tfinput.PipelineConfig(
        batch_size=batch_size,
        drop_remainder=True,
        shuffle_buffer=1_000,
        shuffle_seed=SEED,
        deterministic=True,
    )
    layout = pipeline.packed_layout().to_dict()  # where each feature sits in the batch
    columns = {f["name"]: f["offset"] for f in layout["dense"]}
    vocabulary = max(t.vocabulary_size for t in pipeline.schema.tables)
    train_step = make_train_step(layout["n_dense"], columns["row_id"], learning_rate=0.01)

    # The input: one epoch, resumable, moved to the device two batches ahead.
    it = device_prefetch.to_jax(pipeline.iterator(config), size=2)
    ckpt_dir = os.path.join(args.workdir, "checkpoints")
    last = latest_checkpoint(ckpt_dir)
    if last is None:
        step = 0
        params = init_params(layout["n_dense"] - 1, vocabulary, dim=8)
        trained_ids: list[np.ndarray] = [np.zeros(0, np.int64)]
        print("starting from scratch")
    else:
        with open(os.path.join(last, "meta.json")) as f:
            step = json.load(f)["step"]
        with np.load(os.path.join(last, "params.npz")) as saved:
            params = {k: jnp.asarray(v) for k, v in saved.items()}
        with open(os.path.join(last, "input.state"), "rb") as f:
            it.set_state(f.read())  # the next batch is the one after step `step`
        trained_ids = [np.load(os.path.join(last, "trained_ids.npy"))]
        print(f"resumed from {os.path.basename(last)}: step {step}")

    loss = None
    for batch in it:
        params, loss = train_step(params, batch)
        step += 1
        trained_ids.append(np.asarray(batch[0]["dense"][:, columns["row_id"]]).astype(np.int64))
        if step % every == 0:
            save_checkpoint(ckpt_dir, step, params, it.get_state(), trained_ids)
        if args.stop_after is not None and step >= args.stop_after:
            it.close()
            saved = (step // every) * every
            print(
                f"preempted at step {step} (simulated); the last checkpoint is at step "
                f"{saved}: steps {saved + 1}-{step} will be trained again"
            )
            return
    it.close()
    print(f"epoch done at step {step}, loss {float(loss):.4f}")

    # The proof: the examples trained on by the restored checkpoint plus this run's are
    # one epoch (with drop_remainder, the full batches of it), each example once.
    ids = np.concatenate(trained_ids)
    expected = (rows // batch_size) * batch_size
    distinct, twice = np.unique(ids).size, ids.size - np.unique(ids).size
    print(
        f"examples trained on over all runs: {ids.size} ({distinct} distinct, "
        f"{twice} twice) of {expected} in the epoch"
    )
    if ids.size == distinct == expected:
        print("exact resume: every example of the epoch trained on once")
    else:
        raise SystemExit("resume was NOT exact")


if __name__ == "__main__":
    main()
