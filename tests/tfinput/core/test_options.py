"""`check_counts`: the count settings of the options objects."""

from __future__ import annotations

import pytest

from tfinput.errors import ConfigError
from tfinput.options import check_counts


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_counts_below_one_or_not_ints_are_refused_with_their_name(bad):
    with pytest.raises(ConfigError, match=rf"^tune: windows must be >= 1, got {bad!r}$"):
        check_counts(what="tune", windows=bad)
    check_counts(windows=None, n=1)  # None is not checked
