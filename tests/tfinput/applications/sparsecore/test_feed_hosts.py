"""The SparseCore feed on several hosts (examples/sparsecore_hosts.py): 2 processes of 4
CPU devices each, joined by ``jax.distributed`` (its coordinator on loopback), one global
mesh. Each host
preprocesses its own shard of every global batch; the hosts agree on the batch numbers
(checked inside a jitted step over every device of both hosts) and on the limits they
learn together through jax-tpu-embedding's FDO client, whose statistics cross hosts
once per update. Batches beyond the first limits are split into minibatches, the hosts
agreeing on each split through jax-tpu-embedding's all-reduce (and the step checking
it). One host is killed with SIGKILL mid-epoch and every host restarted: they resume at
the same global batch, and over the epoch every row is trained on once. A damaged record
in one host's shard: that host's DataError is printed by every host, and all stop; each
host listens where the example says (the kernel's socket table, read while it runs)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfinput._src.applications.cli.commands.serve import is_loopback, listening_addresses

pytest.importorskip(
    "jax_tpu_embedding",
    reason="jax-tpu-embedding is not installed (pip install 'tfinput[sparsecore]': wheels "
    "for CPython 3.12+ on x86-64 Linux)",
)

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "sparsecore_hosts.py"
HOSTS, DEVICES, UPDATE_EVERY = 2, 4, 3
ROWS, STEPS = 1024, 8  # 4 files of 256 rows; global batches of 2 x 64 rows
#: The last host is killed once it has fed step 4: steps 0-2 were committed (the update
#: and checkpoint after step 2), 3-4 were not (the next is after step 5).
KILL_AFTER, COMMITTED = 4, 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("hosts")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--hosts", str(HOSTS), "--devices", str(DEVICES),
         "--update-every", str(UPDATE_EVERY), "--out", str(out), "--timeout", "400",
         "--kill-after", str(KILL_AFTER), "--minibatching"],
        capture_output=True, text=True, timeout=500,
    )  # fmt: skip
    # What each host wrote, read here rather than trusting the launcher's checks: its
    # record of the second run, and every step it fed in both runs.
    hosts = [json.loads(p.read_text()) for p in sorted(out.glob("host-*.json"))]
    fed = [
        [json.loads(line) for line in p.read_text().splitlines()]
        for p in sorted(out.glob("fed-*.jsonl"))
    ]
    return proc, hosts, fed


def test_the_launcher_checks_pass(run):
    proc, _, _ = run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"killed (SIGKILL) after step {KILL_AFTER}" in proc.stdout
    assert "ok: every host resumed at the same global batch" in proc.stdout
    assert "FAILED" not in proc.stdout


def test_every_host_resumes_at_the_committed_global_batch(run):
    _, hosts, fed = run
    assert [h["start"] for h in hosts] == [COMMITTED + 1] * HOSTS
    for steps in fed:  # the first run, up to the kill (or further: the other host), then again
        numbers = [line["number"] for line in steps]
        restart = numbers.index(COMMITTED + 1, KILL_AFTER)
        assert numbers[:restart][: KILL_AFTER + 1] == list(range(KILL_AFTER + 1))
        assert numbers[restart:] == list(range(COMMITTED + 1, STEPS))


def test_each_host_trains_on_its_own_rows_and_every_row_once(run):
    _, hosts, fed = run
    assert all(h["devices"] == [DEVICES, HOSTS * DEVICES] for h in hosts)
    trained = []
    for steps in fed:  # the committed steps of the first run, then the second run's
        restart = [line["number"] for line in steps].index(COMMITTED + 1, KILL_AFTER)
        kept = [line for line in steps[:restart] if line["step"] <= COMMITTED] + steps[restart:]
        assert all(len(line["rows"]) == 64 for line in kept)
        trained.append(sorted(r for line in kept for r in line["rows"]))
    assert not set(trained[0]) & set(trained[1])  # no row on two hosts
    assert sorted(trained[0] + trained[1]) == list(range(ROWS))


def test_the_hosts_agree_on_batch_numbers_and_limits(run):
    _, hosts, _ = run
    assert all(all(h["agree"]) and len(h["agree"]) == STEPS - COMMITTED - 1 for h in hosts)
    assert [u["step"] for u in hosts[0]["updates"]] == [5]
    assert all(h["updates"] == hosts[0]["updates"] for h in hosts)
    # The distinct ids grown from the example's 4 (MINIBATCH_LIMITS), at the first update
    # (step 2) of the first run; the second run loaded them.
    assert hosts[0]["updates"][0]["limits"]["tokens"][1] > 4


def test_batches_beyond_the_limits_were_minibatched_alike_on_every_host(run):
    _, hosts, fed = run
    splits = [[line["minibatches"] for line in steps] for steps in fed]
    assert splits[0] == splits[1]  # both runs, every step (and the step's check agreed)
    # Steps 0-2 (before the first update) needed more distinct ids than the limits.
    assert all(n > 1 for n in splits[0][: COMMITTED + 1])
    assert [h["dropped_ids"] for h in hosts] == [0] * HOSTS


def test_statistics_cross_hosts_once_per_update(run):
    _, hosts, _ = run
    # The updates after steps 2 and 5, and the feed's close after step 7: three files per
    # host for eight steps.
    assert [h["fdo_files"] for h in hosts] == [3] * HOSTS


#: The host whose shard gets a damaged record: host 0 also holds jax.distributed's
#: coordinator, whose end would stop the other host before it printed anything.
BAD_HOST = 0


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory):
    """The example with a damaged record in `BAD_HOST`'s shard; while it runs, the
    addresses each host listens on, from the kernel's socket table."""
    psutil = pytest.importorskip("psutil")
    out, said = tmp_path_factory.mktemp("bad"), tmp_path_factory.mktemp("said")
    with open(said / "stdout", "w") as stdout, open(said / "stderr", "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--hosts", str(HOSTS), "--devices", str(DEVICES),
             "--out", str(out), "--timeout", "300", "--minibatching",
             "--bad-data", str(BAD_HOST)],
            stdout=stdout, stderr=stderr, text=True,
        )  # fmt: skip
        listened: dict[int, set[str]] = {}
        coordinator = None
        deadline = time.monotonic() + 500
        while proc.poll() is None and time.monotonic() < deadline:
            for child in psutil.Process(proc.pid).children(recursive=True):
                try:
                    argv = child.cmdline()
                except psutil.Error:
                    continue
                if "--host" in argv:
                    host = int(argv[argv.index("--host") + 1])
                    coordinator = int(argv[argv.index("--port") + 1])
                    listened.setdefault(host, set()).update(listening_addresses(child.pid) or ())
            time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    proc.stdout, proc.stderr = (said / "stdout").read_text(), (said / "stderr").read_text()
    return proc, out, listened, coordinator


