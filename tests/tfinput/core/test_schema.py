"""`tfinput.schema`: feature kinds, tables and labels, validation messages, lookups and
the readable JSON round trip."""

from __future__ import annotations

import json

import pytest

from tfinput import testing
from tfinput.errors import SchemaError
from tfinput.schema import MAX_INT32_VOCAB, Categorical, Dense, Label, MultiHot, Schema, Table


def test_json_round_trip_is_readable_and_hand_editable(tmp_path):
    schema = testing.small_schema()
    path = tmp_path / "schema.json"
    text = schema.to_json(path)
    assert Schema.from_json(path) == schema
    assert Schema.from_json(text) == schema
    # one feature per line, defaults omitted
    assert '{"kind": "categorical", "name": "user_id", "table": "user"}' in text
    # a hand edit: raise max_len, add a feature sharing a table
    data = json.loads(text)
    data["features"][6]["max_len"] = 9
    data["features"].append({"kind": "categorical", "name": "next_item", "table": "items"})
    edited = Schema.from_dict(data)
    assert edited.feature("history").max_len == 9
    assert {f.name for f in edited.categorical if f.table == "items"} == {
        "last_item",
        "history",
        "next_item",
    }


@pytest.mark.parametrize(
    "build, message",
    [
        (
            lambda: Table(name="t", vocabulary_size=MAX_INT32_VOCAB + 1, dim=4),
            "vocabulary_size: expected an int <= 2147483647",
        ),
        (
            lambda: Table(name="t", vocabulary_size=10, dim=4, combiner="max"),
            "combiner: expected one of",
        ),
        (lambda: MultiHot(name="m", table="t", max_len=0), "max_len: expected an int >= 1"),
        (lambda: Categorical(name="c", table="t", dtype="float32"), "dtype: expected one of"),
        (lambda: Categorical(name="c", table="t", default="x"), "default: expected an int"),
        (lambda: Categorical(name="c", table="t", default=-1), "non-negative"),
        (lambda: Dense(name="d", default=float("nan")), "default: expected a finite number"),
        (lambda: Dense(name="d", clip=(3, 1)), "clip: expected low <= high"),
        (
            lambda: Schema(features=(Categorical(name="c", table="nope"),)),
            "uses table 'nope', which is not defined",
        ),
        (lambda: Schema(features=(Dense(name="a"), Dense(name="a"))), "duplicate"),
        (lambda: Schema(features=()), "no features"),
    ],
    ids=[
        "vocab-int32",
        "combiner",
        "max_len",
        "dtype",
        "default-type",
        "default-negative",
        "nan-default",
        "clip",
        "missing-table",
        "duplicate",
        "empty",
    ],
)
def test_validation_messages(build, message):
    with pytest.raises(SchemaError, match=message):
        build()


def test_from_dict_errors_name_the_place():
    with pytest.raises(SchemaError, match=r"features\[0\]: kind must be one of"):
        Schema.from_dict({"features": [{"kind": "sparse", "name": "x"}]})
    with pytest.raises(SchemaError, match=r"features\[0\] \(x\): unknown keys \['maxlen'\]"):
        Schema.from_dict({"features": [{"kind": "dense", "name": "x", "maxlen": 3}]})
    with pytest.raises(SchemaError, match="format 'other/2' is not supported"):
        Schema.from_dict({"format": "other/2", "features": []})


def test_columns_and_views():
    schema = testing.small_schema()
    assert "history_w" in schema.columns() and schema.columns()[-1] == "label"
    assert [f.name for f in schema.multi_hot] == ["history", "tags"]
    assert len(schema.dense) == 3


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Dense(name="d", clip=(float("nan"), 1.0)), r"Dense 'd'.clip: expected.*not NaN"),
        (lambda: Dense(name="d", clip=(0.0, float("nan"))), r"Dense 'd'.clip: expected.*not NaN"),
        (
            lambda: Schema(
                features=(Categorical(name="c", table="t", default=10),),
                tables=(Table(name="t", vocabulary_size=10, dim=2),),
            ),
            r"feature 'c': default 10 is outside table 't' \(ids in \[0, 10\)\)",
        ),
        (
            lambda: MultiHot(name="m", table="t", max_len=2_000_000),
            r"MultiHot 'm'.max_len: expected an int <= 65536",
        ),
    ],
    ids=["clip-nan-low", "clip-nan-high", "default-outside-vocab", "max_len-cap"],
)
def test_validation_of_values_nobody_meant(build, message):
    with pytest.raises(SchemaError, match=message):
        build()


def test_out_of_vocabulary_default_from_json_names_the_feature():
    data = {
        "tables": [{"name": "t", "vocabulary_size": 5, "dim": 2}],
        "features": [{"kind": "categorical", "name": "c", "table": "t", "default": 7}],
    }
    with pytest.raises(SchemaError, match=r"feature 'c': default 7 is outside table 't'"):
        Schema.from_dict(data)
    data["features"][0]["out_of_range"] = "modulo"  # folded like any other id: allowed
    assert Schema.from_dict(data).feature("c").default == 7


def test_lookups_name_what_exists():
    schema = testing.small_schema()
    assert schema.table("items").vocabulary_size == 1000
    assert schema.feature("country").dtype == "string"
    with pytest.raises(
        SchemaError, match=r"no table 'nope'; tables: \['items', 'user', 'tokens'\]"
    ):
        schema.table("nope")
    with pytest.raises(SchemaError, match=r"no feature 'nope'; features: \['row_id', 'price'"):
        schema.feature("nope")


