"""profiles._analysis (with the private _runs, _xplane, _xprof and _results modules): xprof
tables by column id, typed results, clear messages for bad log directories, compare."""

from __future__ import annotations

import copy
import json
import os
import shutil

import pytest

from profiles import ProfileError, XprofLayoutError, analyze, capture, compare
from profiles._testing import cached_capture, fast_pipeline
from profiles._xplane import find_trace, xspace_class
from profiles._xprof import (
    TESTED_XPROF,
    check_layout,
    find_table,
    table_rows,
    version_in_range,
    xprof_tables,
    xprof_version,
)


@pytest.fixture(scope="module")
def tables(trace_file):
    return xprof_tables(
        [trace_file], ("input_pipeline_analyzer", "overview_page", "framework_op_stats")
    )


# ------------------------------------------------------------------ the results


def test_step_breakdown_and_input_wait(slow_map):
    assert slow_map.is_complete
    assert slow_map.hardware == "CPU_ONLY"
    assert len(slow_map.steps) >= 5
    assert all(s.step.startswith("train ") for s in slow_map.steps)
    wait = slow_map.input_wait
    assert wait.minimum <= wait.average <= wait.maximum
    assert wait.minimum == min(s.input_fraction for s in slow_map.steps)
    assert wait.average == pytest.approx(
        sum(s.input_ms for s in slow_map.steps) / sum(s.step_ms for s in slow_map.steps)
    )
    # The known answer: a map sleeping in every batch and no model: input-bound.
    assert wait.average > 0.5
    assert slow_map.step_time_ms.average == pytest.approx(
        sum(s.step_ms for s in slow_map.steps) / len(slow_map.steps)
    )
    assert slow_map.host_compute_ms >= 0
    assert slow_map.device_compute_ms is None  # no accelerator
    assert "input-bound" in slow_map.xprof_conclusion
    assert slow_map.xprof_recommendation


def test_stages_and_bottleneck_are_included(slow_map):
    assert slow_map.bottleneck.display_name == "ParallelMapV2 (parse)"
    assert slow_map.bottleneck.knobs == ("map_parallelism",)
    assert slow_map.main_pipeline.host == slow_map.hosts[0]
    assert any(op.name.endswith("::ParallelMapV2") for op in slow_map.xprof_input_ops)


def test_records_the_xprof_version_and_capture(slow_map):
    assert slow_map.xprof_version == xprof_version()
    assert slow_map.capture["config"]["steps"] == 8
    assert slow_map.diagnostics == ()


def test_json_form(slow_map):
    data = json.loads(json.dumps(slow_map.to_dict()))
    assert data["tested_xprof"] == TESTED_XPROF
    assert data["input_wait"]["average"] == pytest.approx(slow_map.input_wait.average)
    assert data["bottleneck"]["knobs"] == ["map_parallelism"]
    assert len(data["steps"]) == len(slow_map.steps)
    assert "input_fraction" in data["steps"][0]


def test_logdir_is_not_written_to(slow_map_logdir):
    before = sorted(p.relative_to(slow_map_logdir) for p in slow_map_logdir.rglob("*"))
    analyze(slow_map_logdir)
    after = sorted(p.relative_to(slow_map_logdir) for p in slow_map_logdir.rglob("*"))
    assert after == before


@pytest.mark.parametrize(
    "where", ["logdir", "run_dir", "file"], ids=["log-directory", "run-directory", "trace-file"]
)
def test_accepts_logdir_run_dir_or_file(slow_map_logdir, trace_file, where):
    path = {"logdir": slow_map_logdir, "run_dir": trace_file.parent, "file": trace_file}[where]
    trace = find_trace(path)
    assert trace.paths == (trace_file,)
    assert trace.hosts == (trace_file.name.removesuffix(".xplane.pb"),)


# ------------------------------------------------------- tables by column id


def test_tables_are_found_by_column_id_not_position(tables):
    shuffled = list(reversed(tables["input_pipeline_analyzer"]))
    table = find_table(shuffled, "input_pipeline_analyzer", "step breakdown")
    assert "stepTimeMs" in {c["id"] for c in table["cols"]}
    moved = copy.deepcopy(table)
    moved["cols"].reverse()
    for row in moved["rows"]:
        row["c"].reverse()
    assert table_rows(moved) == table_rows(table)


def test_xprof_layout_is_the_tested_one(tables):
    """Fails loudly when an xprof release changes the tables profiles reads."""
    try:
        check_layout(tables)
    except XprofLayoutError as e:
        pytest.fail(
            f"xprof {xprof_version()} changed its table layout (profiles is tested with "
            f"xprof{TESTED_XPROF}): {e}"
        )