def test_a_data_error_on_one_host_is_printed_by_every_host_before_all_stop(bad_run):
    """Without it the other host waited in a collective for minutes (the all-reduce for
    ever), and the error was in the failed host's log only."""
    proc, out, _, _ = bad_run
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    damaged = sorted((out / "data").glob("part-*"))[BAD_HOST::HOSTS][-1]
    error = (out / f"error-{BAD_HOST}.txt").read_text()
    assert re.fullmatch(
        rf"host {BAD_HOST} failed: DataError: {re.escape(str(damaged))}: corrupted record at "
        r"byte [\d,]+: its length or checksum does not match: the bytes are damaged",
        error,
    ), error
    other = 1 - BAD_HOST
    logs = [(out / f"host-{i}.log").read_text() for i in range(HOSTS)]
    assert f"\n{error}\n" in logs[BAD_HOST]  # after its traceback
    assert f"\nhost {other} stops: {error}\n" in logs[other]
    # The launcher: the error, who stopped on it, where the logs are; no host waited out
    # the launcher's timeout.
    assert proc.stderr.splitlines()[-2:] == [
        error,
        f"hosts stopped on it: {other}; each host's log: {out / 'host-<i>.log'}",
    ]
    assert "did not finish" not in proc.stderr and "ok:" not in proc.stdout


def test_the_hosts_listen_where_the_example_says(bad_run):
    """The example's docstring and --help: the coordinator on loopback only, gloo on the
    address the host name resolves to, each host's all-reduce on every interface."""
    _, _, listened, coordinator = bad_run
    assert sorted(listened) == list(range(HOSTS)) and coordinator is not None
    [on] = [a for a in listened[0] if a.endswith(f":{coordinator}")]
    assert is_loopback(on), on
    named = set(socket.gethostbyname_ex(socket.gethostname())[2])
    for table in listened.values():
        wildcard = [a for a in table if a.rsplit(":", 1)[0] in ("[::]", "0.0.0.0")]
        assert len(wildcard) == 1, table  # its all-reduce
        rest = table - set(wildcard)
        assert rest, table  # gloo's, and host 0's coordinator
        assert all(is_loopback(a) or a.rsplit(":", 1)[0].strip("[]") in named for a in rest)
