"""Test helpers: the expected output of a pipeline, computed independently in numpy."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from tfinput.schema import Categorical, Dense, MultiHot, Schema

#: The project's real sample data (Criteo, MovieLens): ``shared/data`` beside the
#: repository, as CI lays it out, or ``$TFINPUT_SHARED_DATA``.
SHARED_DATA = Path(
    os.environ.get("TFINPUT_SHARED_DATA")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)


def expected_rows(cols: Any, schema: Schema) -> dict[str, dict[str, np.ndarray]]:
    """{"dense": {name: [N,...]}, "ids": {...}, "weights": {...}} for all rows, in order."""
    tables = {t.name: t for t in schema.tables}
    out: dict[str, dict[str, np.ndarray]] = {"dense": {}, "ids": {}, "weights": {}}

    def to_ids(values: np.ndarray, f: Any) -> np.ndarray:
        vocab = tables[f.table].vocabulary_size
        if f.dtype == "string":
            return tf.strings.to_hash_bucket_fast(values.astype(bytes), vocab).numpy()
        return values % vocab if f.out_of_range == "modulo" else values

    for f in schema.features:
        v = cols.values[f.source]
        if isinstance(f, Dense):
            x = v.astype(np.float64)
            if f.clip:
                lo, hi = f.clip
                x = np.clip(x, lo if lo is not None else -np.inf, hi if hi is not None else np.inf)
            if f.log1p:
                x = np.log1p(x)
            out["dense"][f.name] = x.astype(np.float32)
        elif isinstance(f, Categorical):
            out["ids"][f.name] = to_ids(v, f).astype(np.int32)
        elif isinstance(f, MultiHot):
            offsets = cols.offsets(f.source)
            ids = np.zeros((cols.rows, f.max_len), np.int32)
            w = np.zeros((cols.rows, f.max_len), np.float32)
            flat_ids = to_ids(v, f) if v.size else v
            wv = cols.values[f.weights] if f.weights else None
            for r in range(cols.rows):
                a, b = offsets[r], min(offsets[r + 1], offsets[r] + f.max_len)
                ids[r, : b - a] = flat_ids[a:b]
                w[r, : b - a] = wv[a:b] if wv is not None else 1.0
            out["ids"][f.name] = ids
            out["weights"][f.name] = w
    return out


def collect(dataset: tf.data.Dataset) -> dict[str, dict[str, np.ndarray]]:
    """Concatenate every batch of a (features, labels) dataset into numpy arrays."""
    parts: dict[str, dict[str, list[np.ndarray]]] = {}
    labels: list[np.ndarray] = []
    for features, label in dataset:
        for group, values in features.items():
            for name, t in values.items():
                parts.setdefault(group, {}).setdefault(name, []).append(t.numpy())
        labels.append(np.asarray(label))
    out = {g: {n: np.concatenate(v) for n, v in d.items()} for g, d in parts.items()}
    out["labels"] = {"label": np.concatenate(labels) if labels else np.array([])}
    return out


def by_row_id(got: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
    """Reorder collected rows by the ``row_id`` dense feature."""
    order = np.argsort(got["dense"]["row_id"], kind="stable")
    return {g: {n: v[order] for n, v in d.items()} for g, d in got.items()}


# --------------------------------------------------------------- CLI harness
def cli_main(argv: Any) -> int:
    """``tfinput ARGV`` in-process, through `tfinput.cli.main` (paths may be `Path`s)."""
    from tfinput import cli

    return cli.main([str(a) for a in argv])


def run_cli(capsys: Any, *argv: Any) -> tuple[int, str, str]:
    """``tfinput ARGV`` in-process: ``(exit code, stdout, stderr)``, never a traceback."""
    code = cli_main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


# Sequential, deterministic pipeline knobs: batches come out in file order.
SEQUENTIAL = dict(
    interleave_cycle_length=1,
    interleave_parallelism=1,
    map_parallelism=1,
    prefetch=0,
    deterministic=True,
)

# Every kind of source `pipeline_of` builds (conftest.py).
SOURCE_KINDS = ("tfrecord", "parquet", "columnar", "wrapped", "wrapped_batched")
#: `tfinput.models.ranking_model` arguments for tests that train it to check something
#: other than the model (an input position across a restart): its narrowest layers,
#: so that each model traces and compiles less.
SMALL_RANKING_MODEL: dict[str, Any] = dict(bottom=(8,), top=(8,), cross_layers=1)


def wrapped_dataset(cols: Any) -> tf.data.Dataset:
    """Generated columns (`tfinput.testing.generate`) as an unbatched dataset of raw rows,
    list columns as ragged rows: what `tfinput.wrap` expects from a user's dataset."""
    data = {}
    for col, v in cols.values.items():
        if col in cols.lengths:
            data[col] = tf.RaggedTensor.from_row_lengths(v, cols.lengths[col])
        else:
            data[col] = v
    return tf.data.Dataset.from_tensor_slices(data)


