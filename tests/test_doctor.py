"""`tfinput doctor` / `--version`, and the supported matrix: declared = tested."""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tfinput import cli, doctor

ROOT = Path(__file__).resolve().parents[1]


def test_doctor_json_names_every_version_a_bug_report_needs(capsys):
    assert cli.main(["doctor", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["python"] == ".".join(map(str, sys.version_info[:3]))
    import numpy as np
    import pyarrow as pa

    assert rep["versions"]["numpy"] == np.__version__
    assert rep["versions"]["pyarrow"] == pa.__version__
    for name in ("tfinput", "tensorflow", "keras", "optuna"):
        assert rep["versions"][name], name
    import keras

    assert rep["keras_backend"] == keras.config.backend()
    parts = {p["name"]: p for p in rep["optional"]}
    assert set(parts) == {"jax", "plotly", "xprof", "psycopg", "tensorflow-io"}
    for name, part in parts.items():
        dist = {"tensorflow-io": "tensorflow-io"}.get(name, name)
        try:
            installed = md.version(dist)
        except md.PackageNotFoundError:
            installed = None
        assert part["version"] == installed, name
        if installed is None:
            assert part["usable"] is False


def test_doctor_text(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    for word in ("python", "tensorflow", "keras", "backend:", "numpy", "pyarrow", "optuna"):
        assert word in out
    assert "optional parts:" in out


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
