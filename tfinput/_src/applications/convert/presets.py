"""Conversion presets: the column names and schemas of known data sets."""

from __future__ import annotations

from typing import Any

from tfinput._src.core.errors import ConfigError
from tfinput._src.core.formats.csv import KNOWN_COLUMNS
from tfinput._src.core.schema import Categorical, Dense, Label, MultiHot, Schema, Table

__all__ = ["PRESETS", "PRESET_COLUMNS", "PRESET_LISTS", "preset_schema"]

PRESETS = ("criteo", "movielens")


def preset_schema(name: str, *, hash_buckets: int = 100_000, dim: int = 16) -> Schema:
    """The schema of a conversion preset (see the `tfinput.convert` docstring).

    Args:
      name: ``criteo`` or ``movielens``.
      hash_buckets: Rows of the tables of hashed high-cardinality string columns.
      dim: Embedding dimension of every table.

    Returns:
      The preset's schema.

    Raises:
      ConfigError: unknown preset.
    """
    if name == "criteo":
        features: list[Any] = [
            Dense(name=f"I{i}", dtype="int64", clip=(0.0, None), log1p=True) for i in range(1, 14)
        ]
        tables = [Table(name=f"C{i}", vocabulary_size=hash_buckets, dim=dim) for i in range(1, 27)]
        features += [
            Categorical(name=f"C{i}", table=f"C{i}", dtype="string", default="")
            for i in range(1, 27)
        ]
        return Schema(
            features=tuple(features),
            tables=tuple(tables),
            labels=(Label(name="label", dtype="int64"),),
        )
    if name == "movielens":
        tables = (
            Table(name="user_id", vocabulary_size=300_000, dim=dim),
            Table(name="movie_id", vocabulary_size=300_000, dim=dim),
            Table(name="title", vocabulary_size=hash_buckets, dim=dim),
            Table(name="genres", vocabulary_size=16_384, dim=dim),
            Table(name="gender", vocabulary_size=1_024, dim=dim),
            Table(name="age", vocabulary_size=100, dim=dim),
            Table(name="occupation", vocabulary_size=21, dim=dim),
            Table(name="zip", vocabulary_size=hash_buckets, dim=dim),
        )
        features = [
            Categorical(name="user_id", table="user_id"),
            Categorical(name="movie_id", table="movie_id"),
            Categorical(name="title", table="title", dtype="string", default=""),
            MultiHot(name="genres", table="genres", max_len=6, dtype="string"),
            Categorical(name="gender", table="gender", dtype="string", default=""),
            Categorical(name="age", table="age", default=0),
            Categorical(name="occupation", table="occupation", default=0),
            Categorical(name="zip", table="zip", dtype="string", default=""),
        ]
        return Schema(features=tuple(features), tables=tables, labels=(Label(name="rating"),))
    raise ConfigError(f"convert: unknown preset {name!r}; expected one of {list(PRESETS)}")


PRESET_COLUMNS: dict[str, list[str]] = KNOWN_COLUMNS
PRESET_LISTS: dict[str, dict[str, str]] = {"criteo": {}, "movielens": {"genres": "|"}}
