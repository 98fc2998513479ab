"""The exceptions tfinput raises for bad input."""

from tfinput._src.core.errors import ConfigError as ConfigError
from tfinput._src.core.errors import DataError as DataError
from tfinput._src.core.errors import OutputError as OutputError
from tfinput._src.core.errors import ResumeError as ResumeError
from tfinput._src.core.errors import SchemaError as SchemaError
from tfinput._src.core.errors import ServiceError as ServiceError
from tfinput._src.core.errors import SourceError as SourceError
from tfinput._src.core.errors import TfinputError as TfinputError
from tfinput._src.core.errors import clean_error as clean_error
