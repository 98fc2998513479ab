"""`tfinput._src.applications.convert.readers` (with the private quote guard, `_guards`): CSV/TSV blocks
with exact line numbers, Parquet and TFRecord blocks."""

from __future__ import annotations

import gzip

import pytest

import tfinput
from tests.helpers import cli_main
from tfinput._src.applications.convert.columns import plan_columns
from tfinput._src.applications.convert.readers import csv_batches, typed_names
from tfinput._src.core.formats.csv import Layout
from tfinput.convert import convert
from tfinput.errors import DataError, SchemaError, SourceError
from tfinput.schema import Dense, Schema

SCHEMA = Schema.of([Dense(name="v")], labels=["label"])


# --------------------------------------------------------------------- CSV


def test_csv_files_with_other_columns_are_refused(tmp_path):
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    first.write_text("v,label\n1,0\n")
    second.write_text("w,label\n1,0\n")
    layout = Layout(delimiter=",", names=["v", "label"], header=True, names_from="the header")
    args = dict(delimiter=",", header="auto", column_names=None, preset=None, list_delimiters=())
    blocks = csv_batches(
        [str(first), str(second)],
        first=layout,
        layout_args=args,
        plan=plan_columns(SCHEMA, {}),
        block_size=1 << 16,
        on_read=lambda n: None,
    )
    with pytest.raises(SchemaError, match=r"b\.csv: columns \['w', 'label'\] differ from those"):
        list(blocks)


def test_quoted_fields(tmp_path, write_text, output):
    text = 'name,score,label\n"Smith, J.",1.5,1\n"say ""hi""",2,0\n\'single\',3,1\n'
    result = convert(write_text(text), tmp_path / "out")
    assert output.table(result)["name"] == ["Smith, J.", 'say "hi"', "'single'"]


@pytest.mark.parametrize(
    ("text", "line", "found"),
    [
        ("a,b,label\n1,2\n3,4,1\n", 2, "expected 3 fields (as in the header on line 1), found 2"),
        ("a,b,label\n1,2,0\n3,4,1,9\n", 3, "found 4"),
        ("a,b\n1,2,3\n4,5,6\n", 2, "expected 2 fields (as in the header on line 1), found 3"),
        ("a,b,label\n1,2,0\n3,4,1\n5,6", 4, "found 2: '5,6'"),
    ],
    ids=["row-too-short", "row-too-long", "header-too-short", "truncated-last-line"],
)
def test_wrong_field_count_names_the_line(tmp_path, write_text, text, line, found):
    path = write_text(text)
    with pytest.raises(DataError) as err:
        convert(path, tmp_path / "out")
    assert f"{path}:{line}: " in str(err.value) and found in str(err.value)
    assert not list((tmp_path / "out").glob("part-*"))  # nothing half-written is left


def test_line_numbers_stay_exact_across_blocks(tmp_path, write_text, output):
    good = [f"{i},{i % 7},{i % 2}" for i in range(3000)]
    bad_at = {17: "x,1,0", 1500: "1,2", 2999: "3.5,1,1"}
    lines = ["id,v,label"] + [bad_at.get(i, ln) for i, ln in enumerate(good)]
    schema = Schema.of([Dense(name="id", dtype="int64"), Dense(name="v")], labels=["label"])
    path = write_text("\n".join(lines) + "\n")
    result = convert(path, tmp_path / "out", schema=schema, on_bad_rows="skip", block_size=1 << 12)
    assert [b.line for b in result.bad_rows] == [i + 2 for i in sorted(bad_at)]
    assert result.rows == 2997
    ids = output.table(result)["id"]
    assert ids[:3] == [0, 1, 2] and 17 not in ids and 1500 not in ids


def _id_csv(write_text, lines_by_index, rows=5000, name="q.csv"):
    lines = ["id,name,label"] + [f"{i},n{i},{i % 2}" for i in range(rows)]
    for i, text in lines_by_index.items():
        lines[i + 1] = text
    return write_text("\n".join(lines) + "\n", name)


