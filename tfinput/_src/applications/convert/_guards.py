"""The quote guard, now in `tfinput.formats.csv` (re-exported for convert's code)."""

from tfinput._src.core.formats.csv import QuoteGuard, unclosed_quote

__all__ = ["QuoteGuard", "unclosed_quote"]
