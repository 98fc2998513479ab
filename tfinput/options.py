"""Options objects: small frozen dataclasses, and their flat keywords."""

from tfinput._src.core.options import check_counts as check_counts
from tfinput._src.core.options import with_keywords as with_keywords
