"""`tfinput._src.applications.convert.columns`: which input columns a schema reads, and how each is converted."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tfinput._src.applications.convert.columns import Column, match_columns, plan_columns
from tfinput.errors import SchemaError
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema, Table

TABLES = (Table(name="t", vocabulary_size=50, dim=4),)


def test_plan_of_every_feature_kind():
    schema = Schema(
        features=(
            Dense(name="vec", length=3),
            Categorical(name="item", table="t"),
            Categorical(name="city", table="t", dtype="string", default=""),
            MultiHot(name="hist", table="t", max_len=4, weights="hist_w"),
            MultiHot(name="folded", table="t", max_len=2, out_of_range="modulo"),
        ),
        tables=TABLES,
        labels=(Label(name="label"),),
    )
    plan = plan_columns(schema, {"hist": ";"})
    assert list(plan) == ["vec", "item", "city", "hist", "hist_w", "folded", "label"]
    vec, item, city, hist, weights, folded, label = plan.values()
    assert (vec.kind, vec.is_list, vec.fixed_len, vec.finite) == ("float32", True, 3, True)
    assert (item.kind, item.required, item.is_id, item.vocab) == ("int64", True, True, 50)
    assert (city.kind, city.required, city.is_id) == ("string", False, False)
    assert (hist.is_list, hist.delimiter, hist.is_id) == (True, ";", True)
    assert (weights.kind, weights.is_list, weights.finite, weights.feature) == (
        "float32",
        True,
        True,
        "hist",
    )
    assert (folded.is_id, folded.vocab, folded.delimiter) == (False, None, "|")  # modulo folds
    assert (label.required, label.finite) == (True, True)


def test_a_column_read_twice_appears_once_and_is_required_if_either_needs_it():
    schema = Schema(
        features=(
            Categorical(name="a", table="t", column="x", default=0),
            Categorical(name="b", table="t", column="x"),
        ),
        tables=TABLES,
        labels=(Label(name="label"),),
    )
    plan = plan_columns(schema, {})
    assert list(plan) == ["x", "label"] and plan["x"].required


def test_a_column_read_with_two_types_is_a_schema_error():
    schema = Schema(
        features=(Dense(name="a", column="x"), Categorical(name="b", table="t", column="x")),
        tables=TABLES,
        labels=(Label(name="label"),),
    )
    with pytest.raises(SchemaError, match="column 'x' is used by features 'a' and 'b' with"):
        plan_columns(schema, {})


def test_match_columns_returns_the_dropped_columns():
    plan = plan_columns(Schema.of([Dense(name="v")], labels=["label"]), {})
    names = ["ts", "v", "label", "note"]
    assert match_columns(plan, names=names, names_from="header", path="in.csv") == ("ts", "note")


def test_match_columns_names_the_missing_column_and_a_close_match():
    plan = plan_columns(Schema.of([Dense(name="price")], labels=["label"]), {})
    with pytest.raises(SchemaError) as err:
        match_columns(plan, names=["prices", "label"], names_from="as in the header", path="a.csv")
    assert str(err.value) == (
        "a.csv: the schema needs column(s) ['price'] which the input does not have; "
        "columns (as in the header): ['prices', 'label']; 'price' -> did you mean 'prices'?"
    )


@pytest.mark.parametrize(
    ("kind", "is_list", "arrow"),
    [
        ("float32", False, pa.float32()),
        ("int64", True, pa.list_(pa.int64())),
        ("string", False, pa.string()),
    ],
)
def test_arrow_type(kind, is_list, arrow):
    assert Column(name="c", kind=kind, is_list=is_list).arrow_type == arrow
