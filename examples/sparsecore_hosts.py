"""SparseCore input on several hosts: each host preprocesses its own shard of every
global batch, the hosts agree on the batch numbers, and the limits learn across hosts.

    python examples/sparsecore_hosts.py                 # 2 hosts of 4 CPU devices each
    python examples/sparsecore_hosts.py --hosts 4 --out runs/hosts
    python examples/sparsecore_hosts.py --minibatching  # split batches beyond the limits

    python examples/sparsecore_hosts.py --bad-data 1   # a DataError on host 1 stops all

Runs on CPU with jax-tpu-embedding (``pip install 'tfinput[sparsecore]'``, CPython 3.12+).
It starts ``--hosts`` processes on this machine as the hosts of a pod, joined by
``jax.distributed.initialize`` (its coordinator on a loopback port), each with
``--devices`` CPU devices, and one global mesh over all of them. Each host (`host`):

- reads its own shard of the data: ``pipeline.iterator(config, input_context=...)`` with
  one input pipeline per host, so that every global batch is the hosts' per-host
  batches side by side (whole files per host: no row on two hosts);
- preprocesses its per-host batches for its local devices with `sparsecore_feed`
  (``local_device_count`` its devices, ``global_device_count`` the mesh's);
- hands them to a jitted step over the global mesh
  (``jax.make_array_from_process_local_data``): the step checks, across hosts, that
  every host fed the same batch number;
- learns the limits every ``--update-every`` steps: each host publishes its statistics
  (one file per host through jax-tpu-embedding's NPZ FDO client), a barrier, each host
  loads the maxima over the hosts, a barrier again, and a host whose limits changed
  goes on with a new feed from the same position. Between updates the ids beyond the
  limits are dropped and counted (``allow_id_dropping``): a refusal on one host would
  leave the others waiting in the step.
- with ``--minibatching``, splits a batch whose ids exceed the limits into minibatches
  instead (``SparseCorePlan(minibatching=True)``): the hosts agree on each batch's split
  through jax-tpu-embedding's all-reduce (`tfinput.sparsecore.AllReduce`, a gRPC server
  per host, which listens on every interface), and the step checks that they did.

A host that fails (a `tfinput.errors.DataError` in its shard, with ``--bad-data HOST``)
writes its error beside the others' records and waits, a few seconds at most, until
every other host has printed it and stopped; then the launcher prints it and exits 1.
The others are in a collective that waits for the failed host (for minutes, with
jax-tpu-embedding's all-reduce for ever): each host watches for another's error in a
thread of its own.

Ports, while the hosts run: ``jax.distributed``'s coordinator (host 0) listens on
127.0.0.1 only; JAX's CPU collectives (gloo) listen on the address this machine's host
name resolves to (loopback where ``/etc/hosts`` maps the name to 127.0.x.1, else a
network address), with no option to choose; with ``--minibatching`` each host's
all-reduce listens on every interface (``[::]``), without authentication:
jax-tpu-embedding has no option to bind one.

The launcher then checks what the hosts wrote: every row of the data once over the
hosts and the steps, the same batch numbers and the same limits on every host, and the
statistics crossing hosts once per update, not once per step. It exits 1 otherwise.

What changes on a TPU pod: the processes are the pod's hosts (``jax.distributed
.initialize()`` finds them), the mesh is the pod's chips and ``num_sc_per_device`` the
chip's SparseCores (4 on v5p, 2 on v6e); the FDO directory is one every host can read
(a shared file system or a bucket path); the step is the model's (the preprocessed
input goes to jax-tpu-embedding's ``tpu_sparse_dense_matmul``, whose feature specs are
static arguments: new limits compile it again, on every host at the same step; with
minibatching it runs with ``enable_minibatching=True``, a loop over the minibatches);
the all-reduce's port is one the other hosts reach, and nothing else should (its server
listens on every interface, without authentication); the hosts' errors go through the
same shared directory as the FDO files (or the pod's scheduler collects them).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROWS_PER_FILE = 256
FILES_PER_HOST = 2
PER_HOST_BATCH = 64
SPARSECORES = 2
#: Limits small enough that the first batches outgrow them: the update raises them.
TIGHT_LIMITS = {"items": (8, 8), "user": (8, 8), "tokens": (8, 8)}
#: With --minibatching: room for every id of a partition, but so few distinct ids that
#: the first batches must be split (minibatching splits on distinct ids).
MINIBATCH_LIMITS = {"items": (32, 4), "user": (32, 4), "tokens": (32, 4)}
#: Seconds a failed host waits for the others to print its error and stop.
SEEN_WAIT_S = 30.0


def host(args: argparse.Namespace) -> None:
    """One host (`run_host`), stopped by its own error or another host's: either way it
    prints the error and exits 1, every host within seconds of the first error."""
    out = Path(args.out)
    watch = threading.Thread(target=_stop_on_another_hosts_error, args=(out, args.host))
    watch.daemon = True
    watch.start()
    try:
        run_host(args)
    except BaseException as e:  # every way a host can fail, Ctrl-C included
        _fail(out, args.host, args.hosts, e)


def _errors(out: Path, but: int) -> list[str]:
    """The errors other hosts than ``but`` wrote (`_fail`)."""
    return [p.read_text() for p in sorted(out.glob("error-*.txt")) if p.name != f"error-{but}.txt"]


def _stop_on_another_hosts_error(out: Path, me: int) -> None:
    """Print the first error another host writes, say so, and stop this host: its main
    thread may be waiting for the failed host in a collective, for minutes."""
    while True:
        errors = _errors(out, but=me)
        if errors:
            print(f"host {me} stops: {errors[0]}", flush=True)
            (out / f"stopped-on-error-{me}").touch()
            os._exit(1)
        time.sleep(0.2)


def _fail(out: Path, me: int, hosts: int, error: BaseException) -> None:
    """This host's error: printed, written for the other hosts, and exit 1 once they have
    printed it (or after `SEEN_WAIT_S`). An error that follows another host's (a
    collective that lost its peer) is that host's, said as such."""
    errors = _errors(out, but=me)
    if errors:
        print(f"host {me} stops: {errors[0]}", flush=True)
        os._exit(1)
    traceback.print_exc()
    said = f"host {me} failed: {type(error).__name__}: {error}"
    _write(out / f"error-{me}.txt", said.encode())
    print(said, flush=True)
    # Leave once every other host has printed it and stopped: host 0 holds the
    # coordinator, whose end would stop the others without a word.
    others = [i for i in range(hosts) if i != me]
    deadline = time.monotonic() + SEEN_WAIT_S
    while time.monotonic() < deadline and not all(
        (out / f"stopped-on-error-{i}").exists() or (out / f"error-{i}.txt").exists()
        for i in others
    ):
        time.sleep(0.1)
    sys.stderr.flush()
    os._exit(1)  # not jax.distributed's shutdown barrier, which waits for every host


