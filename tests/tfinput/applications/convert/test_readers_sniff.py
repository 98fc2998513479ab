"""`tfinput._src.applications.convert.readers`: input files and formats, and a CSV file's layout (delimiter,
header, column names) sniffed from its first lines."""

from __future__ import annotations

import os

import pytest

from tests.helpers import cli_main
from tfinput._src.applications.convert.readers import (
    detect_input_format,
    resolve_inputs,
)
from tfinput.convert import convert
from tfinput.errors import ConfigError, DataError, SchemaError, SourceError
from tfinput.schema import Dense, Schema

NO_OPTIONS = dict(delimiter=None, header="auto", column_names=None, preset=None)


# ------------------------------------------------------------------ inputs
def test_resolve_inputs_expands_globs_sorted_and_keeps_paths_as_given(tmp_path):
    for name in ("b.csv", "a.csv", "c.txt"):
        (tmp_path / name).write_text("x\n")
    got = resolve_inputs([tmp_path / "c.txt", str(tmp_path / "*.csv")])
    assert got == [str(tmp_path / n) for n in ("c.txt", "a.csv", "b.csv")]
    assert resolve_inputs(tmp_path / "a.csv") == [str(tmp_path / "a.csv")]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([], "no input files given"),
        (["*.nothing"], r"input pattern '.*\*\.nothing' matches no files"),
        (["nope.csv"], r"input file '.*nope\.csv' does not exist"),
    ],
    ids=["empty", "pattern", "missing"],
)
def test_resolve_inputs_errors(tmp_path, inputs, message):
    with pytest.raises(SourceError, match=message):
        resolve_inputs([str(tmp_path / i) for i in inputs])


def test_a_fifo_input_is_refused_naming_it(tmp_path):
    fifo = tmp_path / "rows.csv"
    os.mkfifo(fifo)
    for inputs in ([fifo], [str(tmp_path / "*.csv")]):
        with pytest.raises(SourceError) as e:
            resolve_inputs(inputs)
        assert str(e.value).startswith(
            f"convert: input file {str(fifo)!r} is a FIFO (named pipe), not a regular file"
        )


def test_missing_input(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        convert(tmp_path / "nope.csv", tmp_path / "out")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("d.parquet", "parquet"),
        ("d.PQ", "parquet"),
        ("d.tfrecord", "tfrecord"),
        ("d.tfrecords.gz", "tfrecord"),
        ("d.tfr.zz", "tfrecord"),
        ("d.csv.gz", "csv"),
        ("events", "csv"),
    ],
)
def test_detect_input_format_by_name(name, kind):
    assert detect_input_format([name], "auto") == kind
    assert detect_input_format([name], "csv") == "csv"  # as requested


def test_detect_input_format_refuses_mixed_and_unknown_formats():
    with pytest.raises(ConfigError, match=r"inputs mix formats \['csv', 'parquet'\]"):
        detect_input_format(["a.csv", "b.parquet"], "auto")
    with pytest.raises(ConfigError, match=r"input_format must be one of .* got 'orc'"):
        detect_input_format(["a.orc"], "orc")


# -------------------------------------------------------------- CSV layout


def test_header_and_column_names(tmp_path, write_text, output):
    path = write_text("1\t2.5\tx\n0\t1.0\ty\n", "n.tsv")
    result = convert(path, tmp_path / "a", column_names=["label", "v", "s"])
    assert (result.header, output.table(result)["s"]) == (False, ["x", "y"])
    with pytest.raises(SchemaError, match="did you mean 'labels'"):
        convert(
            path,
            tmp_path / "b",
            column_names=["labels", "v", "s"],
            schema=Schema.of([Dense(name="v")], labels=["label"]),
        )


@pytest.mark.parametrize(
    ("text", "header"),
    [
        ("city,country\nparis,france\nlyon,france\n", True),
        ("paris,france\nlyon,france\nparis,spain\n", False),
        ("label,v\n1,2\n", True),
        ("0,a\n1,b\n", False),
    ],
    ids=["text-header", "text-no-header", "numeric-below", "numbers-first"],
)
def test_header_sniffing(tmp_path, write_text, text, header):
    result = convert(write_text(text), tmp_path / "out")
    assert result.header is header


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (bytes(range(256)) * 40, "NUL byte at offset 0"),
        (b"label,v\n1,\xff\xfe\x80\n" * 100, "byte 0xff at offset 10 is not valid UTF-8"),
    ],
    ids=["binary", "not-utf8"],
)
def test_binary_input_is_a_clean_error(tmp_path, capsys, content, message):
    path = tmp_path / "blob.csv"
    path.write_bytes(content)
    with pytest.raises(DataError, match=rf"{path}: not a (UTF-8 )?text CSV/TSV file"):
        convert(path, tmp_path / "out")
    assert cli_main(["convert", str(path), "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err
