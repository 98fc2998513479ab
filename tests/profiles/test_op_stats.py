"""What the step spends besides input (`profiles._op_stats`, with the sizes
`profiles._variables` records at capture): the top operations per step, and the whole
reads and updates of embedding-sized variables, on two small Keras models of three
tables of a million rows each, both trained by SGD (a scatter into the tables), one
reading them densely (``ops.take``: TensorFlow's ``ReadVariableOp`` copies a scattered
variable whole) and adding to a 16 MB count table whole every step, one reading them
sparsely (``tf.nn.embedding_lookup``: ``ResourceGather``). Neither is tfinput's
built-in model, so these tests do not depend on how that one reads its tables."""

from __future__ import annotations

import json

import pytest

from profiles._op_stats import DENSE_BYTES, DenseWork, _FrameworkOp, dense_work, xla_ops
from tests.helpers import run_cli

ROWS, DIM, TABLES, BATCH = 1_000_000, 8, 3, 256  # 32 MB per table


def _model(sparse: bool):
    import keras
    import tensorflow as tf

    class Tables(keras.layers.Layer):
        def build(self, shape):
            self.tables = [
                self.add_weight(name=f"emb_{i}", shape=(ROWS, DIM), initializer="zeros")
                for i in range(TABLES)
            ]
            self.counts = self.add_weight(
                name="counts", shape=(ROWS, 4), initializer="zeros", trainable=False
            )

        def call(self, ids):
            if sparse:  # ResourceGather on the variable: the rows only
                rows = [
                    tf.nn.embedding_lookup(t.value, ids[:, i]) for i, t in enumerate(self.tables)
                ]
            else:  # the variable read as a tensor, then gathered: ReadVariableOp + GatherV2
                rows = [keras.ops.take(t, ids[:, i], axis=0) for i, t in enumerate(self.tables)]
                self.counts.assign_add(keras.ops.ones((ROWS, 4)))  # a whole 16 MB update
            return keras.ops.concatenate(rows, axis=1)

    inputs = keras.Input(shape=(TABLES,), dtype="int32")
    model = keras.Model(inputs, keras.layers.Dense(1)(Tables(name="tables")(inputs)))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def _capture(tmp_path_factory, sparse: bool):
    import tensorflow as tf

    import profiles
    from tfinput import steps

    ids = tf.random.stateless_uniform((BATCH, TABLES), (1, 2), 0, ROWS, tf.int32)
    data = tf.data.Dataset.from_tensors((ids, tf.zeros((BATCH, 1)))).repeat()
    logdir = tmp_path_factory.mktemp("sparse" if sparse else "dense")
    profiles.capture(data, steps.keras_step(_model(sparse)), logdir=logdir, steps=3, warmup=2)
    return logdir


@pytest.fixture(scope="module")
def dense_logdir(tmp_path_factory):
    return _capture(tmp_path_factory, sparse=False)


@pytest.fixture(scope="module")
def sparse_logdir(tmp_path_factory):
    return _capture(tmp_path_factory, sparse=True)


def test_a_model_reading_its_tables_densely_is_named_with_the_variable_and_the_time(
    dense_logdir,
):
    import profiles

    analysis = profiles.analyze(dense_logdir)
    assert analysis.variables_recorded
    step_ms = analysis.step_time_ms.average
    reads = {d.variable: d for d in analysis.dense_work if d.access == "read"}
    assert sorted(reads) == [f"tables/emb_{i}" for i in range(TABLES)], analysis.dense_work
    for work in reads.values():
        assert (work.shape, work.dtype, work.bytes) == ((ROWS, DIM), "float32", ROWS * DIM * 4)
        (op,) = work.ops  # Keras numbers its layers per process: the op's path varies
        assert "/GatherV2" in op and op.endswith("/ReadVariableOp")
        assert work.ms_per_step > 0 and work.share == pytest.approx(work.ms_per_step / step_ms)
    # The count table, written whole every step (SGD only scatters into the tables).
    (update,) = [d for d in analysis.dense_work if d.access == "update"]
    assert (update.variable, update.shape, update.bytes) == ("tables/counts", (ROWS, 4), 16e6)
    assert (
        "AssignVariableOp" in update.ops[0] and update.ms_per_step > 0
    )  # Keras: read, add, assign
    # The top operations per step include the reads, with the same time.
    top = {op.name: op for op in analysis.top_ops}
    for work in reads.values():
        (op,) = work.ops
        if op in top:
            assert top[op].type == "ReadVariableOp"
            assert top[op].ms_per_step == pytest.approx(work.ms_per_step)
    assert all(op.source == "framework_op_stats" for op in analysis.top_ops)
    assert [op.ms_per_step for op in analysis.top_ops] == sorted(
        (op.ms_per_step for op in analysis.top_ops), reverse=True
    )