def run_host(args: argparse.Namespace) -> None:
    """One host: its shard, its feed, the global step, the limits updated with the
    other hosts'. Writes what it did to ``<out>/host-<i>.json``."""
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    coordinator = f"127.0.0.1:{args.port}"  # listening on loopback only, not [::]
    jax.distributed.initialize(
        coordinator,
        num_processes=args.hosts,
        process_id=args.host,
        coordinator_bind_address=coordinator,
    )
    import jax.numpy as jnp
    import numpy as np
    import tensorflow as tf
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding, PartitionSpec
    from jax_tpu_embedding.sparsecore.lib.fdo.file_fdo_client import NPZFileFDOClient

    import tfinput
    from tfinput import testing
    from tfinput.sparsecore import AllReduce, SparseCorePlan, sparsecore_feed

    mesh = jax.make_mesh((jax.device_count(),), ("devices",))
    spread = NamedSharding(mesh, PartitionSpec("devices"))

    def global_array(local: np.ndarray) -> jax.Array:
        """This host's part of a global array: its rows go to its own devices."""
        return jax.make_array_from_process_local_data(spread, np.asarray(local))

    @jax.jit
    def step(numbers: jax.Array, ids: jax.Array) -> tuple[jax.Array, jax.Array]:
        # A collective over every device of every host: the hosts agree on the batch
        # number (and on its minibatches) when its smallest and largest are the same.
        return jnp.max(numbers, 0) - jnp.min(numbers, 0), jnp.sum(ids >= 0)

    schema = testing.small_schema()
    pipeline = tfinput.tfrecord(sorted(Path(args.data).glob("part-*")), schema)
    context = tf.distribute.InputContext(
        num_input_pipelines=args.hosts,
        input_pipeline_id=args.host,
        num_replicas_in_sync=args.hosts,  # the batch size below is the global batch
    )
    config = tfinput.PipelineConfig(batch_size=PER_HOST_BATCH * args.hosts, deterministic=True)
    iterator = pipeline.iterator(config, input_context=context)
    plan = SparseCorePlan.from_schema(
        schema,
        batch_size=PER_HOST_BATCH,
        local_device_count=jax.local_device_count(),
        global_device_count=jax.device_count(),
        num_sc_per_device=SPARSECORES,
        stacking="none",
        limits=MINIBATCH_LIMITS if args.minibatching else TIGHT_LIMITS,
        allow_id_dropping=True,
        minibatching=args.minibatching,
    )
    client = NPZFileFDOClient(args.fdo)
    all_reduce = None
    if args.minibatching:  # this host's end of the all-reduce, the others' addresses
        ports = [int(p) for p in args.all_reduce_ports.split(",")]
        peers = [f"localhost:{p}" for i, p in enumerate(ports) if i != args.host]
        all_reduce = AllReduce.start(
            peers, ports[args.host], host_id=args.host, host_count=args.hosts
        )
        # Every host's end listens before any host's first all-reduce calls it (a call to
        # an end not yet started fails at once).
        multihost_utils.sync_global_devices("all-reduce-started")

    def limits(p: SparseCorePlan) -> dict[str, list[int]]:
        return {
            f.table_spec.stacked_table_spec.stack_name: [
                f.table_spec.stacked_table_spec.max_ids_per_partition,
                f.table_spec.stacked_table_spec.max_unique_ids_per_partition,
            ]
            for f in p.feature_specs.values()
        }

    out = Path(args.out)
    committed = out / "committed.json"
    start = 0
    if committed.exists():  # a restart: every host from the last step all hosts saved
        start = json.loads(committed.read_text())["step"] + 1
        iterator.set_state((out / f"state-{args.host}-{start - 1}.bin").read_bytes())
    if list(Path(args.fdo).glob("fdo_stats_*.npz")):  # the limits learnt before, if any
        plan = plan.with_limits(client.load())
    record: dict[str, list] = {"agree": [], "updates": []}
    dropped = 0
    feed = sparsecore_feed(iterator, plan, workers=2, fdo=client, all_reduce=all_reduce)
    for number in range(start, args.steps):
        (dense, sparse), _labels = next(feed)
        local = jax.local_device_count()
        # Each local device's part of every stack's COO buffer, a row per device.
        ids = np.concatenate([v.reshape(local, -1) for v in sparse.lhs_embedding_ids.values()], 1)
        batch_number = feed.position - 1
        minibatches = int(np.max(sparse.num_minibatches))
        numbers = np.tile([batch_number, minibatches], (local, 1))
        disagree, _ = step(global_array(numbers), global_array(ids))
        record["agree"].append(not np.any(np.asarray(disagree)))
        rows = np.asarray(dense["row_id"]).astype(int).tolist()
        line = {"step": number, "number": batch_number, "minibatches": minibatches, "rows": rows}
        with open(out / f"fed-{args.host}.jsonl", "a") as fed:  # what each step fed, as it goes
            fed.write(json.dumps(line) + "\n")
        if number == args.stop_after:  # the launcher kills this host here (--kill-after)
            (out / "stopped").write_text(str(number))
            time.sleep(3600)
        if (number + 1) % args.update_every:
            continue
        # Statistics cross hosts here, once per update: a file per host, a barrier, the
        # maxima over the hosts' latest files, a barrier before anyone publishes again
        # (a host loading late would see another's next file: other limits).
        feed.publish()
        multihost_utils.sync_global_devices(f"fdo-published-{number}")
        new = plan.with_limits(client.load())
        multihost_utils.sync_global_devices(f"fdo-loaded-{number}")
        record["updates"].append({"step": number, "limits": limits(new)})
        state = feed.get_state()
        if limits(new) != limits(plan):  # go on from the same position with the new plan
            dropped += feed.stats.dropped_ids
            feed.close()
            iterator.set_state(state)
            plan = new
            feed = sparsecore_feed(iterator, plan, workers=2, fdo=client, all_reduce=all_reduce)
        # A checkpoint every host agrees on: each saves its input position (with the
        # model's checkpoint, in a real run), a barrier, then the step is committed.
        _write(out / f"state-{args.host}-{number}.bin", state)
        multihost_utils.sync_global_devices(f"saved-{number}")
        if args.host == 0:
            _write(committed, json.dumps({"step": number}).encode())
    dropped += feed.stats.dropped_ids
    feed.close()
    record["start"] = start
    record["dropped_ids"] = dropped
    record["fdo_files"] = len(list(Path(args.fdo).glob(f"fdo_stats_{args.host}_*.npz")))
    record["devices"] = [jax.local_device_count(), jax.device_count()]
    (out / f"host-{args.host}.json").write_text(json.dumps(record))
    multihost_utils.sync_global_devices("done")
    jax.distributed.shutdown()


