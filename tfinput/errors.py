"""The exceptions tfinput raises for bad input.

Every message names what was being read (file, feature, config field) and what was
expected versus what was found, so a user can fix the data or the schema without
reading tfinput's source.
"""

from __future__ import annotations

__all__ = [
    "TfinputError",
    "ConfigError",
    "SchemaError",
    "SourceError",
    "DataError",
    "ResumeError",
    "ServiceError",
]


class TfinputError(Exception):
    """Base class of every error tfinput raises on purpose."""


class ConfigError(TfinputError, ValueError):
    """A pipeline, tuner or profile configuration value is invalid."""


class SchemaError(TfinputError, ValueError):
    """A schema is malformed, or does not match the files it is applied to."""


class SourceError(TfinputError, ValueError):
    """Input files cannot be found or opened (empty glob, missing file, no records)."""


class DataError(TfinputError, ValueError):
    """A record's content breaks the schema (bad id, NaN, wrong type, corrupt bytes)."""


class ResumeError(TfinputError, RuntimeError):
    """An input position cannot be saved (a source tf.data cannot checkpoint) or a
    saved one cannot be restored (another pipeline's, or not a tfinput state)."""


class ServiceError(TfinputError, RuntimeError):
    """A read through tf.data service stalled (no batch within the bound: typically a
    worker died and was not restarted on its address)."""