def test_a_model_reading_its_tables_sparsely_is_not_named(sparse_logdir):
    import profiles

    analysis = profiles.analyze(sparse_logdir)
    assert analysis.variables_recorded and analysis.steps
    assert analysis.dense_work == ()
    # Its tables are read and updated, by row: ResourceGather and ResourceScatterSub.
    recorded = {(r["type"], r["variable"]) for r in analysis.capture["variable_ops"]}
    for i in range(TABLES):
        table = f"tables/emb_{i}"
        assert {("ResourceGather", table), ("ResourceScatterSub", table)} <= recorded
    assert analysis.top_ops and all(op.type != "ReadVariableOp" for op in analysis.top_ops[:3])


def test_inspect_shows_the_same(capsys, dense_logdir, sparse_logdir):
    code, out, _ = run_cli(capsys, "inspect", dense_logdir)
    assert code == 0, out
    text = " ".join(out.split())
    for i in range(TABLES):
        assert f"tables/emb_{i} (1,000,000 x 8 float32, 32.0 MB) read whole: " in text
    assert "tables/counts (1,000,000 x 4 float32, 16.0 MB) updated whole: " in text
    assert "Top operations by self time per step (framework_op_stats)" in text

    code, out, _ = run_cli(capsys, "inspect", dense_logdir, "--json")
    data = json.loads(out)
    reads = [d for d in data["dense_work"] if d["access"] == "read"]
    assert sorted(d["variable"] for d in reads) == [f"tables/emb_{i}" for i in range(TABLES)]
    assert all(d["ms_per_step"] > 0 and "ms per step" in d["summary"] for d in reads)
    assert data["top_ops"] and {"where", "type", "name", "ms_per_step"} <= set(data["top_ops"][0])

    code, out, _ = run_cli(capsys, "inspect", sparse_logdir)
    assert code == 0, out
    text = " ".join(out.split())
    assert "Dense work in the step none (no whole read or update of a variable of 16 MB" in text
    assert "read whole" not in text and "updated whole" not in text


def _row(name, op_type, ms, where="host"):
    return _FrameworkOp(where=where, type=op_type, name=name, self_ms=ms, calls=2)


def _record(op, op_type, variable, *, rows=ROWS, function="__inference_step_1"):
    return {
        "function": function,
        "op": op,
        "type": op_type,
        "variable": variable,
        "shape": [rows, DIM],
        "dtype": "float32",
        "bytes": rows * DIM * 4,
    }


def test_dense_work_matches_recorded_ops_by_name():
    recorded = [
        _record("emb/GatherV2/ReadVariableOp", "ReadVariableOp", "emb"),
        _record("opt/AssignSubVariableOp", "AssignSubVariableOp", "emb"),
        _record("opt/ResourceApplyAdam", "ResourceApplyAdam", "emb"),
        _record("emb/embedding_lookup", "ResourceGather", "emb"),
        _record("opt/ResourceSparseApplyAdagradV2", "ResourceSparseApplyAdagradV2", "emb"),
        _record("small/ReadVariableOp", "ReadVariableOp", "small", rows=1000),
        _record("slot/ReadVariableOp", "ReadVariableOp", "slot"),
        # One name in two functions for two variables: which one ran is unknown.
        _record("x/ReadVariableOp", "ReadVariableOp", "a"),
        _record("x/ReadVariableOp", "ReadVariableOp", "b", function="__inference_other_2"),
    ]
    rows = [
        # An inlined function keeps its node names under the call's.
        _row("StatefulPartitionedCall/emb/GatherV2/ReadVariableOp", "ReadVariableOp", 6.0),
        _row("opt/AssignSubVariableOp", "AssignSubVariableOp", 3.0),
        _row("opt/ResourceApplyAdam", "ResourceApplyAdam", 1.0),
        _row("emb/embedding_lookup", "ResourceGather", 0.3),
        _row("opt/ResourceSparseApplyAdagradV2", "ResourceSparseApplyAdagradV2", 0.2),
        _row("small/ReadVariableOp", "ReadVariableOp", 0.1),
        # 2 µs for 32 MB: no copy (a variable no sparse op touched hands its buffer over).
        _row("slot/ReadVariableOp", "ReadVariableOp", 0.004),
        _row("x/ReadVariableOp", "ReadVariableOp", 2.0),
        _row("unrecorded/ReadVariableOp", "ReadVariableOp", 5.0),
    ]
    found = dense_work(rows, recorded, steps=2, step_ms=10.0)
    assert found == (
        DenseWork(
            variable="emb",
            shape=(ROWS, DIM),
            dtype="float32",
            bytes=ROWS * DIM * 4,
            access="read",
            ops=("StatefulPartitionedCall/emb/GatherV2/ReadVariableOp",),
            ms_per_step=3.0,
            share=0.3,
        ),
        DenseWork(
            variable="emb",
            shape=(ROWS, DIM),
            dtype="float32",
            bytes=ROWS * DIM * 4,
            access="update",
            ops=("opt/AssignSubVariableOp", "opt/ResourceApplyAdam"),
            ms_per_step=2.0,
            share=0.2,
        ),
    )
    assert found[0].summary == (
        "emb (1,000,000 x 8 float32, 32.0 MB) read whole: 3.00 ms per step (30.0% of the "
        "step), by StatefulPartitionedCall/emb/GatherV2/ReadVariableOp"
    )
    assert 1000 * DIM * 4 < DENSE_BYTES <= ROWS * DIM * 4
    assert dense_work(rows, recorded, steps=0, step_ms=None) == ()
    assert dense_work(rows, [], steps=2, step_ms=10.0) == ()