def _write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` at once (a kill leaves the old file or the new)."""
    part = path.with_suffix(".part")
    part.write_bytes(data)
    os.replace(part, path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(
    args: argparse.Namespace, common: list[str], logs: Path, *, victim: int | None = None
) -> list[subprocess.Popen]:
    """The hosts, on a fresh coordinator port, their output in ``logs/host-<i>.log``;
    host ``victim`` stops after step ``--kill-after``, for the launcher to kill it."""
    common = [*common, "--port", str(_free_port())]
    for left in [*logs.glob("error-*.txt"), *logs.glob("stopped-on-error-*")]:
        left.unlink()  # a run before this one's
    if args.minibatching:
        ports: set[int] = set()
        while len(ports) < args.hosts:
            ports.add(_free_port())
        common += ["--minibatching", "--all-reduce-ports", ",".join(map(str, sorted(ports)))]
    stop = ["--stop-after", str(args.kill_after)]
    return [
        subprocess.Popen(
            [sys.executable, "-u", __file__, "--host", str(i), *common]
            + (stop if i == victim else []),
            stdout=open(logs / f"host-{i}.log", "a"),
            stderr=subprocess.STDOUT,
        )
        for i in range(args.hosts)
    ]


def _wait(procs: list[subprocess.Popen], timeout: float, out: Path) -> list[str]:
    """Wait for every host; what went wrong (none: all exited 0). A host that ended
    without writing its error (killed by a signal, say) gets one written for it, for the
    others to stop on."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        for i, proc in enumerate(procs):
            code = proc.poll()
            if code and not list(out.glob("error-*.txt")):
                why = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited {code}"
                _write(out / f"error-{i}.txt", f"host {i} {why}, saying nothing".encode())
        time.sleep(0.1)
    failed = []
    for i, proc in enumerate(procs):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            failed.append(f"host {i} did not finish within {timeout:.0f} s")
    errors = [p.read_text() for p in sorted(out.glob("error-*.txt"))]
    if errors:  # the first host's error, which every other host printed as it stopped
        stopped = sorted(p.name.rsplit("-", 1)[1] for p in out.glob("stopped-on-error-*"))
        failed += errors + [
            f"hosts stopped on it: {', '.join(stopped) or 'none'}; each host's log: "
            f"{out / 'host-<i>.log'}"
        ]
    else:
        for i, proc in enumerate(procs):
            if proc.returncode:
                said = (out / f"host-{i}.log").read_text(errors="replace")[-3000:]
                failed.append(f"host {i} exited {proc.returncode}:\n{said}")
    return failed


def _kill(procs: list[subprocess.Popen], victim: int, out: Path) -> int:
    """SIGKILL host ``victim`` once it has stopped after its step (``--stop-after``: a
    kill at a known step), then the others (a pod's scheduler restarts the whole slice
    when one host dies: the others would wait for it in the next collective); the last
    step every host committed."""
    deadline = time.monotonic() + 300
    while not (out / "stopped").exists() and time.monotonic() < deadline:
        if procs[victim].poll() is not None:
            break
        time.sleep(0.05)
    procs[victim].send_signal(signal.SIGKILL)
    for p in procs:
        p.kill()
        p.wait()
    committed = out / "committed.json"
    return json.loads(committed.read_text())["step"] if committed.exists() else -1


def launch(args: argparse.Namespace) -> int:
    """Write the data, start the hosts (kill one and restart them all, with
    ``--kill-after``), wait for them, check what they wrote."""
    from tfinput import testing

    out = Path(args.out or tempfile.mkdtemp(prefix="sparsecore-hosts-"))
    out.mkdir(parents=True, exist_ok=True)
    data, fdo = out / "data", out / "fdo"
    fdo.mkdir(exist_ok=True)
    schema = testing.small_schema()
    files = FILES_PER_HOST * args.hosts
    rows = ROWS_PER_FILE * files
    testing.write_tfrecord(data, schema, rows=rows, files=files, seed=3)
    if args.bad_data is not None:  # a byte flipped in the middle of that host's last file
        shard = sorted(data.glob("part-*"))[args.bad_data :: args.hosts]
        damaged = bytearray(shard[-1].read_bytes())
        damaged[len(damaged) // 2] ^= 0xFF
        shard[-1].write_bytes(bytes(damaged))
    steps = rows // (PER_HOST_BATCH * args.hosts)  # one epoch: every row once
    common = ["--hosts", str(args.hosts), "--devices", str(args.devices)]
    common += ["--data", str(data), "--fdo", str(fdo), "--out", str(out)]
    common += ["--steps", str(steps), "--update-every", str(args.update_every)]
    start = time.perf_counter()
    victim = args.hosts - 1 if args.kill_after is not None else None
    procs = _start(args, common, out, victim=victim)
    committed = None
    if victim is not None:
        committed = _kill(procs, victim, out)
        print(f"host {args.hosts - 1} killed (SIGKILL) after step {args.kill_after}; the last "
              f"step every host saved: {committed}; all hosts restarted")  # fmt: skip
        procs = _start(args, common, out)
    failed = _wait(procs, args.timeout, out)
    if failed:
        print("\n".join(failed), file=sys.stderr)
        return 1
    hosts = [json.loads((out / f"host-{i}.json").read_text()) for i in range(args.hosts)]
    fed = [_trained(out / f"fed-{i}.jsonl", committed) for i in range(args.hosts)]
    rows_fed = [r for host_steps in fed for line in host_steps for r in line["rows"]]
    checks = {
        "every row once over the hosts": sorted(rows_fed) == list(range(rows)),
        "the same batch numbers on every host": all(
            [line["number"] for line in f] == list(range(steps)) for f in fed
        ),
        "every step's hosts agreed (a cross-host collective)": all(all(h["agree"]) for h in hosts),
        "the same limits on every host after each update": all(
            h["updates"] == hosts[0]["updates"] for h in hosts
        ),
    }
    if args.minibatching:
        checks["batches beyond the limits split into minibatches, the same on every host"] = any(
            line["minibatches"] > 1 for f in fed for line in f
        ) and all(
            [line["minibatches"] for line in f] == [line["minibatches"] for line in fed[0]]
            for f in fed
        )
    if committed is not None:
        checks["every host resumed at the same global batch"] = all(
            h["start"] == committed + 1 for h in hosts
        )
    else:
        checks["statistics published once per update, not per step"] = all(
            h["fdo_files"] == len(h["updates"]) + bool(steps % args.update_every) for h in hosts
        )
    seconds = time.perf_counter() - start
    print(
        f"{args.hosts} hosts x {hosts[0]['devices'][0]} CPU devices: {steps} global batches of "
        f"{PER_HOST_BATCH * args.hosts} rows ({PER_HOST_BATCH} per host) in {seconds:.1f} s"
    )
    for update in hosts[0]["updates"]:
        print(f"after step {update['step']}: limits {update['limits']}")
    print(f"ids dropped before the limits caught up: {[h['dropped_ids'] for h in hosts]}")
    if args.minibatching:
        print(f"minibatches per step: {[line['minibatches'] for line in fed[0]]}")
    for name, ok in checks.items():
        print(f"{'ok' if ok else 'FAILED'}: {name}")
    print(f"written: {out}")
    return 0 if all(checks.values()) else 1


def _trained(path: Path, committed: int | None) -> list[dict]:
    """The steps a host's model trained on, in order: with a restart, those of the first
    run up to the committed step (the later ones went with the model state that was not
    saved), then those of the second run."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    if committed is None:
        return lines
    restart = next(i for i in range(1, len(lines)) if lines[i]["step"] <= lines[i - 1]["step"])
    return [line for line in lines[:restart] if line["step"] <= committed] + lines[restart:]


PORTS = (
    "Ports, while the hosts run: jax.distributed's coordinator listens on 127.0.0.1 only; "
    "JAX's CPU collectives (gloo) on the address this machine's host name resolves to "
    "(loopback where /etc/hosts maps it to 127.0.x.1, else a network address); with "
    "--minibatching, each host's all-reduce on every interface ([::]), without "
    "authentication (jax-tpu-embedding has no option to bind one)."
)


def main() -> None:
    p = argparse.ArgumentParser(
        description=" ".join(__doc__.split("\n\n")[0].split()), epilog=PORTS
    )
    p.add_argument("--hosts", type=int, default=2, help="processes, one per host (default 2)")
    p.add_argument("--devices", type=int, default=4, help="CPU devices per host (default 4)")
    p.add_argument("--update-every", type=int, default=3, help="steps between limit updates")
    p.add_argument("--out", help="where the data, the FDO files and each host's record go")
    p.add_argument("--timeout", type=float, default=300, help="seconds the hosts may take")
    p.add_argument(
        "--minibatching",
        action="store_true",
        help="split batches beyond the limits into minibatches, the hosts agreeing on each "
        "split through jax-tpu-embedding's all-reduce (a gRPC port per host, listening on "
        "every interface)",
    )
    p.add_argument(
        "--kill-after",
        type=int,
        metavar="STEP",
        help="SIGKILL the last host once it has fed STEP, restart every host, and check "
        "that they resume at the same global batch with no row lost or fed twice",
    )
    p.add_argument(
        "--bad-data",
        type=int,
        metavar="HOST",
        help="damage a record of host HOST's shard: that host stops with a DataError naming "
        "the file, and every host prints it and stops within seconds (exit 1)",
    )
    # One host's own arguments (the launcher passes them).
    p.add_argument("--host", type=int, help=argparse.SUPPRESS)
    for name in ("--port", "--steps", "--stop-after"):
        p.add_argument(name, type=int, help=argparse.SUPPRESS)
    for name in ("--data", "--fdo", "--all-reduce-ports"):
        p.add_argument(name, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.bad_data is not None and not 0 <= args.bad_data < args.hosts:
        p.error(f"--bad-data {args.bad_data}: expected a host from 0 to {args.hosts - 1}")
    if args.host is None:
        sys.exit(launch(args))
    host(args)


if __name__ == "__main__":
    main()
