"""What this installation is made of: versions and optional parts, for bug reports."""

from tfinput._src.applications.doctor import Part as Part
from tfinput._src.applications.doctor import Report as Report
from tfinput._src.applications.doctor import report as report
from tfinput._src.applications.doctor import summary as summary
