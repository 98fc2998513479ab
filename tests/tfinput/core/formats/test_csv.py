"""`tfinput._src.core.formats.csv`: a CSV/TSV file's layout (delimiter, header, column names)
sniffed from its first lines, its text read with every row's line number, and the quote
guard. Conversion of that text is tested with `tfinput.convert`
(tests/tfinput/applications/convert/test_readers.py, test_sniff.py)."""

from __future__ import annotations

import gzip

import pytest

from tests.tfinput.applications.convert.test_readers import QUOTE_CASES, QUOTE_IDS
from tfinput._src.core.formats.csv import (
    KNOWN_COLUMNS,
    CsvReader,
    Layout,
    sniff_layout,
    unclosed_quote,
)
from tfinput.errors import ConfigError, SchemaError, SourceError

NO_OPTIONS = dict(delimiter=None, header="auto", column_names=None, preset=None)


# ------------------------------------------------------------------ layout
@pytest.mark.parametrize(
    ("text", "delimiter"),
    [
        ("a;b;label\n1;2;0\n", ";"),
        ("a\tb\n1\t2\n", "\t"),
        ('name,v\n"x;y",1\n', ","),  # the ';' is inside quotes
    ],
    ids=["semicolon", "tab", "quoted"],
)
def test_delimiter_is_sniffed(tmp_path, text, delimiter):
    path = tmp_path / "in.csv"
    path.write_text(text)
    layout = sniff_layout(str(path), list_delimiters=(), **NO_OPTIONS)
    assert layout.delimiter == delimiter and layout.header


def test_list_delimiter_is_never_the_field_delimiter(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("1,a|b|c\n2,d|e|f\n")  # '|' splits lines into more fields
    assert sniff_layout(str(path), list_delimiters=(), **NO_OPTIONS).delimiter == "|"
    layout = sniff_layout(str(path), list_delimiters=("|",), **NO_OPTIONS)
    assert (layout.delimiter, layout.names) == (",", ["f0", "f1"])


def test_names_without_a_header(tmp_path):
    path = tmp_path / "in.tsv"
    path.write_text("1\t2\t3\n4\t5\t6\n")
    layout = sniff_layout(str(path), list_delimiters=(), **NO_OPTIONS)
    assert (layout.header, layout.names, layout.names_from) == (
        False,
        ["f0", "f1", "f2"],
        "as on line 1",
    )
    criteo = sniff_layout(str(path), list_delimiters=(), **{**NO_OPTIONS, "preset": "criteo"})
    assert criteo.names[:3] == ["label", "I1", "I2"]
    assert criteo.names_from == "the criteo preset's columns"


@pytest.mark.parametrize(
    ("text", "options", "error", "message"),
    [
        ("", {}, SourceError, "is empty"),
        ("a,a,b\n1,2,3\n", {}, SchemaError, "column names must be unique and non-empty"),
        ("a,b\n1,2\n", {"header": "yes"}, ConfigError, "header must be 'auto', True or False"),
    ],
    ids=["empty", "duplicate-names", "bad-header-option"],
)
def test_layout_errors(tmp_path, text, options, error, message):
    path = tmp_path / "in.csv"
    path.write_text(text)
    with pytest.raises(error, match=message):
        sniff_layout(str(path), list_delimiters=(), **{**NO_OPTIONS, **options})


def test_compressed_input_is_sniffed_decompressed(tmp_path):
    path = tmp_path / "in.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("x;y\n1;2\n")
    layout = sniff_layout(str(path), list_delimiters=(), **NO_OPTIONS)
    assert (layout.delimiter, layout.names) == (";", ["x", "y"])


# ------------------------------------------------------------------ reading
def test_csv_reader_tags_rows_with_their_line_numbers(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("v,label\n1,0\n2\n3,1\n4,0\n")
    layout = Layout(delimiter=",", names=["v", "label"], header=True, names_from="the header")
    reader = CsvReader(str(path), layout, None)
    try:
        [(batch, lines)] = list(reader.batches())
    finally:
        reader.close()
    assert batch.column("v").to_pylist() == ["1", "3", "4"]
    assert lines.tolist() == [2, 4, 5]
    assert reader.invalid == [(3, "expected 2 fields (the header), found 1: '2'")]


@pytest.mark.parametrize(("line", "bad"), QUOTE_CASES, ids=QUOTE_IDS)
def test_unclosed_quote(line, bad):
    assert unclosed_quote(line, ",") is bad
    assert unclosed_quote(line.replace(",", "\t"), "\t") is bad


def test_known_columns_are_the_conversion_presets():
    from tfinput._src.applications.convert.columns import PRESET_COLUMNS, PRESETS

    assert PRESET_COLUMNS is KNOWN_COLUMNS and set(KNOWN_COLUMNS) == set(PRESETS)
    assert len(KNOWN_COLUMNS["criteo"]) == 40 and KNOWN_COLUMNS["criteo"][0] == "label"


def test_convert_reads_csv_through_this_module():
    """convert's reader is this reader with conversion added; its sniffing is this one."""
    from tfinput._src.applications.convert import readers

    assert issubclass(readers.CsvReader, CsvReader)
    assert readers.sniff_layout is sniff_layout and readers.Layout is Layout
