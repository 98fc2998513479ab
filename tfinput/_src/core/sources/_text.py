"""Message helpers of the sources."""

from __future__ import annotations

import difflib
from typing import Any

__all__ = ["did_you_mean", "first_line"]


def did_you_mean(key: str, candidates: Any) -> str:
    """``"; did you mean [...]?"`` with the close matches of ``key``, or ``""``."""
    close = difflib.get_close_matches(key, list(candidates), n=3)
    return f"; did you mean {close}?" if close else ""


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type name when empty)."""
    text = getattr(e, "message", None) or str(e)
    return text.strip().splitlines()[0] if text.strip() else type(e).__name__
