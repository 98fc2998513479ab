"""`tfinput._src.applications.convert.run`: bad rows raised or counted, and the `ConvertResult`."""

from __future__ import annotations

import json

import pytest

from tfinput._src.applications.convert.run import BadRowLog
from tfinput.convert import MAX_REPORTED, BadRow, convert
from tfinput.errors import DataError
from tfinput.schema import Dense, Schema


@pytest.mark.parametrize(
    ("unit", "text"),
    [("line", "in.csv:7: too short"), ("row", "in.parquet: row 7: too short")],
)
def test_bad_row_names_file_and_line_or_row(unit, text):
    path = "in.csv" if unit == "line" else "in.parquet"
    assert str(BadRow(path=path, line=7, reason="too short", unit=unit)) == text


def test_error_policy_raises_at_the_first_bad_row_with_the_way_out():
    log = BadRowLog(on_bad_rows="error", unit="row")
    with pytest.raises(DataError) as err:
        log.add("a.parquet", 3, "column 'x': value nan is not a finite number")
    assert str(err.value) == (
        "a.parquet: row 3: column 'x': value nan is not a finite number (pass "
        "on_bad_rows='skip' / --on-bad-rows skip to leave bad rows out and count them)"
    )


def test_skip_policy_counts_every_bad_row_and_keeps_the_first_ones():
    log = BadRowLog(on_bad_rows="skip", unit="line")
    for line in range(2, MAX_REPORTED + 12):
        log.add("in.csv", line, "bad")
    assert log.skipped == MAX_REPORTED + 10
    assert [b.line for b in log.reported] == list(range(2, MAX_REPORTED + 2))


def test_skip_policy_counts_bad_rows_with_line_numbers(tmp_path, write_text, output):
    text = "a,b,label\n1,2,0\n3,4\n\n5,x,1\n6,7,1,1\n8,9,0\n10,11"
    schema = Schema.of([Dense(name="a", dtype="int64"), Dense(name="b")], labels=["label"])
    result = convert(write_text(text), tmp_path / "out", schema=schema, on_bad_rows="skip")
    assert (result.rows, result.skipped, result.blank_lines) == (2, 4, 1)
    assert [b.line for b in result.bad_rows] == [3, 5, 6, 8]
    assert "value 'x' is not a valid float32" in result.bad_rows[1].reason
    assert output.table(result)["a"] == [1, 8]


def test_result_to_dict_is_the_json_summary(tmp_path, write_text):
    path = write_text("label,v,extra\n1,2,x\n1,y,z\n")
    result = convert(
        path,
        tmp_path / "out",
        schema=Schema.of([Dense(name="v")], labels=["label"]),
        on_bad_rows="skip",
    )
    data = json.loads(json.dumps(result.to_dict()))
    assert data == {
        "format": "parquet",
        "rows": 1,
        "files": 1,
        "paths": [str(tmp_path / "out" / "part-00000-of-00001.parquet")],
        "schema_path": str(tmp_path / "out" / "schema.json"),
        "skipped": 1,
        "bad_rows": [
            {
                "path": str(path),
                "line": 3,
                "reason": "column 'v': value 'y' is not a valid float32",
                "unit": "line",
            }
        ],
        "blank_lines": 0,
        "dropped_columns": ["extra"],
        "delimiter": ",",
        "header": True,
        "input_format": "csv",
        "manifest_path": None,
    }
