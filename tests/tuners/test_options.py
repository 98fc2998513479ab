"""`TuneOptions`: frozen groups, checked counts, and `tune`'s keywords mapped onto them."""

from __future__ import annotations

import dataclasses

import pytest

from tests.tuners.conftest import FAST
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError
from tfinput.options import with_keywords
from tuners import (
    ConfirmOptions,
    MeasureOptions,
    SearchOptions,
    StudyOptions,
    TuneOptions,
    tune,
)


def test_each_keyword_lands_on_the_group_that_owns_it():
    given = TuneOptions(search=SearchOptions(n_trials=7, seed=3))
    options = with_keywords(
        given, {"n_trials": 9, "storage": "x.db", "windows": 2, "breakdown": False}, what="tune"
    )
    assert options.search == SearchOptions(n_trials=9, seed=3)  # the seed kept
    assert options.study == StudyOptions(storage="x.db")
    assert options.measurement == MeasureOptions(windows=2)
    assert options.confirmation == ConfirmOptions(breakdown=False)
    assert given.search.n_trials == 7  # frozen: a new object, the given one untouched
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.search.n_trials = 1  # type: ignore[misc]


def test_a_keyword_that_is_no_field_is_refused_as_python_refuses_it():
    with pytest.raises(TypeError, match=r"^tune\(\) got an unexpected keyword argument 'trials'$"):
        with_keywords(TuneOptions(), {"trials": 3}, what="tune")


@pytest.mark.parametrize("count", ["n_trials", "max_consecutive_failures"])
def test_search_counts_are_checked_when_the_options_are_made(count):
    with pytest.raises(ConfigError, match=rf"^{count} must be >= 1, got 0$"):
        SearchOptions(**{count: 0})


def test_tune_with_an_options_object_measures_as_the_keywords_do(pipeline, tmp_path):
    options = TuneOptions(
        search=SearchOptions(n_trials=3, seed=1),
        study=StudyOptions(lock_path=str(tmp_path / "lock")),
        measurement=MeasureOptions(cpu_count=2, windows=2, window_batches=2, warmup_batches=1),
        confirmation=ConfirmOptions(
            confirm_top=1, confirm_windows=1, advise_format=False, breakdown=False
        ),
    )
    result = tune(pipeline, base=PipelineConfig(batch_size=50), options=options)
    assert sum(result.trials.values()) == 3
    trial = result.method["trial"]
    assert "1 warm-up batches excluded, 2 windows of 2 batches" in trial
    assert result.fingerprint["cpu_count"] == 2
    fields = {
        f.name
        for group in (SearchOptions, StudyOptions, MeasureOptions, ConfirmOptions)
        for f in dataclasses.fields(group)
    }
    assert set(FAST) <= fields  # the suite's keyword shortcuts are all fields
