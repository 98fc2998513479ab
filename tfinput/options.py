"""Options objects: the check of their count settings."""

from tfinput._src.core.options import check_counts as check_counts
