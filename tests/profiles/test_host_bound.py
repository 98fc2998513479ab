"""xprof's host-bound rule (`profiles._host_bound`) on a TPU-shaped trace written here
(a TPU v6e's device plane: steps, XLA modules and ops, and the matrix-unit hardware
counters, in the layout xprof's converters read), checked against xprof's own
``check_host_boundness``; and on a CPU trace, where the rule has nothing to judge."""

from __future__ import annotations

import json

import pytest

from profiles._host_bound import XPROF_THRESHOLDS
from profiles._xplane import xspace_class
from tests.helpers import run_cli

T0 = 1_000_000  # ns
US = 1_000_000  # ps
STEP_US, STEPS = 10_000, 5
# TPU v6e's counters (xprof/utils/tpu_counter_ids_v7.h): cycles, cycles no MXU is busy.
CYCLES, MXU_BUSY_0 = 3257466888, 3257467400


class _Plane:
    def __init__(self, plane):
        self.plane, self.stats, self.events = plane, {}, {}

    def stat_id(self, name):
        if name not in self.stats:
            sid = self.stats[name] = len(self.stats) + 1
            self.plane.stat_metadata[sid].id, self.plane.stat_metadata[sid].name = sid, name
        return self.stats[name]

    def set(self, stat, value):
        if isinstance(value, str):
            stat.str_value = value
        else:
            stat.int64_value = value

    def event(self, line, name, start_us, duration_us, stats=None, metadata=None):
        if name not in self.events:
            mid = self.events[name] = len(self.events) + 1
            meta = self.plane.event_metadata[mid]
            meta.id, meta.name = mid, name
            for key, value in (metadata or {}).items():
                self.set(meta.stats.add(metadata_id=self.stat_id(key)), value)
        e = line.events.add(
            metadata_id=self.events[name],
            offset_ps=int(start_us * US),
            duration_ps=int(duration_us * US),
        )
        for key, value in (stats or {}).items():
            self.set(e.stats.add(metadata_id=self.stat_id(key)), value)


def write_tpu_trace(run_dir, *, idle_cycles: int | None):
    """Five 10 ms steps of a TPU v6e: in each, a 2 ms fusion and a 1 ms copy (the rest
    of the step the TPU idles: 70%), launched from the host inside TensorFlow step
    markers; the counters say no matrix unit was busy for ``idle_cycles`` of 1,000,000
    (None: no counters, as in a capture taken without them)."""
    space = xspace_class()()
    tpu = _Plane(space.planes.add(id=1, name="/device:TPU:0"))
    for key, value in (("device_id", 0), ("device_type_string", "TPU v6 Lite")):
        tpu.set(tpu.plane.stats.add(metadata_id=tpu.stat_id(key)), value)
    steps, modules, ops, counters = (
        tpu.plane.lines.add(id=i + 1, name=n, timestamp_ns=T0)
        for i, n in enumerate(("Steps", "XLA Modules", "XLA Ops", "Counters"))
    )
    host = _Plane(space.planes.add(id=2, name="/host:CPU"))
    python = host.plane.lines.add(id=1, name="python", timestamp_ns=T0)
    for i in range(STEPS):
        t = i * STEP_US
        host.event(python, "train", t, STEP_US, {"step_num": i, "_r": 1})
        host.event(python, "ExecuteOnDevice", t + 500, 500, {"_pt": 0, "_p": 100 + i})
        tpu.event(steps, str(i), t, STEP_US)
        tpu.event(modules, "jit_train(1)", t + 1000, 3000, {"run_id": i, "_ct": 0, "_c": 100 + i})
        fusion = {"hlo_category": "convolution", "program_id": 1, "symbol_id": 11}
        tpu.event(ops, "fusion.1", t + 1000, 2000, metadata=fusion)
        copy = {"hlo_category": "data formatting", "program_id": 1, "symbol_id": 12}
        tpu.event(ops, "copy.1", t + 3000, 1000, metadata=copy)
    counted = () if idle_cycles is None else ((CYCLES, 1_000_000), (MXU_BUSY_0, idle_cycles))
    for k, (counter, value) in enumerate(counted):
        tpu.event(
            counters,
            f"counter {k}",
            0,
            0,
            {"performance_counter_id": counter, "counter_value": value},
        )
    path = run_dir / "plugins" / "profile" / "r1" / "tpu-host.xplane.pb"
    path.parent.mkdir(parents=True)
    path.write_bytes(space.SerializeToString())
    return path


@pytest.fixture(scope="module")
def idle_tpu(tmp_path_factory):
    """A run whose TPU idles 70% of the steps with its matrix units idle 80%."""
    run = tmp_path_factory.mktemp("idle-tpu")
    write_tpu_trace(run, idle_cycles=800_000)
    return run


@pytest.fixture(scope="module")
def busy_units_tpu(tmp_path_factory):
    """The same, but the counters say the matrix units were idle only 20%."""
    run = tmp_path_factory.mktemp("busy-units-tpu")
    write_tpu_trace(run, idle_cycles=200_000)
    return run


