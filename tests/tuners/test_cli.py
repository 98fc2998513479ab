"""`tuners._cli`: ``tfinput tune`` and ``tfinput demo`` (arguments, exit codes, outputs,
a worker killed mid-study and resumed), in-process through the shared CLI harness."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import optuna
import pytest

from tests.helpers import run_cli
from tests.tuners.conftest import assert_measured_once, small_disk, tune_result
from tfinput._src.applications.cli.registry import build_parser
from tfinput.config import PipelineConfig
from tuners import _storage as tuners_storage
from tuners._cli import _resume_line, add_subcommands
from tuners._result import resume_record
from tuners._search import baseline_configs
from tuners._storage import make_storage
from tuners._trials import is_counted


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--narrow", "speed=1,2"], "unknown knob 'speed'"),
        (["--narrow", "map_parallelism="], "empty range"),
        (["--fix", "prefetch=1,2"], "give one value"),
        (["--n-trials", "0"], "--n-trials must be >= 1"),
        (
            ["--storage", "postgresql://nobody@127.0.0.1:1/none", "--study-name", "x"],
            "cannot open storage",
        ),
        (["--storage", "x.db"], "--storage needs --study-name"),
        (["--step", "simulated"], "needs --device-time-ms"),
        (["--service-workers", "2"], "--service-workers needs --service"),
        (["--service", "local:0"], "max_workers must be >= 1"),
    ],
    ids=[
        "unknown-knob",
        "empty-range",
        "fix-two-values",
        "zero-trials",
        "unreachable-storage",
        "storage-without-name",
        "simulated-without-time",
        "service-workers-alone",
        "empty-local-fleet",
    ],
)
def test_cli_bad_arguments(cli_args, capsys, extra, message):
    code, _, err = run_cli(capsys, "tune", *cli_args, *extra)
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--timeout", "0"], "--timeout must be a positive number of seconds, got 0"),
        (["--timeout", "-5"], "--timeout must be a positive number of seconds, got -5"),
        (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        (["--confirm-top", "0"], "--confirm-top must be >= 1, got 0"),
        (["--confirm-windows", "0"], "--confirm-windows must be >= 1, got 0"),
        (["--window-seconds", "-1"], "--window-seconds must be 0 or more, got -1"),
        (
            ["--window-seconds", "1e9", "--timeout", "20"],
            "--window-seconds 1e+09 does not fit in --timeout 20: a trial measures at least 2 "
            "windows of at least 1e+09 s (2e+09 s)",
        ),
        (
            ["--window-seconds", "10", "--timeout", "15"],
            "--window-seconds 10 does not fit in --timeout 15: a trial measures at least 2 "
            "windows of at least 10 s (20 s)",
        ),
        (["--target-rate", "0"], "--target-rate must be a positive number of examples/s, got 0"),
    ],
    ids=[
        "timeout-zero",
        "timeout-negative",
        "batch-size-zero",
        "confirm-top-zero",
        "confirm-windows-zero",
        "window-seconds-negative",
        "window-beyond-the-timeout",
        "windows-beyond-the-timeout",
        "target-rate-zero",
    ],
)
def test_cli_refuses_nonsensical_values_in_one_line_before_any_work(
    cli_args, capsys, tmp_path, extra, message
):
    out_dir = tmp_path / "out"
    code, out, err = run_cli(capsys, "tune", *cli_args, *extra, "--out", out_dir)
    assert code == 2 and out == ""
    assert err.splitlines() == [f"tfinput tune: error: {message}"]
    assert not out_dir.exists()  # nothing was made, nothing measured


def test_cli_needs_exactly_one_pipeline(capsys):
    code, _, err = run_cli(capsys, "tune")
    assert code == 2 and "give exactly one pipeline" in err


def test_cli_tune_end_to_end(cli_args, capsys, tmp_path, monkeypatch, caplog):
    # Without plotly (an optional extra): the report still has its tables and says how
    # to get the charts (the report with charts: test_report.py).
    for name in [m for m in list(sys.modules) if m.split(".")[0] == "plotly"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "plotly", None)
    out_dir = tmp_path / "out"
    code, out, err = run_cli(
        capsys,
        "tune",
        *cli_args,
        *("--n-trials", "3", "--step", "simulated", "--device-time-ms", "1"),
        *("--out", out_dir, "--json"),
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["step"]["kind"] == "simulated" and data["confirmed"]
    assert len(data["verdicts"]) == 2 and data["input_wait_source"] == "measured"
    assert data["format_advice"] is None  # --no-format-advice
    assert isinstance(data["breakdown"], list) and data["beats_autotune"] in (True, False)
    assert PipelineConfig.from_json(out_dir / "best_config.json").batch_size == 50
    best = PipelineConfig.from_dict(data["best_config"])
    assert data["resume"] == json.loads((out_dir / "best_config.json").read_text())["resume"]
    assert data["resume"] == resume_record(best)
    assert "Traceback" not in err and "pip install 'tfinput[plots]'" in err
    # One line per trial (the progress bar is off when stderr is no terminal), each
    # printed once: the CLI's display, not also the tuner's logger.
    lines = [line for line in err.splitlines() if line.startswith("trial ")]
    assert [line.split(" [")[0] for line in lines] == ["trial 0", "trial 1", "trial 2"]
    assert "left: " in lines[0] and "map_parallelism=" in lines[2]
    assert not [r for r in caplog.records if r.getMessage().startswith("trial ")]
    for name in ("best_config.json", "result.json", "report.html"):
        assert (out_dir / name).exists(), name
    html = (out_dir / "report.html").read_text()
    assert "pip install 'tfinput[plots]'" in html and "Best config" in html
    assert "Confirmed throughput" in html


# A user's module as the README shows it: make_pipeline(config) returns a tf.data.Dataset
# built with the config. Autotune's map_parallelism feeds at one speed, every other value
# 4x or 0.5x that on alternate builds: measured best, never beyond the noise. The step
# sleeps 50 ms at autotune's speed so that a loaded machine's per-batch overhead (tens of
# ms under CI) cannot even out the two speeds and make autotune measure best.
WITHIN_THE_NOISE = """\
import collections
import time

