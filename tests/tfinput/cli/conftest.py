"""Fixtures of the `tfinput.cli` tests: the shared schema as a JSON file."""

from __future__ import annotations

import pytest


@pytest.fixture
def schema_file(tmp_path, small_schema):
    """The shared `small_schema` written to ``tmp_path/schema.json`` (a path string)."""
    path = tmp_path / "schema.json"
    small_schema.to_json(path)
    return str(path)