@pytest.mark.parametrize(
    ("tool", "column"),
    [
        ("input_pipeline_analyzer", "infeedTimeMs"),
        ("input_pipeline_analyzer", "stepTimeMs"),
        ("input_pipeline_analyzer", "selfTimeInMs"),
        ("overview_page", "tip_type"),
    ],
    ids=["input-column", "step-time-column", "input-op-column", "overview-column"],
)
def test_renamed_column_is_reported_with_versions(tables, tool, column):
    changed = copy.deepcopy(tables)
    for table in changed[tool]:
        for col in table.get("cols", []):
            if col.get("id") == column:
                col["id"] = column + "_v2"
    with pytest.raises(XprofLayoutError) as err:
        check_layout(changed)
    message = str(err.value)
    assert column in message
    assert f"xprof {xprof_version()}" in message
    assert TESTED_XPROF in message


def test_missing_property_is_reported(tables):
    changed = copy.deepcopy(tables)
    for table in changed["input_pipeline_analyzer"]:
        (table.get("p") or {}).pop("input_conclusion", None)
    with pytest.raises(XprofLayoutError, match="input_conclusion"):
        check_layout(changed)


@pytest.mark.parametrize(
    ("version", "spec", "inside"),
    [
        ("2.24.2", ">=2.24,<2.25", True),
        ("2.24.0", ">=2.24,<2.25", True),
        ("2.25.0", ">=2.24,<2.25", False),
        ("2.23.9", ">=2.24,<2.25", False),
        ("2.24.2rc1", ">=2.24,<2.25", True),
        ("3.0", "!=3.0", False),
    ],
    ids=["tested", "first-patch", "next-minor", "older", "pre-release", "excluded"],
)
def test_version_range(version, spec, inside):
    assert version_in_range(version, spec) is inside


def test_installed_xprof_is_a_tested_one():
    version = xprof_version()
    assert version is not None, "xprof is not installed"
    assert version_in_range(version, TESTED_XPROF), (
        f"xprof {version} is installed but profiles is tested with xprof{TESTED_XPROF}: "
        "run this test module and widen TESTED_XPROF if the layout test passes"
    )


# ----------------------------------------------------------- bad log directories


def _foreign_xspace_bytes():
    space = xspace_class()()
    space.planes.add(id=1, name="not a profiler plane")
    return space.SerializeToString()


@pytest.fixture
def bad_logdir(request, tmp_path, trace_file):
    """A log directory broken in the way named by the test id."""
    run = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    kind = request.param
    if kind == "missing":
        return tmp_path / "nowhere", "does not exist"
    if kind == "empty-dir":
        (tmp_path / "events.out.tfevents.1").write_bytes(b"x")
        return tmp_path, "no profiler trace (*.xplane.pb)"
    run.mkdir(parents=True)
    target = run / "host.xplane.pb"
    if kind == "zero-bytes":
        target.write_bytes(b"")
        return tmp_path, "empty (0 bytes)"
    if kind == "truncated":
        target.write_bytes(trace_file.read_bytes()[:5000])
        return tmp_path, "truncated or not an XSpace"
    if kind == "random-bytes":
        target.write_bytes(os.urandom(4096))
        return tmp_path, "cannot be read as a profiler trace"
    if kind == "json-text":
        target.write_text('{"traceEvents": []}')
        return tmp_path, "cannot be read as a profiler trace"
    if kind == "foreign-xspace":
        target.write_bytes(_foreign_xspace_bytes())
        return tmp_path, "not a profiler trace: an XSpace has /host: or /device: planes"
    if kind == "riegeli-only":
        target.unlink(missing_ok=True)
        (run / "host.xplane.riegeli").write_bytes(b"x")
        return tmp_path, "only .xplane.pb is supported"
    if kind == "wrong-file":
        other = tmp_path / "notes.txt"
        other.write_text("hello")
        return other, "expected a <host>.xplane.pb file"
    raise AssertionError(kind)


BAD = [
    "missing",
    "empty-dir",
    "zero-bytes",
    "truncated",
    "random-bytes",
    "json-text",
    "foreign-xspace",
    "riegeli-only",
    "wrong-file",
]


@pytest.mark.parametrize("bad_logdir", BAD, ids=BAD, indirect=True)
def test_unusable_logdir_gives_a_clear_message(bad_logdir):
    path, expected = bad_logdir
    with pytest.raises(ProfileError) as err:
        analyze(path)
    message = str(err.value)
    assert expected in message
    assert "tfinput profile" in message or "runs:" in message  # says how to capture one


def test_trace_without_step_markers(unmarked_logdir):
    result = analyze(unmarked_logdir)
    assert not result.is_complete
    assert result.steps == () and result.input_wait is None and result.step_time_ms is None
    assert result.pipelines, "stages are still rebuilt from the iterator events"
    (message,) = [d for d in result.diagnostics if "step markers" in d]
    assert "no step markers" in message
    assert "tf.profiler.experimental.Trace('train', step_num=i, _r=1)" in message
    assert "next() inside the block" in message
    # the function that marks them, as it is called (`profiles._capture` is a module)
    assert "`tfinput profile` and profiles.capture() do this for you" in message


