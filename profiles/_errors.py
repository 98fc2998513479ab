"""The exceptions `profiles` raises on purpose.

Messages say what is missing or wrong and how to capture a usable trace, so that a
user never has to read a traceback to know what to do next.
"""

from __future__ import annotations

from tfinput.errors import TfinputError

__all__ = ["ProfileError", "XprofLayoutError"]


class ProfileError(TfinputError):
    """A profile cannot be captured, or a log directory holds no usable trace."""


class XprofLayoutError(ProfileError):
    """xprof's output no longer has the tables or columns this package was tested with.

    Raised when a newer (or older) xprof renames or drops a column that `profiles`
    reads; the message names the installed xprof version and `TESTED_XPROF`.
    """