@pytest.mark.parametrize(
    "later",
    [{}, {300: '300,"quoted, closed",0', 4000: '4000,"n""4000",0'}],
    ids=["no-later-quote", "later-quotes-close-it"],
)
def test_unbalanced_quote_loses_only_its_line(tmp_path, write_text, output, later):
    path = _id_csv(write_text, {100: '100,"oops,0', **later})
    schema = Schema.of([Dense(name="id", dtype="int64")], labels=["label"])
    result = convert(path, tmp_path / "out", schema=schema, on_bad_rows="skip", block_size=1 << 14)
    assert (result.rows, result.skipped) == (4999, 1)
    assert [b.line for b in result.bad_rows] == [102]
    assert "unbalanced quote" in result.bad_rows[0].reason
    ids = output.table(result)["id"]
    assert 100 not in ids and ids[100:102] == [101, 102] and ids[-1] == 4999
    with pytest.raises(DataError, match=rf"{path}:102: unbalanced quote"):
        convert(path, tmp_path / "err", schema=schema)


QUOTE_CASES = [
    ('"a""b",1', False),
    ('a"b,1', False),
    ('"ab"c,1', False),
    ('1,"x', True),
    ('"a""b,1', True),
    ('1,2,"', True),
    ('"a"",b",1', False),
    ('ab",",', True),
]
QUOTE_IDS = [
    "doubled-quote",
    "quote-inside-field",
    "text-after-quote",
    "open",
    "open-doubled",
    "last",
    "escaped-then-closed",
    "literal-quote-then-open",
]


@pytest.mark.parametrize(("line", "bad"), QUOTE_CASES, ids=QUOTE_IDS)
def test_quote_balance_follows_the_csv_parser(tmp_path, write_text, line, bad):
    path = write_text(f"a,label\n{line}\n1,0\n")
    result = convert(path, tmp_path / "out", on_bad_rows="skip", header=True)
    assert [b.line for b in result.bad_rows] == ([2] if bad else [])
    assert result.rows == (1 if bad else 2)


def test_truncated_gzip_is_a_clean_error(tmp_path, capsys):
    data = gzip.compress(("label,v\n" + "".join(f"{i % 2},{i}\n" for i in range(300_000))).encode())
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(data[: len(data) * 3 // 4])
    with pytest.raises(DataError, match=rf"{path}: cannot read .*truncated or corrupt"):
        convert(path, tmp_path / "out", block_size=1 << 16)
    assert not list((tmp_path / "out").glob("part-*"))
    assert cli_main(["convert", str(path), "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tfinput: error: {path}: cannot read") and err.count("\n") == 1


def test_inputs_of_an_unfinished_output_are_refused_however_named(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("label,v\n1,2\n")
    (folder / ".tfinput-incomplete").write_text("")
    for inputs in (folder, folder / "*.csv", [folder / "a.csv"]):
        with pytest.raises(SourceError, match=r"in is an unfinished output: \.tfinput-incomp"):
            convert(inputs, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------- Parquet and TFRecord
def test_typed_names_of_parquet_and_tfrecord(small_schema, small_parquet, small_tfrecord):
    names, where = typed_names(small_parquet[0], kind="parquet", schema=small_schema)
    assert set(small_schema.columns()) <= set(names) and where == "in the Parquet schema"
    keys, where = typed_names(small_tfrecord[0], kind="tfrecord", schema=small_schema)
    assert set(small_schema.columns()) <= set(keys) and where == "keys of the first tf.Example"


def test_typed_names_of_a_file_that_is_not_parquet(tmp_path, small_schema):
    path = tmp_path / "x.parquet"
    path.write_text("label,v\n1,2\n")
    with pytest.raises(DataError, match=r"x\.parquet: not a readable Parquet file"):
        typed_names(str(path), kind="parquet", schema=small_schema)


@pytest.mark.parametrize("to", ["columnar", "parquet", "tfrecord"])
@pytest.mark.parametrize("source", ["parquet", "tfrecord"])
def test_parquet_and_tfrecord_inputs(
    tmp_path, source, to, small_schema, small_parquet, small_tfrecord, output
):
    inputs = small_parquet if source == "parquet" else small_tfrecord
    result = convert(inputs, tmp_path / "out", to=to, schema=small_schema, chunk_rows=100)
    assert (result.rows, result.input_format, result.skipped) == (1000, source, 0)
    reader = tfinput.parquet if source == "parquet" else tfinput.tfrecord
    output.assert_same_rows(output.pipeline(result), reader(inputs, small_schema))