import tensorflow as tf

from tfinput.config import AUTOTUNE

BUILT = collections.Counter()


def make_pipeline(config):
    key = repr(sorted(config.to_dict().items()))
    n = BUILT[key]
    BUILT[key] += 1
    speed = 1.0 if config.map_parallelism == AUTOTUNE else (4.0, 0.5)[n % 2]
    return tf.data.Dataset.from_tensors({"speed": tf.fill([config.batch_size], speed)})


def step(batch):
    time.sleep(0.05 / float(batch["speed"][0]))
"""


def test_cli_keep_autotune_saves_autotune_and_says_where_the_measured_best_is(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the host lock: this test's own
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    module = tmp_path / "within_the_noise.py"
    module.write_text(WITHIN_THE_NOISE)
    out_dir = tmp_path / "out"
    code, out, err = run_cli(
        capsys,
        "tune",
        *("--pipeline", f"{module}:make_pipeline", "--batch-size", "50"),
        *("--step", "function", "--step-fn", f"{module}:step", "--n-trials", "3"),
        *("--windows", "2", "--window-batches", "3", "--warmup-batches", "1"),
        *("--confirm-top", "1", "--confirm-windows", "2", "--no-breakdown"),
        *("--out", out_dir),
    )
    assert code == 0, err
    data = json.loads((out_dir / "result.json").read_text())
    best = data["measured_best"]
    assert data["beats_autotune"] is False and best["name"] != "autotune"
    low, high = best["vs_baseline"]["min"], best["vs_baseline"]["max"]
    assert low < 1 < high and best["saved"] is False
    autotune = baseline_configs(PipelineConfig(batch_size=50), cpu_count=1)["autotune"]
    saved = PipelineConfig.from_json(out_dir / "best_config.json")
    assert saved == autotune  # every tf.data knob AUTOTUNE, at the tuned batch size
    assert data["best_name"] == "autotune" and data["best_config"] == saved.to_dict()
    assert best["config"] != data["best_config"]
    text = " ".join(out.split())  # rich wraps long lines
    assert f"keep autotune: {best['name']}'s gain is within the noise" in text
    # rich may break a long path inside a word: compare without any whitespace. The
    # figures are printed from the measurement and rounded again in result.json (3
    # places): they agree to the printed 2 places, give or take the last one.
    said = (
        f"{out_dir}/best_config.json: autotune (the verdict: keep autotune); the best "
        f"measured config, {best['name']}, RATIOx autotune paired (rounds LOWx-HIGHx), is in "
        f'{out_dir}/result.json under "measured_best"'
    )
    said = re.escape("".join(said.split()))
    for name in ("RATIO", "LOW", "HIGH"):
        said = said.replace(name, rf"(?P<{name.lower()}>[0-9.]+)")
    found = re.search(said, "".join(out.split()))
    assert found, out
    for name, value in (("ratio", best["vs_baseline"]["ratio"]), ("low", low), ("high", high)):
        assert abs(float(found[name]) - value) <= 0.006, (name, found[name], value)


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [
        ({}, "resume: the best config resumes exactly after a restart (verify on"),
        ({"deterministic": False}, "resume: not exact after a restart: deterministic=False: "),
        ({"cache": True}, "resume: the best config resumes exactly after a restart; cache=true"),
    ],
    ids=["exact", "nondeterministic", "cache"],
)
def test_cli_says_whether_the_best_config_resumes(knobs, expected):
    result = tune_result(best_config=PipelineConfig(batch_size=50, **knobs))
    line = _resume_line(result, "out/best_config.json")
    assert line.startswith(expected)
    assert line.endswith(
        "(verify on your files: tfinput check DATA --resume --config out/best_config.json)"
    )


def test_cli_opt_out_flags():
    args = build_parser().parse_args(["tune", "--demo", "--no-breakdown", "--no-format-advice"])
    assert args.no_breakdown and args.no_format_advice
    args = build_parser().parse_args(["tune", "--demo"])
    assert not args.no_breakdown and not args.no_format_advice


def test_add_subcommands_registers_tune_and_demo():
    parser = argparse.ArgumentParser(prog="mytool")
    add_subcommands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["tune", "--demo", "--narrow", "prefetch=1,2", "--fix", "cache=false"])
    assert args.command == "tune" and args.demo
    assert args.narrow == ["prefetch=1,2"] and args.fix == ["cache=false"]
    assert (args.n_trials, args.windows, args.confirm_top) == (30, 5, 3)
    demo = parser.parse_args(["demo", "--step", "simulated"])
    assert demo.step == "simulated" and demo.device_time_ms == 20.0 and demo.out == "runs/demo"
    assert not demo.no_breakdown and not demo.no_format_advice  # the full demo by default
    quick = parser.parse_args(["demo", "--no-breakdown", "--no-format-advice"])
    assert quick.no_breakdown and quick.no_format_advice
    with pytest.raises(SystemExit):
        parser.parse_args(["demo", "--step", "keras"])  # not one of the demo's steps


def test_cli_a_step_that_always_raises_exits_with_its_error_and_writes_result_json(
    cli_args, capsys, tmp_path
):
    module = tmp_path / "broken_step.py"
    module.write_text("def step(batch):\n    raise RuntimeError('device lost: broken step')\n")
    out_dir = tmp_path / "out"
    code, _, err = run_cli(
        capsys,
        "tune",
        *cli_args,
        *("--n-trials", "3", "--step", "function", "--step-fn", f"{module}:step"),
        *("--out", out_dir),
    )
    assert code == 2 and "device lost: broken step" in err and "Traceback" not in err
    data = json.loads((out_dir / "result.json").read_text())
    assert len(data["trials_detail"]) == 3 and data["best_config"] is None
    assert all(t["state"] == "fail" for t in data["trials_detail"])


def _wait_for_line(log_path, prefix, proc, deadline):
    """The lines of ``log_path`` starting with ``prefix``, once there is one (or the
    process ended, or the deadline passed: then none)."""
    seen = []
    while not seen and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
        seen = [ln for ln in log_path.read_text().splitlines() if ln.startswith(prefix)]
    return seen


def _tune_until_a_trial_then_ctrl_c(argv, log_path, *, again_after=None, trials=1, started=None):
    """A real ``tfinput tune ARGV`` in its own process group, sent SIGINT (as Ctrl-C
    sends it to the terminal's foreground group) once ``trials`` trial lines are
    printed, and again once a line starting with ``again_after`` is printed (``started``
    is called with the process first): ``(exit code, stderr lines, trial lines before
    Ctrl-C)``."""
    # A suite run in the background of a non-interactive shell ignores SIGINT, and its
    # children would inherit that: the tune gets Ctrl-C as a terminal's command does.
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tfinput.cli", "tune", *map(str, argv)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
                # A tune that hangs is sent SIGABRT below: its threads' stacks go to the log.
                env={**os.environ, "PYTHONFAULTHANDLER": "1"},
            )
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if started is not None:
            started(proc)
        deadline = time.monotonic() + 240
        seen = _wait_for_line(log_path, "trial ", proc, deadline)
        while 0 < len(seen) < trials and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            seen = [ln for ln in log_path.read_text().splitlines() if ln.startswith("trial ")]
        assert len(seen) >= trials, log_path.read_text()
        os.killpg(proc.pid, signal.SIGINT)
        # A Ctrl-C that lands while Python runs a garbage-collector callback (JAX's: Keras
        # loads JAX) is delivered again by the command (`keep_interrupts`); sent again
        # after 20 s of silence all the same, as a user would.
        said = "tfinput tune: interrupted"
        while not _wait_for_line(log_path, said, proc, min(deadline, time.monotonic() + 20)):
            if proc.poll() is not None or time.monotonic() >= deadline:
                break
            os.killpg(proc.pid, signal.SIGINT)
        if again_after is not None:
            assert _wait_for_line(log_path, again_after, proc, deadline), log_path.read_text()
            os.killpg(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # the stacks of a tune that hangs, to the log
            proc.wait(timeout=30)
            pytest.fail(f"tune did not exit after Ctrl-C:\n{log_path.read_text()}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return code, log_path.read_text().splitlines(), seen


def test_cli_ctrl_c_writes_the_completed_trials_and_says_how_to_keep_them(cli_args, tmp_path):
    out_dir = tmp_path / "out"
    argv = [*cli_args, "--n-trials", "30", "--step", "simulated", "--device-time-ms", "100"]
    code, lines, seen = _tune_until_a_trial_then_ctrl_c(
        [*argv, "--out", out_dir], tmp_path / "tune.log"
    )
    text = "\n".join(lines)
    assert code == 130 and "Traceback" not in text, text
    data = json.loads((out_dir / "result.json").read_text())
    assert data["interrupted"]["stage"] == "search" and data["best_config"] is None
    finished = [t for t in data["trials_detail"] if t["state"] in ("complete", "pruned")]
    assert len(finished) >= len(seen) >= 1
    assert data["interrupted"]["message"].startswith(
        f"interrupted during the search after {data['trials']['complete']} completed trial"
    )
    stopped = [t for t in data["trials_detail"] if t["state"] == "fail"]
    assert all(t["error"] == "interrupted (Ctrl-C) before it finished" for t in stopped)
    assert f"tfinput tune: {data['interrupted']['message']}" in lines, text
    assert lines[-1] == (
        f"tfinput tune: the trials are in {out_dir}/result.json; to keep trials and resume "
        f"after an interrupt, run with --storage {out_dir}/study.db --study-name NAME (the "
        "same command then resumes the study)"
    )
    assert "tfinput: interrupted" not in lines


@pytest.mark.slow
def test_cli_a_second_ctrl_c_while_the_trials_are_written_exits_at_once(cli_args, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    def block_the_write(proc):  # result.json is staged in this file, a pipe no one reads
        os.mkfifo(out_dir / f".result.json.tfinput-staging-{proc.pid}")

    argv = [*cli_args, "--n-trials", "30", "--step", "simulated", "--device-time-ms", "100"]
    code, lines, _ = _tune_until_a_trial_then_ctrl_c(
        [*argv, "--out", out_dir],
        tmp_path / "tune.log",
        again_after="tfinput tune: interrupted during the search",
        started=block_the_write,
    )
    assert code == 130 and "Traceback" not in "\n".join(lines), lines
    assert lines[-1] == "tfinput: interrupted"


@pytest.mark.slow
def test_cli_ctrl_c_with_a_storage_says_the_same_command_resumes(cli_args, tmp_path, capsys):
    """Ctrl-C after three trials, then the same command: it resumes the study and
    measures no config again, although its sampler (``--seed 0``) proposes the same
    configs in the same order."""
    storage = tmp_path / "study.db"
    argv = [*cli_args, "--storage", storage, "--study-name", "kept", "--n-trials", "7"]
    argv += ["--seed", "0"]
    code, lines, _ = _tune_until_a_trial_then_ctrl_c(
        [*argv, "--step", "simulated", "--device-time-ms", "100", "--out", tmp_path / "a"],
        tmp_path / "tune.log",
        trials=3,
    )
    assert code == 130, "\n".join(lines)
    assert lines[-1] == (
        f"tfinput tune: the trials are in {tmp_path}/a/result.json; the study 'kept' keeps "
        f"them in {storage}: run the same command again to resume it"
    )
    kept = json.loads((tmp_path / "a/result.json").read_text())["trials_detail"]
    code, _, err = run_cli(
        capsys,
        "tune",
        *argv,
        *("--step", "simulated", "--device-time-ms", "1", "--out", tmp_path / "b"),
    )
    assert code == 0, err
    trials = json.loads((tmp_path / "b/result.json").read_text())["trials_detail"]
    done = [t for t in kept if t["state"] in ("complete", "pruned")]
    assert len(done) >= 3 and trials[: len(done)] == done  # kept, not measured again
    assert_measured_once(optuna.load_study(study_name="kept", storage=make_storage(storage)).trials)


@pytest.mark.slow
def test_cli_resumes_a_journal_study_whose_worker_was_killed(cli_args, capsys, tmp_path):
    # A real `tfinput tune` worker is killed mid-trial (SIGKILL: no cleanup); the
    # journal storage has no heartbeat, so only the restart can fail and retry it.
    journal = str(tmp_path / "study.log")
    study_args = ["--storage", journal, "--study-name", "killed", "--n-trials", "4"]
    with open(tmp_path / "worker.log", "w") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tfinput.cli",
                "tune",
                *map(str, cli_args),
                *study_args,
                "--step",
                "simulated",
                "--device-time-ms",
                "500",  # every trial runs for seconds: it is caught RUNNING
                "--out",
                str(tmp_path / "killed"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    victim = None
    try:
        deadline = time.monotonic() + 180
        while victim is None and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.1)
            try:
                study = optuna.load_study(study_name="killed", storage=make_storage(journal))
            except KeyError:
                continue
            for t in study.get_trials(deepcopy=False):
                if (
                    t.state == optuna.trial.TrialState.RUNNING
                    and t.user_attrs.get("worker", "").endswith(f":{worker.pid}")
                    and "config" in t.user_attrs  # measuring, not still suggesting
                ):
                    victim = t.number
        assert victim is not None, (tmp_path / "worker.log").read_text()
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=60)
    code, _, err = run_cli(
        capsys,
        "tune",
        *cli_args,
        *study_args,
        *("--step", "simulated", "--device-time-ms", "1", "--out", tmp_path / "resumed"),
    )
    assert code == 0, err
    study = optuna.load_study(study_name="killed", storage=make_storage(journal))
    trials = study.get_trials()
    assert optuna.trial.TrialState.RUNNING not in [t.state for t in trials]
    assert trials[victim].state == optuna.trial.TrialState.FAIL
    assert "died" in trials[victim].user_attrs["error"]
    retries = [t for t in trials if t.user_attrs.get("retried_from") == victim]
    assert len(retries) == 1 and retries[0].state.is_finished()
    assert retries[0].params == trials[victim].params


# ------------------------------------------------------------- a locked study
#: A step that takes the study database's write lock from a connection of its own once
#: it has run ``AFTER`` times (a second writer, as another process would hold it), and
#: keeps it in the test module's `HELD` until the test lets go.
LOCKER = """\
import sqlite3

import tests.tuners.test_cli as test

CALLS = []


def step(batch):
    CALLS.append(1)
    if len(CALLS) == {after} and not test.HELD:
        test.HELD.append(sqlite3.connect({db!r}, isolation_level=None))
        test.HELD[0].execute("BEGIN EXCLUSIVE")
"""

HELD: list = []


def test_cli_a_study_locked_by_another_writer_ends_in_one_line_with_the_trials_done(
    cli_args, capsys, tmp_path, monkeypatch
):
    """The SQLite database is write-locked (``BEGIN EXCLUSIVE``) from the third trial
    on, past the busy timeout (1 s here): one line naming the database and the lock,
    and result.json with the trials completed before it."""
    monkeypatch.setattr(tuners_storage, "SQLITE_BUSY_TIMEOUT_S", 1)
    db, out_dir = tmp_path / "study.db", tmp_path / "out"
    module = tmp_path / "locker.py"
    module.write_text(LOCKER.format(after=2 * 5 + 1, db=str(db)))  # 5 steps a trial
    try:
        code, _, err = run_cli(
            capsys,
            "tune",
            *cli_args,
            *("--n-trials", "8", "--step", "function", "--step-fn", f"{module}:step"),
            *("--storage", db, "--study-name", "locked", "--out", out_dir),
        )
    finally:
        while HELD:
            HELD.pop().close()
    data = json.loads((out_dir / "result.json").read_text())
    done = data["trials_detail"]
    completed = sum(t["state"] == "complete" for t in done)
    assert code == 2 and completed >= 2, err
    assert err.splitlines()[-1] == (
        f"tfinput tune: error: the study database {db} is locked: another writer held it for "
        "more than 1 s while the search ran (SQLite lets one process write at a time); the "
        f"{completed} completed trials this run knows of are in {out_dir}/result.json; run "
        "the same command again once the other writer is done, to resume the study"
    )
    assert not [line for line in err.splitlines() if not line.startswith(("trial ", "tfinput"))]
    assert data["locked"] == {"database": str(db), "stage": "search"}
    assert data["best_config"] is None and data["best_trial"]["confirmed"] is False


# ----------------------------------------------------------------- a full disk
def test_cli_an_out_folder_whose_disk_cannot_hold_the_report_is_refused_first(
    cli_args, capsys, tmp_path
):
    with small_disk(tmp_path / "disk", "1m") as disk:
        if disk is None:
            pytest.skip("needs a 1 MB tmpfs: this process may not mount one")
        code, out, err = run_cli(capsys, "tune", *cli_args, "--out", disk / "out")
        assert code == 2 and out == "" and os.listdir(disk) == []
    (line,) = err.splitlines()
    assert re.fullmatch(
        rf"tfinput tune: error: --out {re.escape(str(disk))}/out: 1\.0 MB free on its "
        r"disk, and the outputs need about \d\.\d MB \(report\.html inlines plotly\.js\): "
        r"free space or choose another --out",
        line,
    ), line


#: A step that fills the disk of the output folder at its first call, leaving 100 kB.
FILLER = """\
import os
import shutil

def step(batch):
    if not os.path.exists({filler!r}):
        free = shutil.disk_usage(os.path.dirname({filler!r})).free
        with open({filler!r}, "wb") as f:
            f.write(bytes(max(0, free - 100_000)))
"""


def test_cli_a_disk_that_fills_during_the_study_keeps_the_result_and_names_the_report(
    cli_args, capsys, tmp_path
):
    """The disk had room when the run started and fills during the study: result.json
    and best_config.json are written whole, report.html is not written at all, and one
    line names it with the reason."""
    with small_disk(tmp_path / "disk", "8m") as disk:
        if disk is None:
            pytest.skip("needs an 8 MB tmpfs: this process may not mount one")
        module = tmp_path / "filler.py"
        module.write_text(FILLER.format(filler=str(disk / "filler")))
        out_dir = disk / "out"
        code, _, err = run_cli(
            capsys,
            "tune",
            *cli_args,
            *("--n-trials", "2", "--step", "function", "--step-fn", f"{module}:step"),
            *("--no-breakdown", "--out", out_dir),
        )
        assert code == 2, err
        assert re.fullmatch(
            rf"tfinput tune: error: cannot write {re.escape(str(out_dir))}/report\.html "
            r"\(\d\.\d MB\): No space left on device; nothing partial was left there; "
            rf"best_config\.json and result\.json are written in {re.escape(str(out_dir))}",
            err.splitlines()[-1],
        ), err
        assert sorted(os.listdir(out_dir)) == ["best_config.json", "result.json"]
        data = json.loads((out_dir / "result.json").read_text())
        assert data["confirmed"] and len(data["trials_detail"]) == 2
        assert PipelineConfig.from_json(out_dir / "best_config.json").batch_size == 50


# ------------------------------------------------------ two workers, one study
def test_cli_two_workers_started_together_on_a_new_sqlite_study_measure_no_config_twice(
    cli_args, tmp_path
):
    """Two real ``tfinput tune`` processes started at the same moment on one new SQLite
    study, both with ``--seed 0`` (they propose the same configs in the same order):
    both finish, and no config is measured twice."""
    db = tmp_path / "conc.db"
    argv = [*cli_args, "--storage", db, "--study-name", "c", "--n-trials", "8", "--seed", "0"]
    argv += ["--step", "simulated", "--device-time-ms", "20", "--no-breakdown"]
    procs = []
    for i in range(2):
        with open(tmp_path / f"w{i}.log", "w") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tfinput.cli", "tune", *map(str, argv)]
                    + ["--out", str(tmp_path / f"w{i}")],
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
            )
    codes = [p.wait(timeout=300) for p in procs]
    logs = [(tmp_path / f"w{i}.log").read_text() for i in range(2)]
    assert codes == [0, 0], logs
    assert not any("Traceback" in log for log in logs), logs
    trials = optuna.load_study(study_name="c", storage=make_storage(str(db))).get_trials()
    assert sum(map(is_counted, trials)) >= 8
    assert_measured_once(trials)
