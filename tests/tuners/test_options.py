"""`TuneOptions`: frozen groups, checked counts, and `tune`'s signature, which names what
it takes (a group's field is no keyword of `tune`)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from tests.tuners.conftest import FAST
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError
from tuners import (
    ConfirmOptions,
    MeasureOptions,
    SearchOptions,
    StudyOptions,
    TuneOptions,
    tune,
)

GROUPS = (SearchOptions, StudyOptions, MeasureOptions, ConfirmOptions)


def test_tune_names_what_it_takes_and_no_field_twice():
    parameters = inspect.signature(tune).parameters
    assert list(parameters) == [
        "pipeline",
        *("step", "space", "base", "current", "n_trials", "timeout"),
        *("options", "progress", "verbose"),
    ]
    assert all(p.kind is not p.VAR_KEYWORD for p in parameters.values())
    fields = {f.name for group in GROUPS for f in dataclasses.fields(group)}
    assert not fields & set(parameters)  # each setting in one place


def test_a_field_of_a_group_given_to_tune_is_refused_as_python_refuses_it(pipeline):
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'windows'"):
        tune(pipeline, windows=2)  # type: ignore[call-arg]


def test_the_options_are_frozen_groups():
    given = TuneOptions(search=SearchOptions(seed=3))
    changed = dataclasses.replace(given, study=StudyOptions(storage="x.db"))
    assert given.study == StudyOptions() and changed.search == SearchOptions(seed=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.search.seed = 1  # type: ignore[misc]


def test_search_counts_are_checked_when_the_options_are_made():
    with pytest.raises(ConfigError, match=r"^max_consecutive_failures must be >= 1, got 0$"):
        SearchOptions(max_consecutive_failures=0)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"confirm_top": 0}, "confirm_top must be >= 1, got 0"),
        ({"confirm_windows": 0}, "confirm_windows must be >= 1, got 0"),
        ({"target_rate": 0}, "target_rate must be a positive number of examples/s, got 0"),
        (
            {"target_rate": float("nan")},
            "target_rate must be a positive number of examples/s, got nan",
        ),
    ],
    ids=["no-top-config", "no-round", "zero-rate", "nan-rate"],
)
def test_confirmation_values_are_checked_when_the_options_are_made(fields, message):
    with pytest.raises(ConfigError) as raised:
        ConfirmOptions(**fields)
    assert str(raised.value) == message


def test_tune_measures_as_its_options_object_asks(pipeline, tmp_path):
    options = TuneOptions(
        search=SearchOptions(seed=1),
        study=StudyOptions(lock_path=str(tmp_path / "lock")),
        measurement=MeasureOptions(cpu_count=2, windows=2, window_batches=2, warmup_batches=1),
        confirmation=ConfirmOptions(
            confirm_top=1, confirm_windows=1, advise_format=False, breakdown=False
        ),
    )
    result = tune(pipeline, base=PipelineConfig(batch_size=50), n_trials=3, options=options)
    assert sum(result.trials.values()) == 3
    trial = result.method["trial"]
    assert "1 warm-up batches excluded, 2 windows of 2 batches" in trial
    assert result.fingerprint["cpu_count"] == 2
    fields = {f.name for group in GROUPS for f in dataclasses.fields(group)}
    assert set(FAST) <= fields  # the suite's shortcuts are all fields of the groups