def assert_each_row_once(
    parts: list[dict[str, dict[str, np.ndarray]]], cols: Any, schema: Schema
) -> None:
    """Batches collected from one or several input pipelines (`collect`, one part per
    pipeline) hold every generated row exactly once, with the expected values."""
    merged = {
        g: {n: np.concatenate([p[g][n] for p in parts]) for n in parts[0][g]} for g in parts[0]
    }
    row_ids = merged["dense"]["row_id"].astype(int)
    assert sorted(row_ids.tolist()) == list(range(cols.rows)), "each row exactly once"
    got, want = by_row_id(merged), expected_rows(cols, schema)
    for group in ("dense", "ids", "weights"):
        for name, expected in want[group].items():
            np.testing.assert_allclose(got[group][name], expected, rtol=1e-6, err_msg=name)
    np.testing.assert_array_equal(got["labels"]["label"], cols.values["label"])


def parse_records(records: list[bytes], spec: dict) -> dict[str, np.ndarray | tuple]:
    """``tf.io.parse_example`` of serialized records as numpy: ragged keys as
    ``(values, row_splits)``."""
    out = {}
    for key, value in tf.io.parse_example(tf.constant(records), spec).items():
        if isinstance(value, tf.RaggedTensor):
            out[key] = (value.values.numpy(), value.row_splits.numpy())
        else:
            out[key] = value.numpy()
    return out


def running(procs: list[Any]) -> list[Any]:
    """The `psutil.Process`es of ``procs`` still running (a zombie has ended: it only
    waits for a parent to collect its exit status)."""
    import psutil

    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def kill_and_wait_for(proc: Any, others: list[Any], timeout: float) -> list[Any]:
    """SIGKILL ``proc`` (a `subprocess.Popen`), then wait up to ``timeout`` seconds for
    ``others`` (`psutil.Process`es it started) to end: those still running then."""
    import signal
    import time

    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    deadline = time.monotonic() + timeout
    while running(others) and time.monotonic() < deadline:
        time.sleep(0.2)
    return running(others)


def kill_all(procs: list[Any]) -> None:
    """SIGKILL whatever of ``procs`` still runs, so that a failed test leaves nothing."""
    import psutil

    for p in running(procs):
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def without_weight_zero(
    ids: dict[str, np.ndarray], weights: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """2-D ids and weights by feature, each feature that has entries of weight 0 (a
    list's padding) made jax-tpu-embedding's ragged rows (object arrays of 1-D arrays)
    of its other entries, row by row: the SparseCore tests' reference conversion."""

    def rows(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
        out = np.empty(len(arrays), object)
        for i, row in enumerate(arrays):
            out[i] = np.ascontiguousarray(row, dtype)
        return out

    ids, weights = dict(ids), dict(weights)
    for name, w in list(weights.items()):
        if (w == 0).any():
            ids[name] = rows([r[g != 0] for r, g in zip(ids[name], w)], np.int32)
            weights[name] = rows([g[g != 0] for g in w], np.float32)
    return ids, weights


def fill(folder: Path, *, leave: int) -> None:
    """Fill ``folder``'s file system but ``leave`` bytes, with a file named ``filler``
    (the ``small_disk`` fixture's disk)."""
    free = shutil.disk_usage(folder).free
    with open(folder / "filler", "wb") as f:
        f.write(b"\0" * max(0, free - leave))
