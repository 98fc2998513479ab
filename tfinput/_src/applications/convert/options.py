"""The settings of a conversion grouped as `tfinput convert`'s flags map onto them: one
frozen `ConvertOptions` of three small groups, and `RayOptions` for ``--engine ray``.

    options = ConvertOptions(
        read=ReadOptions(delimiter="\\t", header=False),
        columns=ColumnOptions(preset="criteo"),
        write=WriteOptions(to="columnar", rows_per_file=500_000),
    )
    convert_options("day_0.gz", "out/", options)

`tfinput.convert.convert` takes the same settings as keywords (its docstring says what
each does) and groups them so. The values are checked when a conversion starts (a
`ConfigError` naming the argument).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tfinput._src.core.formats.csv import BLOCK_SIZE

if TYPE_CHECKING:
    from tfinput._src.core.schema import Schema

#: Bytes of uncompressed CSV per Ray task (pieces start and end at line breaks).
SPLIT_BYTES = 32 << 20


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadOptions:
    """How the inputs are read: ``input_format``, ``delimiter``, ``header``,
    ``column_names``, ``list_columns``, ``on_bad_rows`` and ``block_size``, as
    `tfinput.convert.convert` takes them."""

    input_format: str = "auto"
    delimiter: str | None = None
    header: bool | str = "auto"
    column_names: Sequence[str] | None = None
    list_columns: Mapping[str, str] | None = None
    on_bad_rows: str = "error"
    block_size: int = BLOCK_SIZE


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColumnOptions:
    """What the columns are: a given ``schema``, a ``preset``, or inferred from a sample
    (``label``, ``hash_buckets``, ``infer_rows``), as `tfinput.convert.convert` takes them."""

    schema: Schema | None = None
    preset: str | None = None
    label: str | None = None
    hash_buckets: int | None = None
    infer_rows: int = 10_000


@dataclasses.dataclass(frozen=True, kw_only=True)
class WriteOptions:
    """What is written: ``to``, ``rows_per_file``, ``chunk_rows`` and ``overwrite``, as
    `tfinput.convert.convert` takes them."""

    to: str = "parquet"
    rows_per_file: int = 1_000_000
    chunk_rows: int = 1024
    overwrite: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvertOptions:
    """Everything `convert_options` takes besides the inputs and the output directory.

    Attributes:
      read: `ReadOptions`: the input format, CSV layout and bad-row policy.
      columns: `ColumnOptions`: the schema, preset or inference.
      write: `WriteOptions`: the output format and file sizes.
    """

    read: ReadOptions = dataclasses.field(default_factory=ReadOptions)
    columns: ColumnOptions = dataclasses.field(default_factory=ColumnOptions)
    write: WriteOptions = dataclasses.field(default_factory=WriteOptions)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RayOptions:
    """Where and how `convert_ray` runs.

    Attributes:
      ray_address: The Ray cluster to connect to (``ray.init(address=...)``, for
        example ``auto`` or ``ray://head:10001``); None starts a local Ray instance,
        unless Ray is already initialized in this process (then that one is used).
      num_cpus: CPUs of the local Ray instance started here, and at most that many
        tasks at once on a cluster; None: all of them.
      split_bytes: Bytes of uncompressed CSV per task.
    """

    ray_address: str | None = None
    num_cpus: int | None = None
    split_bytes: int = SPLIT_BYTES
