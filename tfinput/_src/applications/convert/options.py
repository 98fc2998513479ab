"""What `convert` and `convert_ray` take besides the inputs and the output directory:
one frozen `ConvertOptions` of three small groups, and `RayOptions` for Ray.

    options = ConvertOptions(
        read=ReadOptions(delimiter="\\t", header=False),
        columns=ColumnOptions(preset="criteo"),
        write=WriteOptions(to="columnar", rows_per_file=500_000),
    )
    convert("day_0.gz", "out/", options=options)

Every field is also a keyword of `convert` (``convert(..., to="columnar")``), which
overrides the same field of ``options``. The values are checked when a conversion
starts (`convert` raises `ConfigError` naming the argument).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tfinput._src.applications.convert.readers import BLOCK_SIZE

if TYPE_CHECKING:
    from tfinput._src.core.schema import Schema

__all__ = [
    "ColumnOptions",
    "ConvertOptions",
    "RayOptions",
    "ReadOptions",
    "SPLIT_BYTES",
    "WriteOptions",
]

#: Bytes of uncompressed CSV per Ray task (pieces start and end at line breaks).
SPLIT_BYTES = 32 << 20


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadOptions:
    """How the inputs are read.

    Attributes:
      input_format: ``auto`` (by extension: ``.parquet``/``.pq`` is Parquet,
        ``.tfrecord[s]``/``.tfr`` (optionally ``.gz``/``.zz``) is TFRecord, anything
        else CSV/TSV), ``csv``, ``parquet`` or ``tfrecord``.
      delimiter: Field delimiter; None sniffs it from the first lines (CSV only).
      header: ``"auto"`` (sniffed), True or False (CSV only).
      column_names: Names of the columns, for files without a header (CSV only).
      list_columns: ``{column: item delimiter}`` for multi-valued CSV columns, for
        example ``{"genres": "|"}``. Multi-hot columns of a schema default to ``|``.
      on_bad_rows: ``error`` (raise at the first bad row) or ``skip`` (leave bad rows
        out and count them).
      block_size: Bytes of CSV parsed at a time. Memory grows with it; a record must
        fit in one block; smaller blocks mean more Python work per byte.
    """

    input_format: str = "auto"
    delimiter: str | None = None
    header: bool | str = "auto"
    column_names: Sequence[str] | None = None
    list_columns: Mapping[str, str] | None = None
    on_bad_rows: str = "error"
    block_size: int = BLOCK_SIZE


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColumnOptions:
    """What the columns are: a given schema, a preset, or inferred from a sample.

    Attributes:
      schema: The schema to write; its source columns must exist in the input.
        Overrides ``preset`` kinds and inference.
      preset: ``criteo`` or ``movielens`` (see the `tfinput.convert` docstring).
      label: The label column when inferring (default: every column named one of
        `LABEL_NAMES`, in any case).
      hash_buckets: Table rows for hashed string columns (and folded int id tables)
        of presets (default 100,000) and of inferred schemas (default: 4 x distinct
        values seen, rounded up to a power of two, as ``tfinput schema infer``).
      infer_rows: Rows sampled from the first input to infer kinds (no schema or
        preset).
    """

    schema: Schema | None = None
    preset: str | None = None
    label: str | None = None
    hash_buckets: int | None = None
    infer_rows: int = 10_000


@dataclasses.dataclass(frozen=True, kw_only=True)
class WriteOptions:
    """What is written.

    Attributes:
      to: ``parquet`` (what `tfinput.parquet` reads), ``tfrecord``
        (``tf.train.Example`` records, for `tfinput.tfrecord`) or ``columnar``
        (pre-batched columnar records plus ``manifest.json``, for `tfinput.columnar`:
        the fastest to read, and native).
      rows_per_file: Rows per output file (columnar: rounded up to whole chunks).
        Several files let readers interleave and shard across input pipelines.
      chunk_rows: Columnar only: rows per record. Batch sizes that are a multiple of
        it are assembled without per-row work; smaller chunks shuffle at a finer grain.
      overwrite: Replace the ``part-*`` files, ``schema.json`` and ``manifest.json``
        of the output directory (otherwise it must be empty). They are replaced when
        the new output is complete; until then the previous one stays whole.
    """

    to: str = "parquet"
    rows_per_file: int = 1_000_000
    chunk_rows: int = 1024
    overwrite: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvertOptions:
    """Everything `convert` takes besides the inputs and the output directory.

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
