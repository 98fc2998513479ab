"""`tfinput.columnar_records.source`: the columnar source (`tfinput._src.core.sources.columnar`),
importable from here too."""

from __future__ import annotations

import pytest

from tfinput._src.core.sources import columnar
from tfinput.columnar_records import read_manifest, source
from tfinput.errors import SourceError


def test_source_re_exports_the_columnar_source():
    assert source.__all__ == ["ColumnarSource", "check_size"]
    assert source.ColumnarSource is columnar.ColumnarSource
    assert source.check_size is columnar.check_size


def test_check_size_accepts_the_manifest_size_and_names_a_missing_file(copy):
    m = read_manifest(copy)
    path, entry = m.paths[0], m.files[0]
    source.check_size(path, m, entry)  # intact: no error
    (copy / entry.name).unlink()
    with pytest.raises(SourceError, match=f"{path}: listed in the manifest .* but missing"):
        source.check_size(path, m, entry)