def test_trace_without_tf_data(tmp_path):
    import tensorflow as tf

    tf.profiler.experimental.start(str(tmp_path))
    for i in range(4):
        with tf.profiler.experimental.Trace("train", step_num=i + 1, _r=1):
            tf.reduce_sum(tf.ones([64, 64]) @ tf.ones([64, 64])).numpy()
    tf.profiler.experimental.stop()
    result = analyze(tmp_path)
    assert result.steps and not result.pipelines and not result.is_complete
    assert any("no tf.data iterator events" in d for d in result.diagnostics)


@pytest.fixture
def two_hosts(tmp_path, trace_file):
    run = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    shutil.copy(trace_file, run / "worker-0.xplane.pb")
    interleave = find_trace(cached_capture("small_interleave")).paths[0]
    shutil.copy(interleave, run / "worker-1.xplane.pb")
    return tmp_path


def test_several_hosts_are_analysed_with_a_note(two_hosts):
    result = analyze(two_hosts)
    assert result.hosts == ("worker-0", "worker-1")
    assert {p.host for p in result.pipelines} == {"worker-0", "worker-1"}
    (note,) = [d for d in result.diagnostics if "hosts" in d]
    assert note.startswith(
        "2 hosts in run plugins/profile/2026_01_01_00_00_00 (worker-0, worker-1)"
    )
    assert "--host NAME" in note


def test_one_host_of_several(two_hosts):
    result = analyze(two_hosts, host="worker-1")
    assert result.hosts == ("worker-1",)
    assert result.bottleneck.knobs == ("interleave_cycle_length", "interleave_parallelism")
    assert not [d for d in result.diagnostics if "hosts" in d]
    with pytest.raises(ProfileError, match=r"no host 'worker-9'.*worker-0"):
        analyze(two_hosts, host="worker-9")


def test_several_runs_newest_first_with_a_note(tmp_path, trace_file):
    for name, mtime in (("2026_01_01_00_00_00", 1_000_000), ("2026_01_02_00_00_00", 2_000_000)):
        run = tmp_path / "plugins" / "profile" / name
        run.mkdir(parents=True)
        shutil.copy(trace_file, run / "host.xplane.pb")
        os.utime(run / "host.xplane.pb", (mtime, mtime))
    result = analyze(tmp_path)
    assert result.run == "plugins/profile/2026_01_02_00_00_00"
    assert any("2 profile runs" in d and "--run NAME" in d for d in result.diagnostics)
    assert analyze(tmp_path, run="2026_01_01_00_00_00").run.endswith("2026_01_01_00_00_00")
    with pytest.raises(ProfileError, match="no profile run 'nope'"):
        analyze(tmp_path, run="nope")


def test_compare_before_after(slow_map, fast):
    after = fast
    comparison = compare(slow_map, after)
    assert comparison.before is slow_map and comparison.after is after
    assert comparison.input_wait_change == pytest.approx(
        after.input_wait.average - slow_map.input_wait.average
    )
    assert comparison.input_wait_change < 0  # the fast pipeline barely waits
    assert comparison.step_time_ratio == pytest.approx(
        after.step_time_ms.average / slow_map.step_time_ms.average
    )
    assert set(comparison.to_dict()) == {
        "before",
        "after",
        "input_wait_change",
        "step_time_ratio",
        "caveats",
    }
    # Both captured by profiles._capture with the same settings on this machine.
    assert comparison.caveats == ()


def test_compare_warns_about_different_captures(slow_map, tmp_path):
    result = capture(fast_pipeline(), logdir=tmp_path, steps=3, warmup=1)
    comparison = compare(slow_map, analyze(result.logdir))
    (caveat,) = comparison.caveats
    assert "captured differently" in caveat
    assert "profiled steps 8 vs 3" in caveat and "warm-up 2 vs 1" in caveat


def test_compare_warns_about_unknown_capture(slow_map, trace_file, tmp_path):
    shutil.copy(trace_file, tmp_path / "host.xplane.pb")  # no tfinput_capture.json
    (caveat,) = compare(slow_map, tmp_path).caveats
    assert caveat.startswith("run B has no tfinput_capture.json")


def test_broken_newest_run_points_to_the_others(tmp_path, trace_file):
    good = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    bad = tmp_path / "plugins" / "profile" / "2026_01_02_00_00_00"
    good.mkdir(parents=True)
    bad.mkdir(parents=True)
    shutil.copy(trace_file, good / "host.xplane.pb")
    os.utime(good / "host.xplane.pb", (1_000_000, 1_000_000))
    (bad / "host.xplane.pb").write_bytes(trace_file.read_bytes()[:100])
    with pytest.raises(ProfileError, match=r"Other profile runs.*2026_01_01_00_00_00.*--run"):
        analyze(tmp_path)
    assert analyze(tmp_path, run="2026_01_01_00_00_00").is_complete
