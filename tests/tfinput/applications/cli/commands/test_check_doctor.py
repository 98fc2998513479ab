"""`tfinput doctor`: the versions a bug report needs, as text and as JSON."""

from __future__ import annotations

import importlib.metadata as md
import json
import sys

from tests.helpers import run_cli


def test_doctor_json_names_every_version_a_bug_report_needs(capsys):
    code, out, _ = run_cli(capsys, "doctor", "--json")
    assert code == 0
    rep = json.loads(out)
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
    assert set(parts) == {
        "jax",
        "plotly",
        "xprof",
        "psycopg",
        "tensorflow-io",
        "keras-rs",
        "jax-tpu-embedding",
    }
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
    code, out, _ = run_cli(capsys, "doctor")
    assert code == 0
    for word in ("python", "tensorflow", "keras", "backend:", "numpy", "pyarrow", "optuna"):
        assert word in out
    assert "optional parts:" in out
