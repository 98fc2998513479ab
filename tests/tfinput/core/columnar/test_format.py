"""`tfinput._src.core.columnar.format`: stored columns, record keys and checksums."""

from __future__ import annotations

import pytest

import tfinput
from tfinput._src.core.columnar.format import (
    Column,
    chunk_digest,
    payload_check,
    payload_keys,
    storage_columns,
)
from tfinput.errors import SchemaError


def test_storage_columns_of_the_small_schema(small_schema):
    columns = storage_columns(small_schema)
    assert [c.name for c in columns] == list(dict.fromkeys(small_schema.columns()))
    described = {c.name: c.describe() for c in columns}
    assert described["embedding"] == "fixed float32[3]"
    assert described["history"] == "list int64"
    assert described["tags"] == "list string"
    assert described["label"] == "fixed float32"


def test_column_keys_and_json_form():
    vec = Column(name="v", layout="fixed", dtype="float32", width=4)
    lst = Column(name="h", layout="list", dtype="int64")
    assert (vec.keys, lst.keys) == (("v",), ("h", "h@lengths"))
    assert vec.to_dict() == {"name": "v", "layout": "fixed", "dtype": "float32", "width": 4}
    assert lst.to_dict() == {"name": "h", "layout": "list", "dtype": "int64"}
    assert payload_keys([vec, lst]) == ["v", "h", "h@lengths"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(layout="ragged", dtype="int64"), "column 'c': layout must be 'fixed' or 'list'"),
        (dict(layout="fixed", dtype="int32"), "column 'c': dtype must be float32, int64 or"),
    ],
    ids=["layout", "dtype"],
)
def test_column_validation(kwargs, message):
    with pytest.raises(SchemaError, match=message):
        Column(name="c", **kwargs)


def test_reserved_column_names_are_rejected():
    schema = tfinput.Schema.of([tfinput.Dense(name="@rows")], labels=["label"])
    with pytest.raises(SchemaError, match="column name '@rows' is reserved"):
        storage_columns(schema)


def test_one_column_read_with_two_layouts_is_refused():
    # Two shapes: the schema itself refuses it.
    with pytest.raises(SchemaError, match="column 'x' is read as one value by feature 'a' and"):
        tfinput.Schema.of(
            [tfinput.Dense(name="a", column="x"), tfinput.Dense(name="b", column="x", length=2)],
            labels=["label"],
        )
    # One value each, stored two ways (float and id): the columnar layout refuses it.
    schema = tfinput.Schema.of(
        [tfinput.Dense(name="a", column="x"), tfinput.Categorical(name="b", column="x", table="t")],
        tables=[tfinput.Table(name="t", vocabulary_size=10, dim=4)],
        labels=["label"],
    )
    with pytest.raises(SchemaError, match="column 'x' is read by feature 'a' as fixed float32 and"):
        storage_columns(schema)


def test_checksums_are_eight_bytes_per_value_and_change_with_the_data():
    check = payload_check([b"abc", b"", b"xyz"])
    assert len(check) == 24 and check[:8] != check[16:]
    assert payload_check([b"abc", b"", b"xyz"]) == check
    digest = chunk_digest(check)
    assert len(digest) == 16 and int(digest, 16) >= 0
    assert chunk_digest(payload_check([b"abd", b"", b"xyz"])) != digest
