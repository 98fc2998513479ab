"""Fixtures shared by the tests of tfinput's packages (the columnar format, its source
and the columnar_records facade; the schema file the CLI tests pass)."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture
def copy(tmp_path, small_columnar):
    """A private copy of the columnar data set, to damage."""
    d = tmp_path / "col"
    shutil.copytree(os.path.dirname(small_columnar[0]), d)
    return d


@pytest.fixture
def schema_file(tmp_path, small_schema):
    """The shared `small_schema` written to ``tmp_path/schema.json`` (a path string)."""
    path = tmp_path / "schema.json"
    small_schema.to_json(path)
    return str(path)
