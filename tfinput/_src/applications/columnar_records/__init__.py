"""Columnar pre-batched records: a storage layout read at near memory speed, natively.

    tfinput convert data/*.parquet --to columnar --out data/criteo-col   # or from CSV/TFRecord
    pipeline = tfinput.columnar("data/criteo-col")                       # schema from manifest
    ds = pipeline.build(tfinput.PipelineConfig(batch_size=4096))

Why: parsing ``tf.train.Example`` costs about one core per 100-150k Criteo-like
examples/s (every value of every row is a protobuf field), and a Python Parquet reader
cannot run on tf.data service workers. This layout keeps TFRecord files (sharding,
interleave, tf.data service and every file system TensorFlow reads) but stores a
*chunk* of rows per record, column by column:

- **Record** = one serialized ``tf.train.Example`` holding ``chunk_rows`` rows
  (default 1024; the last chunk of a data set may be shorter). Every fixed-width
  column is ONE bytes value: the raw little-endian array (``float32``/``int64``,
  ``[rows]`` or ``[rows, length]`` row-major). A list column is two bytes values: the
  flat values and the ``int32`` row lengths (key ``<column>@lengths``). String columns
  keep one ``bytes_list`` entry per value (the rare case; they stay native too). Meta
  keys: ``@rows`` (row count), ``@format`` (format version) and ``@check`` (an 8-byte
  FarmHash64 fingerprint, `tf.fingerprint`, of every payload value, in column order).
- **Files** ``part-00000-of-0000N.tfcol``: TFRecord framing (each record also has
  TFRecord's own CRC32C), ``rows_per_file`` rounded up to whole chunks, so only the
  very last chunk of a conversion can be partial.
- **Manifest** ``manifest.json`` beside the files: format version, schema, column
  layouts, chunk size, and per file its rows, bytes, record offsets and one digest per
  chunk (the fingerprint of the chunk's ``@check`` value).

Reading (`ColumnarSource`) uses native ops only: ``TFRecordDataset`` ->
``tf.io.parse_example`` of a handful of scalar string features -> ``tf.io.decode_raw``
-> ``tf.RaggedTensor.from_row_lengths``; `tfinput.graph.find_python_ops` proves it and
`tfinput.service.distribute` runs it on tf.data service workers.

Batch assembly. When ``batch_size`` is a multiple of ``chunk_rows`` (``k`` chunks per
batch), the reader batches ``k`` serialized chunks and decodes them in one vectorized
step: no per-row work at all. Any other batch size works too, at a cost: chunks are
decoded in groups and cut into batches with ``Dataset.rebatch``, which moves list
columns row by row (slower end to end: benchmarks/RESULTS.md). Choose ``chunk_rows`` to divide
your batch sizes (1024 divides every usual power-of-two batch >= 1024). With
``drop_remainder=True`` on the multiple path, the last (partial) chunk of a conversion
is skipped, as the tail of any data set is: at most ``chunk_rows - 1`` rows per input
pipeline.

Integrity (`ColumnarSource.verify`, on by default). At build time the manifest's format
version is checked, every file must be listed in its manifest and have the manifest's
size (a truncated file names the first incomplete chunk). While reading, each chunk's
payload is fingerprinted and compared with the ``@check`` value (a mismatch names the
file, the chunk and the column), and ``@check`` itself with the manifest's digest (a
file replaced after the manifest was written). Verification hashes every byte read
(FarmHash64, a few GB/s): ``benchmarks/columnar.py`` measures its cost; switch it off
with ``verify=False`` for speed (TFRecord's CRC32C still catches bytes corrupted on
disk). `verify_files` checks a whole data set offline.

Shuffling, from cheapest to most random:

- **file order** (`Pipeline.with_file_shuffling`): reshuffled every epoch; free.
- **chunk order** (``PipelineConfig.shuffle_buffer``, in *rows*: a buffer of
  ``ceil(shuffle_buffer / chunk_rows)`` chunks): chunks from the interleaved files are
  mixed; costs memory only. Rows of one chunk stay together and in order.
- **rows within a batch** (``shuffle_rows=True``): one gather per column per batch
  (a few % of throughput); a batch then holds its rows in random order, but a batch
  is still made of ``k`` whole chunks.
- **global chunk order** (``columnar(..., shuffle="global")``): every iteration reads
  all chunks of all files in a new permutation (by byte offset, no buffer) and shuffles
  rows within each batch; the iterator checkpoint holds positions only (about 2 KB
  instead of the buffer), so choose it for resumable training
  (``shuffle_buffer`` must then be 0). It reads chunk by chunk (one positioned read
  each), more slowly than a buffer shuffle (benchmarks/RESULTS.md has the figures).

So the randomness unit is the chunk: rows that were written next to each other (within
``chunk_rows``) are always trained in the same batch. That is fine for data that was
shuffled once when written (convert from a shuffled source, or shuffle before
converting) and is the trade-off that buys the speed; for unshuffled, time-ordered
data use a small ``chunk_rows`` (256) and a large chunk buffer, or shuffle when
converting.

Modules: `format` (record keys, dtypes, stored columns, checksums), `manifest` (the
manifest and how it is found), `writer` (`ColumnarWriter`), `reader` (the tf.data decode
path) and `verify` (`verify_files`, offline). `ColumnarSource` (files, build-time checks,
the steps it gives the pipeline) lives in `tfinput._src.core.sources.columnar` with the other
sources (`source` re-exports it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tfinput._src.core.formats.columnar.format import (
    DEFAULT_CHUNK_ROWS,
    EXTENSION,
    FORMAT,
    MANIFEST,
    Column,
    storage_columns,
)
from tfinput._src.core.formats.columnar.format import FORMAT_VERSION as FORMAT_VERSION
from tfinput._src.core.formats.columnar.manifest import (
    FileEntry,
    Manifest,
    is_columnar,
    merge_manifests,
    read_manifest,
)
from tfinput._src.core.formats.columnar.writer import ColumnarWriter
from tfinput._src.core.schema import Schema
from tfinput._src.core.sources._columnar_decode import assembler as assembler

if TYPE_CHECKING:  # pragma: no cover
    from tfinput._src.applications.columnar_records.verify import ChunkProblem, verify_files
    from tfinput._src.core.sources.columnar import ColumnarSource

__all__ = [
    "FORMAT",
    "MANIFEST",
    "EXTENSION",
    "DEFAULT_CHUNK_ROWS",
    "Column",
    "FileEntry",
    "Manifest",
    "ColumnarWriter",
    "ColumnarSource",
    "columnar",
    "storage_columns",
    "read_manifest",
    "merge_manifests",
    "is_columnar",
    "verify_files",
    "ChunkProblem",
]


def columnar(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    schema: Schema | None = None,
    *,
    verify: bool = True,
    shuffle_rows: bool = False,
    buffer_size: int | None = None,
    shuffle: str = "buffer",
) -> Any:
    """A pipeline over columnar pre-batched records (see `tfinput.columnar_records`).

    Args:
      paths: A data set directory (or its ``manifest.json``), data files, globs, or a
        list of them.
      schema: The schema to read with; default: the manifest's. Any schema whose
        columns are stored with the same layout works (tables, ``max_len``, clipping
        and the like may differ; numeric dense/label columns may change dtype).
      verify: Verify chunk checksums while reading (see `ColumnarSource`).
      shuffle_rows: Shuffle rows within each batch.
      buffer_size: Read buffer per open file, bytes.
      shuffle: ``"buffer"`` (default: the pipeline's chunk buffer of
        ``PipelineConfig.shuffle_buffer`` rows) or ``"global"``: every iteration reads
        all chunks in a new permutation (seeded by ``PipelineConfig.shuffle_seed``) and
        shuffles rows within each batch, with no buffer; its iterator checkpoint holds
        positions only (see `ColumnarSource`). ``shuffle_buffer`` and ``cache`` must be
        off with ``"global"``.

    Returns:
      A `tfinput.Pipeline`.

    Raises:
      SourceError: no manifest, or a manifest of another format version.
    """
    from tfinput._src.core.pipeline import Pipeline
    from tfinput._src.core.sources.columnar import ColumnarSource
    from tfinput._src.core.sources.files import as_paths

    source = ColumnarSource(
        paths=as_paths(paths),
        verify=verify,
        shuffle_rows=shuffle_rows,
        buffer_size=buffer_size,
        shuffle=shuffle,
    )
    if schema is None:
        schema = source.manifest().schema
    return Pipeline(source=source, schema=schema)


def __getattr__(name: str) -> Any:
    # Imported on first use (they import TensorFlow): `ColumnarSource` lives with the
    # other sources, `verify_files` reads through it.
    match name:
        case "ColumnarSource":
            import tfinput._src.core.sources.columnar as module
        case "verify_files" | "ChunkProblem":
            import tfinput._src.applications.columnar_records.verify as module
        case _:
            raise AttributeError(
                f"module 'tfinput._src.applications.columnar_records' has no attribute {name!r}"
            )
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"ColumnarSource", "verify_files", "ChunkProblem"})