def test_xla_ops_per_step_and_the_device_copies_of_embedding_size():
    """A JAX trace in a GPU's layout (kernels on the device's stream lines carry the
    ``hlo_op`` they run; a copy carries its size): the ops' time inside the steps, and a
    device-to-device copy of 32 MB named as dense work, a 4-byte one not."""
    from profiles._xplane import xspace_class

    space = xspace_class()()
    plane = space.planes.add(id=1, name="/device:GPU:0")
    line = plane.lines.add(id=1, name="Stream #14(Compute)", timestamp_ns=1000)
    names: dict[str, int] = {}
    stat_ids: dict[str, int] = {}

    def event(name, start_us, duration_us, **stats):
        mid = names.setdefault(name, len(names) + 1)
        plane.event_metadata[mid].id, plane.event_metadata[mid].name = mid, name
        e = line.events.add(
            metadata_id=mid, offset_ps=start_us * 10**6, duration_ps=duration_us * 10**6
        )
        for key, value in stats.items():
            sid = stat_ids.setdefault(key, len(stat_ids) + 1)
            plane.stat_metadata[sid].id, plane.stat_metadata[sid].name = sid, key
            e.stats.add(metadata_id=sid, str_value=value)

    big = "kind_src:device kind_dst:device size:32000000 dest:0 async:0"
    for step in range(2):
        t = step * 1000
        event("MemcpyD2D", t + 10, 300, hlo_op="copy.3", hlo_module="jit_train", memcpy_details=big)
        event("MemcpyD2D", t + 400, 5, hlo_op="copy.1", hlo_module="jit_train",
              memcpy_details="kind_src:device kind_dst:device size:4 dest:0 async:0")  # fmt: skip
        event("loop_fusion", t + 500, 100, hlo_op="fusion.2", hlo_module="jit_train")
    event("loop_fusion", 5000, 100, hlo_op="fusion.2", hlo_module="jit_train")  # after the steps
    base = 1000 * 1000
    windows = [(base, base + 1000 * 10**6), (base + 1000 * 10**6, base + 2000 * 10**6)]
    ops, copies = xla_ops(space, windows, step_ms=1.0)
    assert [(o.where, o.type, o.name, o.ms_per_step, o.calls_per_step) for o in ops] == [
        ("device", "XLA", "jit_train/copy.3", pytest.approx(0.3), 1),
        ("device", "XLA", "jit_train/fusion.2", pytest.approx(0.1), 1),
        ("device", "XLA", "jit_train/copy.1", pytest.approx(0.005), 1),
    ]
    (copy,) = copies
    assert (copy.variable, copy.access, copy.bytes, copy.ms_per_step) == (
        "jit_train/copy.3", "copy", 32_000_000, pytest.approx(0.3)
    )  # fmt: skip
    assert copy.summary == (
        "jit_train/copy.3 (32.0 MB) copied whole: 0.30 ms per step (30.0% of the step), "
        "by jit_train/copy.3"
    )
    assert xla_ops(space, [], step_ms=None) == ((), ())
