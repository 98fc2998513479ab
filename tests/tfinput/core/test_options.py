"""`with_keywords` and `check_counts`: flat keywords onto nested frozen options."""

from __future__ import annotations

import dataclasses

import pytest

from tfinput.errors import ConfigError
from tfinput.options import check_counts, with_keywords


@dataclasses.dataclass(frozen=True)
class Inner:
    a: int = 1
    b: str = "x"


@dataclasses.dataclass(frozen=True)
class Middle:
    inner: Inner = dataclasses.field(default_factory=Inner)
    c: float = 0.5


@dataclasses.dataclass(frozen=True)
class Outer:
    middle: Middle = dataclasses.field(default_factory=Middle)
    other: Inner | None = None  # None is a value, not a group
    d: bool = False


def test_keywords_land_on_their_fields_at_any_depth():
    given = Outer(middle=Middle(inner=Inner(b="kept")))
    got = with_keywords(given, {"a": 5, "c": 2.0, "d": True, "other": Inner()}, what="f")
    assert got == Outer(middle=Middle(inner=Inner(a=5, b="kept"), c=2.0), other=Inner(), d=True)
    assert given.middle.inner.a == 1  # a new object; the given one untouched
    assert with_keywords(given, {}, what="f") is given


def test_a_keyword_that_names_no_field_is_a_type_error_worded_as_python_words_it():
    with pytest.raises(TypeError, match=r"^f\(\) got an unexpected keyword argument 'z'$"):
        with_keywords(Outer(), {"a": 1, "z": 2}, what="f")


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_counts_below_one_or_not_ints_are_refused_with_their_name(bad):
    with pytest.raises(ConfigError, match=rf"^tune: windows must be >= 1, got {bad!r}$"):
        check_counts(what="tune", windows=bad)
    check_counts(windows=None, n=1)  # None is not checked
