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
"""

from tfinput._src.core.columnar.format import DEFAULT_CHUNK_ROWS as DEFAULT_CHUNK_ROWS
from tfinput._src.core.columnar.format import EXTENSION as EXTENSION
from tfinput._src.core.columnar.format import FORMAT as FORMAT
from tfinput._src.core.columnar.format import MANIFEST as MANIFEST
from tfinput._src.core.columnar.format import Column as Column
from tfinput._src.core.columnar.format import FileEntry as FileEntry
from tfinput._src.core.columnar.format import Manifest as Manifest
from tfinput._src.core.columnar.format import is_columnar as is_columnar
from tfinput._src.core.columnar.format import merge_manifests as merge_manifests
from tfinput._src.core.columnar.format import read_manifest as read_manifest
from tfinput._src.core.columnar.format import storage_columns as storage_columns
from tfinput._src.core.columnar.source import ColumnarSource as ColumnarSource
from tfinput._src.core.columnar.writer import ChunkProblem as ChunkProblem
from tfinput._src.core.columnar.writer import ColumnarWriter as ColumnarWriter
from tfinput._src.core.columnar.writer import verify_files as verify_files
