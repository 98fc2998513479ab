"""`tfinput.doctor`: the report and one-line summary of an installation (`--version`),
and the supported matrix: declared = tested."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tfinput import doctor

ROOT = Path(__file__).resolve().parents[3]


def test_version_flag_prints_the_versions_without_loading_tensorflow():
    code = (
        "import sys\n"
        "from tfinput import cli\n"
        "try:\n"
        "    cli.main(['--version'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0\n"
        "print('LOADED', 'tensorflow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert re.search(r"tfinput \S+ \(Python [\d.]+, TensorFlow [\d.]+, Keras", out.stdout)
    assert "LOADED False" in out.stdout


def test_summary_is_one_line():
    assert "\n" not in doctor.summary()


def _report(**optional_versions) -> doctor.Report:
    return doctor.Report(
        python="3.11.9",
        platform="Linux x86_64",
        versions={"tfinput": "1.0", "tensorflow": "2.21.0", "keras": "3.15.0", "optuna": None},
        keras_backend="jax",
        optional=(
            doctor.Part("jax", "device prefetch", "0.10.2", True),
            doctor.Part("tensorflow-io", "Parquet engine", "0.37.1", False, "ops do not load"),
            doctor.Part("plotly", "charts", None, False, "pip install 'tfinput[plots]'"),
        ),
    )


def test_report_lines_name_missing_and_unusable_parts():
    lines = _report().lines()
    assert lines[0].split() == ["python", "3.11.9", "(Linux", "x86_64)"]
    assert "2.21.0" in lines[2] and lines[2].startswith("tensorflow")
    assert lines[3].split()[1:] == ["3.15.0", "(backend:", "jax)"]
    assert lines[4].split() == ["optuna", "NOT", "INSTALLED"]
    assert lines[5] == "optional parts:"
    assert lines[6].split() == ["jax", "0.10.2:", "device", "prefetch"]
    assert "0.37.1 (installed, NOT usable): Parquet engine; ops do not load" in lines[7]
    assert "not installed: charts; pip install 'tfinput[plots]'" in lines[8]
    assert _report().to_dict()["optional"][1]["usable"] is False


def test_report_without_backend_check_reads_keras_backend_from_the_environment(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    rep = doctor.report(check_backend=False)
    assert rep.keras_backend == "torch"
    assert rep.python == ".".join(map(str, sys.version_info[:3]))
    assert [p.name for p in rep.optional] == [
        "jax",
        "plotly",
        "xprof",
        "psycopg",
        "tensorflow-io",
        "keras-rs",
        "jax-tpu-embedding",
    ]
    for part in rep.optional:
        if part.version is None:
            assert not part.usable and part.note.startswith("pip install 'tfinput[")


# ----------------------------------------------------------- the supported matrix
def _dev_var(name: str) -> str:
    m = re.search(rf"^{name}=(\"[^\"]*\"|\S+)$", (ROOT / "dev").read_text(), re.M)
    assert m, f"dev defines {name}"
    return m.group(1).strip('"')


def _readme_matrix() -> dict[str, tuple[str, str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Supported versions", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in section.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = (cells[1].split()[0], cells[2].split()[0])
    return rows


def test_readme_matrix_is_what_dev_and_ci_run():
    rows = _readme_matrix()
    assert rows["Python"] == (_dev_var("OLDEST_PYTHON"), _dev_var("NEWEST_PYTHONS").split()[0])
    assert rows["TensorFlow"] == (_dev_var("OLDEST_TF"), _dev_var("NEWEST_TF"))
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./dev test --oldest" in ci and "./dev test --newest" in ci


def test_pyproject_range_covers_both_ends():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        pytest.skip("tomllib is Python 3.11+; the newest-end run checks this")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    tf_req = next(d for d in project["dependencies"] if d.startswith("tensorflow-cpu"))
    lo, hi = re.search(r">=([\d.]+),<([\d.]+)", tf_req).groups()
    oldest, newest = _dev_var("OLDEST_TF"), _dev_var("NEWEST_TF")
    assert lo == oldest
    assert tuple(map(int, newest.split("."))) < tuple(map(int, hi.split(".")))
    assert project["requires-python"] == f">={_dev_var('OLDEST_PYTHON')}"
    assert isinstance(project["license"], str)  # SPDX expression, not a TOML table


def test_this_run_is_on_a_declared_combination():
    """The installed set is inside what pyproject and the README declare."""
    import numpy as np
    import pyarrow as pa
    import tensorflow as tf

    tf_minor = tuple(int(x) for x in tf.__version__.split(".")[:2])
    assert (2, 17) <= tf_minor <= (2, 21)
    if sys.version_info >= (3, 11):
        assert int(np.__version__.split(".")[0]) >= 2
    assert int(pa.__version__.split(".")[0]) >= 16