def _xprofs_own(run, tmp_path, monkeypatch):
    """xprof 2.24's ``check_host_boundness`` on the run (its cache in ``tmp_path``)."""
    import tempfile

    from xprof.cli.tools import check_host_boundness_tool

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    run_dir = next(run.rglob("*.xplane.pb")).parent
    return json.loads(check_host_boundness_tool.check_host_boundness(str(run_dir)))


def test_a_host_bound_tpu_run_gets_xprofs_verdict_beside_tfinputs(idle_tpu, tmp_path, monkeypatch):
    import profiles

    analysis = profiles.analyze(idle_tpu)
    check = analysis.xprof_host_bound
    assert check.applies and check.status == "HOST_BOUND" and check.failed == ()
    m = check.metrics
    assert (m["steps"], m["total_ms"], m["cores"]) == (STEPS, STEPS * 10.0, 1)
    assert m["idle_percent"] == pytest.approx(70.0) and m["mxu_idle_percent"] == 80.0
    # xprof 2.24 reads a v6e's memory and interconnect counters as 0% (no counters here).
    assert check.missing == () and (m["hbm_percent"], m["ici_read_percent"]) == (0.0, 0.0)

    theirs = _xprofs_own(idle_tpu, tmp_path, monkeypatch)
    assert theirs["status"] == check.status
    for ours, key in (
        ("idle_percent", "idle_time_ratio_percent"),
        ("mxu_idle_percent", "mxu_idleness_percent"),
        ("hbm_percent", "hbm_bandwidth_utilization_percent"),
        ("total_ms", "total_duration_ms"),
        ("duty_cycle_percent", "tpu_duty_cycle_percent"),
    ):
        assert m[ours] == pytest.approx(theirs["metrics"][key], abs=0.01), key

    # tfinput: no wait for input, the TPU computing under half of each step: the host
    # limits training; both say so.
    assert analysis.input_limits is False and analysis.host_bound is True
    assert analysis.host_bound_note == "agrees with tfinput's verdict"
    text = " ".join(profiles.format_text(analysis).split())
    assert (
        "xprof host-bound rule host-bound (idle 70.0%, matrix units idle 80.0%, memory "
        "bandwidth 0.0%, interconnect 0.0% read / 0.0% write)"
    ) in text
    assert "agrees with tfinput's verdict" in text


def test_when_xprofs_rule_and_tfinput_differ_the_report_says_why(
    busy_units_tpu, tmp_path, monkeypatch, capsys
):
    import profiles

    analysis = profiles.analyze(busy_units_tpu)
    check = analysis.xprof_host_bound
    assert check.status == "NOT_HOST_BOUND"
    assert check.failed == ("matrix units idle 20.0% is not above 70%",)
    assert _xprofs_own(busy_units_tpu, tmp_path, monkeypatch)["status"] == "NOT_HOST_BOUND"
    assert analysis.host_bound is True
    note = analysis.host_bound_note
    assert note.startswith("differs from tfinput's: xprof calls a run host-bound only when")
    assert "matrix units idle 20.0% is not above 70%" in note
    _, out, _ = run_cli(capsys, "inspect", busy_units_tpu, "--json")
    data = json.loads(out)
    assert data["xprof_host_bound"]["status"] == "NOT_HOST_BOUND"
    assert data["host_bound"] is True and data["host_bound_note"] == note


def test_a_tpu_run_without_its_counters_gets_no_verdict_but_what_it_lacks(tmp_path):
    import profiles

    write_tpu_trace(tmp_path, idle_cycles=None)
    check = profiles.analyze(tmp_path).xprof_host_bound
    assert not check.applies and check.status == ""
    assert check.missing == ("matrix-unit idleness", "memory bandwidth", "interconnect bandwidth")
    assert check.summary.startswith(
        "not applicable: the trace has no matrix-unit idleness, no memory bandwidth, no "
        "interconnect bandwidth"
    )


def test_on_a_cpu_trace_the_report_names_the_inputs_it_lacks(slow_map, capsys, slow_map_logdir):
    check = slow_map.xprof_host_bound
    assert not check.applies and check.host_bound is None
    assert check.missing == (
        "XLA op times on the TPU",
        "matrix-unit idleness",
        "memory bandwidth",
        "interconnect bandwidth",
    )
    assert slow_map.host_bound_note == ""
    code, out, _ = run_cli(capsys, "inspect", slow_map_logdir)
    assert code == 0, out
    text = " ".join(out.split())
    assert (
        "xprof host-bound rule not applicable: the trace has no XLA op times on the TPU, no "
        "matrix-unit idleness, no memory bandwidth, no interconnect bandwidth"
    ) in text


def test_the_thresholds_are_xprofs():
    from xprof.cli.tools import check_host_boundness_tool as tool

    assert XPROF_THRESHOLDS == {
        "idle": tool._IDLE_TIME_RATIO_HIGH_THRESHOLD_PERCENT,
        "mxu_idle": tool._MXU_IDLENESS_HIGH_THRESHOLD_PERCENT,
        "hbm": tool._HBM_BW_LOW_THRESHOLD_PERCENT,
        "ici": tool._ICI_BW_LOW_THRESHOLD_PERCENT,
        "duty_cycle": tool._DUTY_CYCLE_HIGH_THRESHOLD_PERCENT,
    }