def test_of_takes_labels_by_name_and_replace_returns_a_new_schema():
    table = Table(name="t", vocabulary_size=10, dim=2)
    schema = Schema.of(
        [Dense(name="x"), Categorical(name="c", table="t")], tables=[table], labels=["y"]
    )
    assert schema.labels == (Label(name="y"),)
    assert schema.columns() == ["x", "c", "y"]
    other = schema.replace(labels=())
    assert other.labels == () and schema.labels == (Label(name="y"),)


def test_from_json_names_the_file_of_a_bad_schema(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({"features": [{"kind": "dense", "name": "x"}], "extra": 1}))
    with pytest.raises(SchemaError, match=r"schema.json: unknown top-level keys \['extra'\]"):
        Schema.from_json(path)
    path.write_text(json.dumps({"features": [{"kind": "dense", "name": "x", "clip": [2, 1]}]}))
    with pytest.raises(SchemaError, match=r"schema.json: features\[0\] \(x\): .*clip"):
        Schema.from_json(path)
    path.write_text("[1, 2]")
    with pytest.raises(SchemaError, match=r"schema\.json: expected a JSON object, got list"):
        Schema.from_json(path)


# ------------------------------------------------------------------ towers
def test_towers_round_trip_and_stay_out_of_json_when_unset(tmp_path):
    plain = testing.small_schema()
    assert '"tower"' not in plain.to_json() and "candidate_id" not in plain.to_json()
    schema = plain.with_towers(
        query=["user_id", "history"], candidate=["tags"], candidate_id="last_item"
    )
    text = schema.to_json(tmp_path / "s.json")
    assert '  "candidate_id": "last_item",' in text.splitlines()
    assert '{"kind": "categorical", "name": "user_id", "table": "user", "tower": "query"}' in text
    assert Schema.from_json(tmp_path / "s.json") == schema
    assert [f.name for f in schema.tower("query")] == ["user_id", "history"]
    assert [f.name for f in schema.tower("candidate")] == ["last_item", "tags"]
    side = schema.tower_schema("candidate")
    assert [t.name for t in side.tables] == ["items", "tokens"]
    assert side.labels == () and side.candidate_id == "last_item"
    both = schema.tower_schema()
    assert [f.name for f in both.features] == ["user_id", "last_item", "history", "tags"]
    assert both.labels == schema.labels
    # a hand-written JSON feature with a tower
    data = json.loads(text)
    data["features"][1]["tower"] = "query"  # price
    assert Schema.from_dict(data).feature("price").tower == "query"


@pytest.mark.parametrize(
    "build, message",
    [
        (
            lambda s: Dense(name="x", tower="item"),
            "Dense 'x'.tower: expected \"query\", \"candidate\" or null, got 'item'",
        ),
        (
            lambda s: s.replace(candidate_id="nope"),
            "Schema.candidate_id: expected the name of a feature, got 'nope'",
        ),
        (
            lambda s: s.with_towers(candidate=["history"], candidate_id="history"),
            "feature 'history' must be a Categorical with tower=\"candidate\"",
        ),
        (
            lambda s: s.replace(candidate_id="user_id"),
            "got Categorical with tower=None",
        ),
        (
            lambda s: s.with_towers(query=["user_id"], candidate=["user_id"]),
            "feature 'user_id' is named for both towers",
        ),
        (lambda s: s.with_towers(query=["nope"]), "Schema: no feature 'nope'"),
        (lambda s: s.tower_schema("query"), "no feature is marked for tower 'query'"),
        (
            lambda s: s.tower("items"),
            'Schema.tower: expected "query" or "candidate", got \'items\'',
        ),
    ],
    ids=[
        "bad-tower",
        "unknown-candidate-id",
        "multi-hot-candidate-id",
        "candidate-id-not-candidate-side",
        "both-towers",
        "unknown-feature",
        "empty-tower",
        "bad-tower-name",
    ],
)
def test_tower_validation_names_the_feature(build, message):
    with pytest.raises(SchemaError) as e:
        build(testing.small_schema())
    assert message in str(e.value)


def test_candidate_id_from_json_is_checked(tmp_path):
    data = testing.small_schema().to_dict()
    data["candidate_id"] = "last_item"  # not marked candidate
    with pytest.raises(SchemaError, match=r"<dict>: Schema.candidate_id: feature 'last_item'"):
        Schema.from_dict(data)


def test_a_column_read_in_two_shapes_is_refused_naming_both_features():
    tables = (Table(name="t", vocabulary_size=10, dim=4),)
    with pytest.raises(SchemaError) as e:
        Schema(
            features=(
                Categorical(name="c", table="t"),
                MultiHot(name="c_list", column="c", table="t", max_len=3),
            ),
            tables=tables,
        )
    assert str(e.value) == (
        "Schema: column 'c' is read as one value by feature 'c' and as a list of ids by "
        "feature 'c_list'; a column has one shape: give one of them its own column (column=...)"
    )
    with pytest.raises(SchemaError, match="read as a vector of 3 by feature 'x'"):
        Schema(
            features=(Dense(name="x", length=3), Categorical(name="x_id", column="x", table="t")),
            tables=tables,
        )
    # One field seen two ways, each of one value: a numeric and a categorical view.
    Schema(
        features=(Dense(name="x"), Categorical(name="x_id", column="x", table="t")), tables=tables
    )
