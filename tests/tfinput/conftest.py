"""Fixtures shared by the tests of tfinput's packages (the columnar format, its source
and the columnar_records facade)."""

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
