"""`profiles.analysis` on JAX's own trace (`profiles._jax_trace`): device compute and
host-to-device transfer per step. A real CPU trace is read by tests/profiles/test_cli.py
(``--step jax``, and Keras on JAX); here, traces in the GPU layout the CUPTI tracer writes
(device planes with ``Stream #`` lines, kernels and ``MemcpyH2D`` events on the host's
clock), written as real ``.xplane.pb`` files, with known answers."""

from __future__ import annotations

import pytest

from profiles._jax_trace import JAX_TRACE_DIR, jax_device_time
from profiles._xplane import xspace_class

US = 1_000_000  # picoseconds per microsecond
T0 = 1_000_000  # the lines' timestamp, ns


def _plane(space, name, lines):
    """``lines``: {line name: [(event name, start_us, duration_us, {stat: int})]}."""
    plane = space.planes.add(name=name)
    names, stats = {}, {}
    for i, (line_name, events) in enumerate(lines.items()):
        line = plane.lines.add(id=i, name=line_name, timestamp_ns=T0)
        for event_name, start, duration, event_stats in events:
            mid = names.setdefault(event_name, len(names) + 1)
            plane.event_metadata[mid].id = mid
            plane.event_metadata[mid].name = event_name
            event = line.events.add(
                metadata_id=mid, offset_ps=start * US, duration_ps=duration * US
            )
            for stat_name, value in event_stats.items():
                sid = stats.setdefault(stat_name, len(stats) + 1)
                plane.stat_metadata[sid].id = sid
                plane.stat_metadata[sid].name = stat_name
                event.stats.add(metadata_id=sid, int64_value=value)


def _steps(*windows):
    return [
        ("train", start, duration, {"step_num": n}) for n, (start, duration) in enumerate(windows)
    ]


def _write(run_dir, space):
    path = run_dir / JAX_TRACE_DIR / "plugins" / "profile" / "r1" / "host.xplane.pb"
    path.parent.mkdir(parents=True)
    path.write_bytes(space.SerializeToString())


def test_gpu_kernels_and_copies_per_step(tmp_path):
    space = xspace_class()()
    # Two steps of 1000 us; a launch on the host is not device time.
    _plane(
        space,
        "/host:CPU",
        {"main": _steps((0, 1000), (1000, 1000)) + [("PjitFunction(f)", 10, 50, {})]},
    )
    _plane(
        space,
        "/device:GPU:0",
        {
            # Kernels on two streams overlap 100-200 us: counted once (200 us in step 0).
            "Stream #13(compute)": [("fusion_1", 100, 200, {}), ("fusion_2", 1500, 400, {})],
            "Stream #14(compute)": [("gemm", 100, 100, {}), ("MemsetD32", 950, 10, {})],
            # Copies: 50 us in step 0, a copy cut by the step boundary split 30 + 20.
            "Stream #15(MemcpyH2D)": [("MemcpyH2D", 10, 50, {}), ("MemcpyH2D", 970, 50, {})],
            "Stream #16(MemcpyD2H)": [("MemcpyD2H", 1950, 40, {})],
            # A derived line repeats the kernels and spans whole steps: not counted.
            "XLA Ops": [("fusion_1", 0, 2000, {})],
        },
    )
    _write(tmp_path, space)
    jax = jax_device_time(tmp_path)
    assert jax.platform == "gpu"
    assert [(s.step, s.step_ms, s.compute_ms, s.transfer_ms) for s in jax.steps] == [
        (0, 1.0, pytest.approx(0.2), pytest.approx(0.08)),
        (1, 1.0, pytest.approx(0.4), pytest.approx(0.02)),
    ]
    assert jax.compute_ms == pytest.approx(0.3) and jax.step_ms == 1.0
    assert jax.to_dict()["steps"][1]["compute_ms"] == pytest.approx(0.4)


def test_cpu_xla_executions_and_device_puts_per_step(tmp_path):
    space = xspace_class()()
    _plane(
        space,
        "/host:CPU",
        {
            "main": _steps((0, 500), (500, 500))
            + [("DevicePutWithSharding", 20, 30, {}), ("shard_args", 600, 10, {})],
            # Thunks on two XLA threads, overlapping: their union (hlo_op marks them).
            "tf_XLAExecute/1": [("fusion", 100, 100, {"hlo_op": 1}), ("end: fusion", 200, 1, {})],
            "tf_XLAEigen/2": [
                ("fusion.1", 150, 100, {"hlo_op": 1}),
                ("fusion.2", 700, 50, {"hlo_op": 1}),
            ],
        },
    )
    _write(tmp_path, space)
    jax = jax_device_time(tmp_path)
    assert jax.platform == "cpu"
    assert [(s.compute_ms, s.transfer_ms) for s in jax.steps] == [
        (pytest.approx(0.15), pytest.approx(0.03)),
        (pytest.approx(0.05), pytest.approx(0.01)),
    ]


def test_no_jax_trace_or_no_marked_step(tmp_path):
    assert jax_device_time(tmp_path) is None
    space = xspace_class()()
    _plane(space, "/host:CPU", {"main": [("train", 0, 10, {})]})  # no step_num: not a marker
    _write(tmp_path, space)
    assert jax_device_time(tmp_path) is None
    assert jax_device_time(tmp_path, step_name="other") is None
