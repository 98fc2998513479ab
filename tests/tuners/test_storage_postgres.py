"""Several workers tune one study through a real PostgreSQL server; one is killed
mid-study and the study still completes with no lost or duplicated trials.

Needs TFINPUT_TEST_POSTGRES_URL (``./dev test`` and CI start a throwaway server)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import optuna
import pytest

from tests._once import run_programs

URL = os.environ.get("TFINPUT_TEST_POSTGRES_URL")
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not URL, reason="TFINPUT_TEST_POSTGRES_URL not set (./dev test sets it)"),
]

# Each trial sleeps through 5 simulated device steps of 200 ms (1 s, little CPU; one
# window, so that no trial is pruned short): after the kill (once 2 or 3 trials
# finished) worker B still starts trials for longer than the grace period, so it finds
# the killed trial stale and runs its retry before the study has its N_TRIALS.
N_TRIALS = 9


def worker(args, log_path, lock_path):
    env = {**os.environ, "TMPDIR": os.path.dirname(lock_path)}
    return subprocess.Popen(
        [sys.executable, "-m", "tfinput.cli", "tune", *args],
        stdout=open(log_path, "w"),
        stderr=subprocess.STDOUT,
        env=env,
    )


def _running_trial_of(pid, study_name, storage, seen=None, loaded=None):
    """The number of the trial worker ``pid`` is running, once two trials finished.

    ``seen`` (a list) gets one line per call: what the poll saw, for the failure message.
    ``loaded`` (a dict) keeps the study once it exists: each later poll reads its trials
    only."""
    started = time.monotonic()
    loaded = {} if loaded is None else loaded
    try:
        if "study" not in loaded:
            loaded["study"] = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        if seen is not None:
            seen.append(f"{time.monotonic() - started:.2f}s no study yet")
        return None
    study = loaded["study"]
    trials = study.get_trials(deepcopy=False)
    if seen is not None:
        seen.append(
            f"{time.monotonic() - started:.2f}s "
            + " ".join(
                f"{t.number}:{t.state.name}:{t.user_attrs.get('worker', '').rsplit(':', 1)[-1]}"
                for t in trials
            )
        )
    if sum(1 for t in trials if t.state.is_finished()) < 2:
        return None
    for t in trials:
        if t.state == optuna.trial.TrialState.RUNNING and t.user_attrs.get("worker", "").endswith(
            f":{pid}"
        ):
            return t.number
    return None


def test_two_workers_one_killed(small_tfrecord, small_schema, tmp_path):
    schema = tmp_path / "schema.json"
    small_schema.to_json(schema)
    study_name = f"pg-{uuid.uuid4().hex[:8]}"
    args = [
        *small_tfrecord,
        "--schema",
        str(schema),
        "--batch-size",
        "50",
        "--storage",
        URL,
        "--study-name",
        study_name,
        "--n-trials",
        str(N_TRIALS),
        "--windows",
        "1",
        "--window-batches",
        "4",
        "--warmup-batches",
        "1",
        "--step",
        "simulated",
        "--device-time-ms",
        "200",
        "--confirm-top",
        "1",
        "--confirm-windows",
        "1",
        "--heartbeat-interval",
        "1",
        "--grace-period",
        "4",
        # What follows the search (the gain by knob, the format advice) is not what
        # this test checks.
        "--no-breakdown",
        "--no-format-advice",
    ]
    lock = str(tmp_path / "lock")
    a = worker([*args, "--out", str(tmp_path / "a")], tmp_path / "a.log", lock)
    b = worker([*args, "--out", str(tmp_path / "b")], tmp_path / "b.log", lock)
    # The URL as users write it (postgresql://): make_storage names the psycopg driver.
    from tuners._storage import make_storage

    storage = make_storage(URL)
    try:
        # Wait until worker A owns a running trial, then kill it without warning. The
        # trial may finish between our reading it and the kill, so A is first frozen
        # (SIGSTOP), the trial re-read once any commit in flight has landed, and A is
        # killed only if the trial is still running; otherwise A resumes and we wait on.
        deadline = time.time() + 120
        victim = None
        seen, loaded = [], {}
        while time.time() < deadline and victim is None:
            # A trial runs for a second at least (5 steps of 200 ms): a poll every
            # quarter second sees each.
            time.sleep(0.25)
            candidate = _running_trial_of(a.pid, study_name, storage, seen, loaded)
            if candidate is None:
                continue
            a.send_signal(signal.SIGSTOP)
            time.sleep(0.5)
            if _running_trial_of(a.pid, study_name, storage, loaded=loaded) == candidate:
                victim = candidate
                a.send_signal(signal.SIGKILL)
            else:
                a.send_signal(signal.SIGCONT)
        assert victim is not None, (
            f"worker A (pid {a.pid}) was never seen running a trial; polls:\n"
            + "\n".join(seen[-40:])
            + "\n\nits log:\n"
            + (tmp_path / "a.log").read_text()
        )
        a.wait(timeout=30)
        assert b.wait(timeout=300) == 0, (tmp_path / "b.log").read_text()
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    study = optuna.load_study(study_name=study_name, storage=storage)
    trials = study.get_trials()
    states = [t.state for t in trials]
    finished = [
        t
        for t in trials
        if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    ]
    # nothing left hanging
    assert optuna.trial.TrialState.RUNNING not in states
    assert optuna.trial.TrialState.WAITING not in states
    # the killed trial was failed by the heartbeat and retried exactly once
    killed = trials[victim]
    assert killed.state == optuna.trial.TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == victim]
    assert len(retries) == 1 and retries[0].state.is_finished()
    # The retry keeps every value the killed trial had chosen (it may have been killed
    # while still choosing: then the retry chooses the rest).
    assert killed.params.items() <= retries[0].params.items()
    # every failed trial is a killed one with its retry: no other losses
    for t in trials:
        if t.state == optuna.trial.TrialState.FAIL:
            assert [r for r in trials if r.system_attrs.get("failed_trial") == t.number]
    # the study completed: exactly N finished trials counted by the stop rule... at
    # most one more if both workers finished a trial at the same moment
    assert N_TRIALS <= len(finished) <= N_TRIALS + 1
    # baselines enqueued once, measured once (a retry carries the same baseline name)
    for name in ("autotune", "heuristic"):
        runs = [
            t
            for t in trials
            if t.user_attrs.get("baseline") == name and "failed_trial" not in t.system_attrs
        ]
        assert len(runs) == 1, name
    # trial numbers are unique and contiguous
    assert [t.number for t in trials] == list(range(len(trials)))
    # both workers took part
    workers = {t.user_attrs.get("worker", "").rsplit(":", 1)[-1] for t in trials}
    assert {str(a.pid), str(b.pid)} <= workers


# A password the run can only have taken from the URL (the throwaway server trusts
# loopback, so any password connects).
PASSWORD = "pw-Doors-53-zq"


def _with_password(url: str) -> str:
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user.split(':', 1)[0]}:{PASSWORD}@{host}"


def test_the_storage_password_shows_nowhere_but_redacted(small_tfrecord, small_schema, tmp_path):
    schema = tmp_path / "schema.json"
    small_schema.to_json(schema)
    url = _with_password(URL)
    redacted = url.replace(PASSWORD, "***")
    out = tmp_path / "out"
    common = [
        *(*small_tfrecord, "--schema", str(schema), "--batch-size", "50"),
        *("--n-trials", "2", "--windows", "1", "--window-batches", "2", "--warmup-batches", "1"),
        *("--step", "simulated", "--device-time-ms", "1", "--confirm-top", "1"),
        *("--confirm-windows", "1", "--no-breakdown", "--no-format-advice"),
        *("--study-name", f"pw-{uuid.uuid4().hex[:8]}", "--heartbeat-interval", "1"),
    ]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    runs = {
        "report": [*common, "--storage", url, "--out", str(out)],
        "json": [*common, "--storage", url, "--out", str(tmp_path / "json"), "--json"],
        # An unreachable server: the error names the URL, redacted.
        "error": [*common, "--storage", url.rsplit(":", 1)[0] + ":1/none"],
    }
    # The three commands in turn in one child (TensorFlow imported once), each with its
    # own stdout and stderr (file descriptors 1 and 2: TensorFlow's C++ lines included).
    programs = {
        name: "import sys\nfrom tfinput.cli import main\n"
        f"sys.exit(main({['--verbose', 'tune', *args]!r}))\n"
        for name, args in runs.items()
    }
    (tmp_path / "runs").mkdir()
    seen = run_programs(programs, tmp_path / "runs", env, timeout=600)
    for name, (_, stdout, stderr, _) in seen.items():
        assert PASSWORD not in stdout + stderr, name
    assert seen["report"][0] == "ok", seen["report"][2][-2000:]
    assert f" in {redacted}: " in seen["report"][1]
    assert seen["json"][0] == "ok", seen["json"][2][-2000:]
    assert json.loads(seen["json"][1])["storage"] == redacted
    assert seen["error"][0] == "exit 2", seen["error"][2][-2000:]
    assert (
        "cannot open storage "
        + redacted.rsplit(":", 1)[0].replace("postgresql://", "postgresql+psycopg://")
        in seen["error"][2]
    )
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {"result.json", "report.html", "best_config.json"} <= {p.name for p in written}
    for path in written:
        assert PASSWORD.encode() not in path.read_bytes(), path
    assert json.loads((out / "result.json").read_text())["storage"] == redacted
    assert redacted in (out / "report.html").read_text()
