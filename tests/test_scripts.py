"""Every script under benchmarks/ and examples/ still runs: each benchmark in its smoke
mode (``--smoke``: tiny data, one round, anything it writes in a temporary directory),
the examples not run by tests/test_examples.py and test_examples_resume.py as they are.
The scripts run in turn in one Python child per Keras backend (TensorFlow and Keras
imported once for all), so a rename cannot break one silently.

Each smoke run is its script's smallest end-to-end case: criteo-like data with a few
features of each kind (benchmarks/core.py's ``SMOKE_SCHEMA``: building a pipeline traces
every feature), one variant where the script compares several, one round, a window of a
batch or two, one worker process where it starts several, tf.data service servers and a
step run in this child rather than in processes of their own. Keep it so: the whole
module is budgeted at about 110 CPU-seconds, measured as user + sys of
``/usr/bin/time -v python -m pytest -p no:xdist -q tests/test_scripts.py`` (about 105 on
the shared development machine, more when it is busy; much of it is fixed: each process
started imports TensorFlow (this pytest, the two children, versions.py's worker, Ray's
worker), and each build of a pipeline costs about half a CPU-second, however small its
data)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests._once import Script, run_once, run_programs, selected
from tests.helpers import SHARED_DATA
from tests.test_examples import RUNS as EXAMPLE_RUNS

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = SHARED_DATA / "criteo_sample.txt"

#: Each smoke run: script (from the repository root) -> (its arguments, the Keras
#: backend of the child that runs it). The JAX child runs the scripts whose step must
#: run on JAX; a Keras backend is fixed at its first import, hence a child of its own.
SMOKE = {
    "benchmarks/check_files.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/columnar.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/convert_ray.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/core.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/iterator_delete.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/mixing.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/tune.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/parquet_grain.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/profile.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/read_batch.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/resume_state.py": (["--smoke"], "tensorflow"),
    "benchmarks/run.py": (
        ["--smoke", "--criteo-sample", str(SAMPLE)]
        if SAMPLE.is_file()
        else ["--smoke", "--only", "synthetic"],
        "tensorflow",
    ),
    "benchmarks/serial_stage.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/shuffle_cost.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/service.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/service_guard.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/sparsecore.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/sparsecore_feed.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/sparsecore_loaders.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/tune_power.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/versions.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/wide.py": (["--smoke", "--write"], "tensorflow"),
    "benchmarks/window_length.py": (["--smoke", "--write"], "tensorflow"),
    "examples/sparsecore_feed.py": ([], "tensorflow"),
    "benchmarks/feed.py": (["--smoke", "--write"], "jax"),
    "benchmarks/jax_profile.py": (["--smoke", "--write"], "jax"),
    "benchmarks/table_step.py": (["--smoke", "--write"], "jax"),  # its smoke backend, in-process
}
#: Scripts run elsewhere: tests/test_examples.py (RUNS), test_examples_resume.py and
#: tests/tfinput/applications/sparsecore/test_feed_hosts.py.
ELSEWHERE = {*(f"examples/{script}" for script, _, _ in EXAMPLE_RUNS.values())}
ELSEWHERE |= {"examples/resume_jax.py", "examples/sparsecore_hosts.py"}  # its own test module


def _files() -> dict[str, int]:
    """Every file under benchmarks/ (bytecode caches aside) -> its modification time."""
    return {
        str(p.relative_to(ROOT)): p.stat().st_mtime_ns
        for p in (ROOT / "benchmarks").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def _run(scripts: list[str], backend: str, directory: Path) -> dict:
    """The scripts' runs in one child: script -> [status, stdout, stderr]; ``changed``:
    the files under benchmarks/ the runs added or modified; ``written``: the smoke
    directories' RESULTS.md."""
    (directory / "tmp").mkdir()
    env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    env["TFINPUT_SMOKE_DIR"] = str(directory / "tmp")  # where the smoke directory is made
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    before = _files()
    programs = {s: Script(ROOT / s, SMOKE[s][0]) for s in scripts}
    results = {s: r[:3] for s, r in run_programs(programs, directory, env, timeout=900).items()}
    after = _files()
    written = [p.read_text() for p in (directory / "tmp").glob("tfinput-smoke-*/RESULTS.md")]
    changed = sorted(p for p, t in after.items() if before.get(p) != t)
    return {"runs": results, "changed": changed, "written": "\n".join(written)}


@pytest.fixture(scope="module")
def smoke(request, tmp_path_factory):
    """``smoke(script)``: that script's [status, stdout, stderr], plus ``changed`` and
    ``written`` of its child (see `_run`). The selected scripts run once, in one child
    per Keras backend."""
    runs = {}
    scripts = selected(request, _script)
    for backend in dict.fromkeys(SMOKE[s][1] for s in scripts):
        names = [s for s in scripts if SMOKE[s][1] == backend]
        runs[backend] = run_once(
            tmp_path_factory, f"scripts-{backend}", lambda d, n=names, b=backend: _run(n, b, d)
        )

    def of(script: str) -> dict:
        child = runs[SMOKE[script][1]]
        return {
            "run": child["runs"][script],
            "changed": child["changed"],
            "written": child["written"],
        }

    return of


def _script(item: pytest.Item) -> str | None:
    spec = getattr(item, "callspec", None)
    return spec.params.get("script") if spec else None


@pytest.mark.parametrize("script", list(SMOKE))
def test_script_runs_in_its_smoke_mode(smoke, script):
    """The script exits 0; a benchmark writes only under its temporary directory."""
    got = smoke(script)
    status, out, err = got["run"]
    assert status == "ok", (
        f"{script} {' '.join(SMOKE[script][0])}: {status}\n{out[-2000:]}\n{err[-4000:]}"
    )
    assert got["changed"] == [], f"smoke runs wrote under benchmarks/: {got['changed']}"
    if "--write" in SMOKE[script][0]:
        assert "<!-- " in got["written"], "no section written to the smoke RESULTS.md"


def test_every_script_has_a_smoke_run():
    """A new script under benchmarks/ or examples/ is run by a test: here, or by
    tests/test_examples.py / test_examples_resume.py."""
    found = [*ROOT.glob("benchmarks/*.py"), *ROOT.glob("examples/*.py")]
    found += ROOT.glob("examples/*/main.py")
    scripts = {str(p.relative_to(ROOT)) for p in found if not p.name.startswith("_")}
    missing = sorted(scripts - set(SMOKE) - ELSEWHERE)
    assert missing == [], f"scripts no test runs (add them to SMOKE in {__file__}): {missing}"
    gone = sorted((set(SMOKE) | ELSEWHERE) - scripts)
    assert gone == [], f"runs of scripts that are gone: {gone}"


def test_device_script_parses_and_passes_only_flags_its_scripts_take():
    """benchmarks/device.sh needs a lent GPU machine: here its shell syntax is checked,
    and each benchmark it runs is given only options that script declares (the scripts
    themselves run above)."""
    device = ROOT / "benchmarks" / "device.sh"
    check = subprocess.run(["bash", "-n", str(device)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    text = device.read_text().replace("\\\n", " ")
    calls = re.findall(r"python3 (benchmarks/\w+\.py)([^>\n]*)", text)
    assert calls, "device.sh runs no benchmark script"
    for script, args in calls:
        declared = set(re.findall(r'add_argument\(\s*"(--[\w-]+)"', (ROOT / script).read_text()))
        unknown = sorted(set(re.findall(r"(--[\w-]+)", args)) - declared)
        assert unknown == [], f"device.sh passes {script} options it does not take: {unknown}"
