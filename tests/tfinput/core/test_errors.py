"""`tfinput.errors`: one small hierarchy; each error is raised where its kind of bad input
is met, is a `ValueError`, and is importable from ``tfinput``."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tfinput import errors
from tfinput.config import PipelineConfig
from tfinput.schema import Categorical, Dense, Label, Schema, Table

KINDS = [errors.ConfigError, errors.SchemaError, errors.SourceError, errors.DataError]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_every_error_is_a_tfinput_error_and_a_value_error(kind):
    assert issubclass(kind, errors.TfinputError) and issubclass(kind, ValueError)
    assert getattr(tfinput, kind.__name__) is kind
    assert kind.__name__ in tfinput.__all__
    # one `except` catches any of them, without catching unrelated errors
    with pytest.raises(errors.TfinputError, match=r"^the message$"):
        raise kind("the message")
    assert not issubclass(errors.TfinputError, (KeyError, TypeError, RuntimeError))


def _bad_data_pipeline():
    schema = Schema(
        features=(Dense(name="x"), Categorical(name="c", table="t")),
        tables=(Table(name="t", vocabulary_size=4, dim=2),),
        labels=(Label(name="y"),),
    )
    ds = tf.data.Dataset.from_tensor_slices(
        {"x": np.zeros(4, np.float32), "c": np.array([0, 1, 7, 2]), "y": np.zeros(4, np.float32)}
    )
    return tfinput.wrap(ds, schema)


@pytest.mark.parametrize(
    "kind, make, message",
    [
        (errors.ConfigError, lambda tmp: PipelineConfig(batch_size=0), "batch_size"),
        (
            errors.SchemaError,
            lambda tmp: Dense(name="d", clip=(3, 1)),
            "Dense 'd'.clip: expected low <= high",
        ),
        (
            errors.SourceError,
            lambda tmp: tfinput.tfrecord(
                str(tmp / "none-*.tfrecord"), tfinput.testing.small_schema()
            ).build(PipelineConfig(batch_size=2)),
            "none-*.tfrecord' matches no files",
        ),
        (
            errors.DataError,
            lambda tmp: list(_bad_data_pipeline().iterate(PipelineConfig(batch_size=4))),
            "feature 'c': id out of range; expected ids in [0, 4) (table 't')",
        ),
    ],
    ids=["config", "schema", "source", "data"],
)
def test_each_error_is_raised_for_its_kind_of_bad_input(tmp_path, kind, make, message):
    with pytest.raises(kind) as error:
        make(tmp_path)
    assert message in str(error.value)


def test_without_locals_lets_go_of_what_the_failed_frames_held():
    import traceback
    import weakref

    from tfinput._src.core.errors import without_locals

    class Resource:
        pass

    refs = []

    def inner(resource):
        raise ValueError("inner")

    def outer():
        resource = Resource()
        refs.append(weakref.ref(resource))
        try:
            inner(resource)
        except ValueError as e:
            raise RuntimeError("outer") from e

    try:
        outer()
    except RuntimeError as e:
        error = e
    (held,) = refs
    assert held() is not None  # the traceback's frames keep it alive
    assert without_locals(error) is error
    assert held() is None  # deleted at once, both frames cleared (no collection needed)
    assert "inner" in "".join(traceback.format_exception(error))  # the lines stay
