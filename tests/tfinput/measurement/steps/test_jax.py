"""`tfinput._src.measurement.steps.jax`: a user's jitted ``fn(state, batch) -> state`` fed by tfinput,
with and without device prefetch."""

from __future__ import annotations

import numpy as np
import pytest

import tfinput
from tfinput import steps
from tfinput.errors import ConfigError, DataError
from tfinput.measure.windows import WindowPlan

pytest.importorskip("jax")


def _jax_source(cfg):
    import tensorflow as tf

    x = np.arange(40 * 3, dtype=np.float32).reshape(40, 3)
    ds = tf.data.Dataset.from_tensor_slices({"x": x, "y": np.arange(40, dtype=np.int32)})
    return ds.batch(cfg.batch_size, drop_remainder=True).repeat()


def _jax_train():
    import jax
    import jax.numpy as jnp

    @jax.jit
    def train(state, batch):
        return {
            "w": state["w"] * 0.5 + jnp.sum(batch["x"], axis=0),
            "n": state["n"] + batch["y"].shape[0],
            "last": batch["y"][-1],
        }

    return train, {"w": jnp.zeros(3), "n": jnp.int32(0), "last": jnp.int32(-1)}


def test_jax_step_trains_and_device_prefetch_gives_the_same_state():
    import jax

    from tuners._objective import measure

    final = []
    for prefetch in (0, 2):
        train, state = _jax_train()
        step = steps.jax_step(train, state)
        config = tfinput.PipelineConfig(batch_size=4, device_prefetch=prefetch)
        assert step.feeds_device and step.backend == "jax" and step.owns_loop
        assert step.prepare(config).describe()["device_prefetch"] == prefetch
        m = measure(
            _jax_source,
            config,
            step,
            plan=WindowPlan(windows=2, window_batches=3, warmup_batches=1),
        )
        assert len(m.rates) == 2 and all(r > 0 for r in m.rates)
        assert 0.0 <= m.stall <= 1.0
        # 1 warm-up + 2 x 3 batches of 4 examples: 7 batches, the last one is rows 24-27.
        assert int(step.state["n"]) == 28 and int(step.state["last"]) == 27
        final.append(step.state)
    same = jax.tree_util.tree_map(lambda a, b: bool(np.allclose(a, b)), *final)
    assert all(jax.tree_util.tree_leaves(same)), same


def test_jax_step_jits_a_plain_function_and_runs_one_batch():
    def plain(state, batch):
        return state + batch["y"].sum()

    step = steps.jax_step(plain, np.int32(0))
    batch = next(iter(_jax_source(tfinput.PipelineConfig(batch_size=4))))
    assert int(step(batch)) == 0 + 1 + 2 + 3 and int(step.state) == 6
    assert step.name == "jax plain"
    with pytest.raises(ConfigError, match="carries no state"):
        _ = steps.input_only().state
    with pytest.raises(ConfigError, match="callable"):
        steps.jax_step(42, None)


def test_jax_step_windows_count_examples_and_need_data_past_the_warmup():
    train, state = _jax_train()
    assert steps.jax_step(train, state).name == "jax train"  # named through jax.jit
    step = steps.jax_step(train, state).prepare(tfinput.PipelineConfig(device_prefetch=1))
    ws = step.run_windows(
        _jax_source(tfinput.PipelineConfig(batch_size=5)),
        batch_size=None,
        warmup_batches=2,
        windows=2,
        window_batches=3,
    )
    assert [(w.round, w.batches, w.examples) for w in ws] == [(0, 3, 15), (1, 3, 15)]
    assert int(step.state["n"]) == 40 and int(step.state["last"]) == 39  # 8 batches of 5
    short = _jax_source(tfinput.PipelineConfig(batch_size=20)).take(1)
    with pytest.raises(DataError, match=r"step: the data ended after 1 warm-up batch\(es\)"):
        step.run_windows(short, batch_size=20, warmup_batches=2, windows=1, window_batches=1)
