"""`profiles._analysis` on JAX's own trace (`profiles._trace_events`): device compute and
host-to-device transfer per step. A real CPU trace is read by tests/profiles/test_cli.py
(``--step jax``, and Keras on JAX); here, traces in the GPU layout the CUPTI tracer writes
(device planes with ``Stream #`` lines, kernels and ``MemcpyH2D`` events on the host's
clock), written as real ``.xplane.pb`` files with known answers, and a real one from an
H200 (tests/profiles/data)."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import pytest

from profiles._jax_trace import JAX_TRACE_DIR, NEXT_SPAN, device_time_of, jax_device_time
from profiles._results import DEVICE_BUSY_THRESHOLD
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


H200_TRACE = Path(__file__).parent / "data" / "h200-keras-ranking-jax.xplane.pb.gz"


def test_a_real_gpu_trace(tmp_path):
    """JAX's trace of 10 profiled steps of tfinput's Keras ranking model on JAX (batch
    4096) on an NVIDIA H200, from ``benchmarks/jax_profile.py`` (benchmarks/RESULTS.md):
    the GPU plane as CUPTI wrote it, and of the host plane the step markers alone. The
    kernels are read again here straight from the protobuf. Consecutive kernels on the
    one compute stream overlap (about 1,100 of 1,500: the next one starts before the last
    one ends), so it is their union that counts, not their sum."""
    space = xspace_class()()
    space.ParseFromString(gzip.decompress(H200_TRACE.read_bytes()))
    _write(tmp_path, space)
    jax = jax_device_time(tmp_path)
    assert jax.platform == "gpu"
    assert [s.step for s in jax.steps] == list(range(5, 15))

    gpu = next(p for p in space.planes if p.name == "/device:GPU:0")
    # One compute stream (with device-to-device copies), the copies' own streams.
    compute = [line for line in gpu.lines if "Compute" in line.name]
    assert [line.name for line in compute] == ["Stream #14(MemcpyD2D,Compute)"]
    assert all(line.name.startswith("Stream #") for line in gpu.lines)
    names = {k: m.name for k, m in gpu.event_metadata.items()}
    kernels = [
        (compute[0].timestamp_ns * 1000 + e.offset_ps, e.duration_ps)
        for e in compute[0].events
        if not names[e.metadata_id].startswith(("Memcpy", "Memset"))
    ]
    host = next(p for p in space.planes if p.name == "/host:CPU")
    markers = sorted(
        (line.timestamp_ns * 1000 + e.offset_ps, e.duration_ps)
        for line in host.lines
        for e in line.events
    )
    for step, (start, duration) in zip(jax.steps, markers, strict=True):
        busy, reached = 0, start  # the kernels' union inside the step, merged in order
        for s, d in sorted(kernels):
            lo, hi = max(s, reached), min(s + d, start + duration)
            busy += max(0, hi - lo)
            reached = max(reached, s + d)
        assert step.compute_ms == pytest.approx(busy / 1e9, rel=1e-6)
        assert step.step_ms == pytest.approx(duration / 1e9)
        # Host-bound: the kernels are about 1.2 ms of a 20-30 ms train_on_batch.
        assert 1.0 < step.compute_ms < 1.5 and 0.2 < step.transfer_ms < 1.0
        assert 15 < step.step_ms < 40


def test_a_host_bound_jax_step_is_named_in_the_verdict(tmp_path, slow_map):
    from profiles._results import Spread

    space = xspace_class()()
    space.ParseFromString(gzip.decompress(H200_TRACE.read_bytes()))
    _write(tmp_path, space)
    quiet = dataclasses.replace(
        slow_map,
        jax_device=jax_device_time(tmp_path),
        input_wait=Spread(average=0.005, minimum=0.004, maximum=0.006),
    )
    assert quiet.input_limits is False
    busy = quiet.device_busy
    assert busy == pytest.approx(quiet.jax_device.compute_ms / quiet.jax_device.step_ms)
    assert busy < DEVICE_BUSY_THRESHOLD
    assert f"The device computed {busy:.0%} of the step" in quiet.verdict
    assert "steps_per_execution" in quiet.verdict
    assert quiet.to_dict()["device_busy"] == pytest.approx(busy)
    # A step that keeps the device busy gets no such sentence.
    busy_steps = tuple(
        dataclasses.replace(s, compute_ms=0.9 * s.step_ms) for s in quiet.jax_device.steps
    )
    full = dataclasses.replace(
        quiet, jax_device=dataclasses.replace(quiet.jax_device, steps=busy_steps)
    )
    assert full.device_busy == pytest.approx(0.9)
    assert "computed" not in full.verdict and full.verdict in quiet.verdict


# ------------------------------------------------------ steps from JAX's trace
def _plane_str(space, name, lines):
    """Like `_plane`, with string stats too: {line: [(name, start_us, dur_us, stats)]}."""
    plane = space.planes.add(id=len(space.planes), name=name)
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
                stat = event.stats.add(metadata_id=sid)
                if isinstance(value, str):
                    stat.str_value = value
                else:
                    stat.int64_value = value
    return plane


def _jitted_run(space):
    """Three calls of a jitted ``train`` 1000 us apart (and one call of another
    function), its XLA executions on a thunk thread."""
    _plane_str(
        space,
        "/host:CPU",
        {
            "main": [
                ("PjitFunction(train)", 0, 300, {}),
                ("PjitFunction(init)", 100, 10, {}),
                ("PjitFunction(train)", 1000, 300, {}),
                ("PjitFunction(train)", 2000, 300, {}),
            ],
            "tf_XLAEigen/1": [
                ("fusion", 50, 200, {"hlo_op": "fusion", "hlo_module": "jit_train"}),
                ("fusion", 1050, 400, {"hlo_op": "fusion", "hlo_module": "jit_train"}),
                ("fusion", 2050, 500, {"hlo_op": "fusion", "hlo_module": "jit_train"}),
            ],
        },
    )


def test_without_step_markers_each_call_of_the_jitted_step_starts_a_step():
    space = xspace_class()()
    _jitted_run(space)
    jax = device_time_of(space, step_name="train")
    assert jax.steps_from == "executions" and jax.input_from == ""
    # From each call to the next; the last to the end of the work it started.
    assert [(s.step, s.step_ms, s.compute_ms) for s in jax.steps] == [
        (0, 1.0, pytest.approx(0.2)),
        (1, 1.0, pytest.approx(0.4)),
        (2, pytest.approx(0.55), pytest.approx(0.5)),
    ]
    assert jax.windows[1] == (T0 * 1000 + 1000 * US, T0 * 1000 + 2000 * US)


def test_the_wait_for_input_is_the_captures_next_spans_else_the_input_stages():
    space = xspace_class()()
    marker = {"step_num": 0, "_r": 1}
    stage = {"_ipl_stage_name": "tfinput/sparsecore/wait", "_ipl_stage_cat": "enqueue"}
    _plane_str(
        space,
        "/host:CPU",
        {
            "main": [
                ("train", 0, 1000, marker),
                (NEXT_SPAN, 0, 300, {}),
                ("tfinput/sparsecore/wait", 10, 250, stage),
                ("train", 1000, 1000, {**marker, "step_num": 1}),
                (NEXT_SPAN, 1000, 100, {}),
            ],
            "tf_XLAEigen/1": [("fusion", 400, 500, {"hlo_op": "fusion"})],
        },
    )
    jax = device_time_of(space, step_name="train")
    assert jax.steps_from == "markers" and jax.input_from == "next() spans"
    assert [(s.input_ms, s.compute_ms, s.other_ms) for s in jax.steps] == [
        (pytest.approx(0.3), pytest.approx(0.5), pytest.approx(0.2)),
        (pytest.approx(0.1), 0.0, pytest.approx(0.9)),
    ]
    # A trace taken without the capture's spans: the input stages on the step's thread.
    for plane in space.planes:
        for line in plane.lines:
            keep = [e for e in line.events if plane.event_metadata[e.metadata_id].name != NEXT_SPAN]
            del line.events[:]
            line.events.extend(keep)
    jax = device_time_of(space, step_name=None)  # any step annotation (_r=1, step_num)
    assert jax.input_from == "input stages"
    assert [s.input_ms for s in jax.steps] == [pytest.approx(0.25), 0.0]


def test_a_jax_trace_without_tensorflow_steps_gets_its_steps_from_jax(tmp_path, capsys):
    """`tfinput inspect` of a run JAX's profiler wrote alone (no TensorFlow step, no
    capture metadata): the steps are the jitted step's calls."""
    from profiles import analyze, format_text

    space = xspace_class()()
    _jitted_run(space)
    run = tmp_path / "plugins" / "profile" / "r1"
    run.mkdir(parents=True)
    (run / "host.xplane.pb").write_bytes(space.SerializeToString())
    analysis = analyze(tmp_path)
    assert analysis.step_source == "jax executions"
    assert [s.step for s in analysis.steps] == ["train 0", "train 1", "train 2"]
    assert analysis.input_wait is None and analysis.input_limits is None
    assert analysis.verdict.startswith("the trace does not show the steps' wait for input")
    top = analysis.top_ops[0]
    assert (top.where, top.type, top.name, top.source) == (
        "host",
        "XLA",
        "jit_train/fusion",
        "jax trace",
    )
    assert top.ms_per_step == pytest.approx((0.2 + 0.4 + 0.5) / 3)
    text = " ".join(format_text(analysis).split())
    assert "Per-step breakdown (ms, JAX's trace, the jitted step's executions)" in text
    assert "the steps are read from JAX's trace (its jitted step's executions)" in text
    assert "it shows no wait for input" in text
