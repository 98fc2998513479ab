"""A preemptible training process, for the crash test in ``tests/test_preemption.py``.

``python -m tests.preemption_worker SPEC.json [SPEC.json ...]`` trains, for each spec in
turn, a small logistic model (a ``tf.function`` step updating ``tf.Variable`` s by SGD)
on one epoch of a tfinput pipeline, and every ``every`` steps checkpoints the model, its
step counter and the input position, in one of two ways (``spec["api"]``):

- ``"checkpoint"``: ``tf.train.Checkpoint(model=..., step=..., iterator=iter(dataset))``
  saved by a ``tf.train.CheckpointManager``, as a TensorFlow training loop does.
- ``"state"``: the model through ``tf.train.Checkpoint.write`` and the input position as
  ``InputIterator.get_state()`` bytes beside it, in a folder written under a temporary
  name and renamed, then named by a ``LATEST`` file replaced atomically, as a JAX or
  custom loop would store it next to its own checkpoint.

On start it restores the last checkpoint, if there is one. It appends one JSON line per
event to ``spec["log"]`` (flushed and fsynced, so that what a killed process wrote is on
disk): ``start`` (the restored step and a digest of the weights), ``step`` (the step
number and the row ids of the batch it trained on), ``checkpoint`` (the step saved and
the weights' digest), ``waiting`` and ``end``.

With ``spec["hang_after"] = N`` it stops that training after step N; once every spec's
training has stopped or finished, it logs ``waiting`` in the log of each stopped one and
waits (up to ``spec["hang_seconds"]``, or until its parent has gone; then it exits with
status 3): the test kills it there with SIGKILL, so the kill falls at a known point of
each epoch however fast the machine is.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

#: Exit status when the parent did not kill the process while it waited.
NOT_KILLED = 3


class Log:
    """Appends JSON lines, each one on disk before the next step starts."""

    def __init__(self, path: str, run: int) -> None:
        self._file = open(path, "a")  # noqa: SIM115 - closed by close()
        self._run = run

    def write(self, event: str, **fields: Any) -> None:
        self._file.write(json.dumps({"run": self._run, "event": event, **fields}) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def build_model(schema: Any) -> Any:
    """A logistic model over the dense features and two id features, and its SGD step."""
    import tensorflow as tf

    tables = {t.name: t for t in schema.tables}
    vocab = {f.name: tables[f.table].vocabulary_size for f in schema.features if f.name in IDS}
    model = tf.Module(name="model")
    init = tf.random.stateless_normal
    model.dense = tf.Variable(init([4], seed=[1, 2], stddev=0.1), name="dense")
    model.tables = {n: tf.Variable(tf.zeros([v]), name=n) for n, v in sorted(vocab.items())}
    model.bias = tf.Variable(0.0, name="bias")
    model.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")

    @tf.function
    def train_step(features: Any, labels: Any) -> Any:
        dense = tf.concat(
            [features["dense"]["price"][:, None], features["dense"]["embedding"]], axis=1
        )
        params = [model.dense, model.bias, *model.tables.values()]
        with tf.GradientTape() as tape:
            logits = tf.linalg.matvec(dense, model.dense) + model.bias
            for name, table in model.tables.items():
                logits += tf.gather(table, features["ids"][name])
            loss = tf.reduce_mean(
                tf.nn.sigmoid_cross_entropy_with_logits(tf.cast(labels, tf.float32), logits)
            )
        for param, grad in zip(params, tape.gradient(loss, params)):
            param.assign_sub(0.1 * tf.convert_to_tensor(grad))
        model.step.assign_add(1)
        return loss

    return model, train_step


IDS = ("user_id", "last_item")


def weights_digest(model: Any) -> str:
    """A digest of every weight (the step counter apart): equal iff the weights are."""
    digest = hashlib.sha256()
    for var in sorted(model.trainable_variables, key=lambda v: v.name):
        digest.update(var.numpy().tobytes())
    return digest.hexdigest()[:16]


class StateCheckpoints:
    """Model weights plus ``InputIterator.get_state()`` bytes, one folder per save."""

    def __init__(self, directory: str, model: Any, iterator: Any) -> None:
        import tensorflow as tf

        self.directory = directory
        self.iterator = iterator
        self.checkpoint = tf.train.Checkpoint(model=model)
        self.latest = os.path.join(directory, "LATEST")

    def restore(self) -> None:
        if not os.path.exists(self.latest):
            return
        with open(self.latest) as f:
            folder = os.path.join(self.directory, f.read().strip())
        self.checkpoint.read(os.path.join(folder, "model")).assert_existing_objects_matched()
        with open(os.path.join(folder, "input.state"), "rb") as f:
            self.iterator.set_state(f.read())

    def save(self, step: int) -> None:
        state = self.iterator.get_state()
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=self.directory)
        self.checkpoint.write(os.path.join(tmp, "model"))
        _write_synced(os.path.join(tmp, "input.state"), state)
        name = f"ckpt-{step}"
        os.replace(tmp, os.path.join(self.directory, name))
        _write_synced(self.latest + ".tmp", name.encode())
        os.replace(self.latest + ".tmp", self.latest)


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class ManagerCheckpoints:
    """``tf.train.Checkpoint(model, iterator)`` through a ``tf.train.CheckpointManager``."""

    def __init__(self, directory: str, model: Any, iterator: Any) -> None:
        import tensorflow as tf

        self.checkpoint = tf.train.Checkpoint(model=model, iterator=iterator)
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=2)

    def restore(self) -> None:
        if self.manager.latest_checkpoint:
            self.checkpoint.restore(self.manager.latest_checkpoint).assert_consumed()

    def save(self, step: int) -> None:
        self.manager.save(checkpoint_number=step)


def _wait(seconds: float) -> None:
    """Sleep up to ``seconds``; return early when the parent (the test) has gone."""
    parent, deadline = os.getppid(), time.monotonic() + seconds
    while time.monotonic() < deadline and os.getppid() == parent:
        time.sleep(0.2)


def train(spec: dict) -> tuple[Log, int] | None:
    """One epoch of ``spec``'s training, from its last checkpoint; with ``hang_after``
    it stops after that step and returns its open log and the step (``None`` when it
    finished)."""
    import tfinput
    from tfinput import testing

    schema = testing.small_schema()
    pipeline = getattr(tfinput, spec["kind"])(spec["files"], schema).with_file_shuffling()
    config = tfinput.PipelineConfig(**spec["config"])
    model, train_step = build_model(schema)
    if spec["api"] == "checkpoint":
        iterator = iter(pipeline.build(config))
        checkpoints: Any = ManagerCheckpoints(spec["checkpoints"], model, iterator)
    else:
        iterator = pipeline.iterator(config, epochs=1)
        checkpoints = StateCheckpoints(spec["checkpoints"], model, iterator)
    checkpoints.restore()

    log = Log(spec["log"], spec["run"])
    log.write("start", step=int(model.step), weights=weights_digest(model))
    for features, labels in iterator:
        loss = train_step(features, labels)
        step = int(model.step)
        ids = features["dense"]["row_id"].numpy().astype(int).tolist()
        log.write("step", step=step, ids=ids, loss=float(loss))
        if step % spec["every"] == 0:
            checkpoints.save(step)
            log.write("checkpoint", step=step, weights=weights_digest(model))
        if step == spec.get("hang_after"):
            return log, step
    log.write("end", step=int(model.step))
    log.close()
    return None


def main(argv: list[str]) -> int:
    specs = []
    for path in argv:
        with open(path) as f:
            specs.append(json.load(f))
    stopped = [done for done in map(train, specs) if done is not None]
    if stopped:
        for log, step in stopped:
            log.write("waiting", step=step)
        _wait(max(spec["hang_seconds"] for spec in specs))
        return NOT_KILLED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
