"""profiles._xplane (its errors): the exceptions profiles raises, caught as tfinput errors, with
messages that say what is wrong and how to capture a usable trace."""

from __future__ import annotations

import pytest

from profiles import ProfileError, XprofLayoutError, analyze, capture
from profiles._xprof import TESTED_XPROF, check_layout, xprof_version
from tfinput.errors import TfinputError


@pytest.mark.parametrize(
    ("error", "base"),
    [(ProfileError, TfinputError), (XprofLayoutError, ProfileError)],
    ids=["profile-error", "layout-error"],
)
def test_hierarchy(error, base):
    assert issubclass(error, base)


def test_missing_logdir_is_a_tfinput_error_naming_the_path(tmp_path):
    missing = tmp_path / "no-such-run"
    with pytest.raises(TfinputError) as err:
        analyze(missing)
    assert type(err.value) is ProfileError
    assert str(err.value).startswith(f"{missing} does not exist.")
    assert "tfinput profile" in str(err.value)


def test_layout_error_names_both_xprof_versions():
    with pytest.raises(ProfileError) as err:
        check_layout({})
    assert type(err.value) is XprofLayoutError
    message = str(err.value)
    assert f"xprof {xprof_version()} output changed: no output for tool" in message
    assert TESTED_XPROF in message


def test_capture_of_an_exhausted_pipeline_is_a_profile_error(tmp_path):
    import tensorflow as tf

    with pytest.raises(ProfileError, match="ran out after 1 batches during the warm-up"):
        capture(tf.data.Dataset.range(1), logdir=tmp_path, steps=1, warmup=2)
