"""The tf.data read path of columnar records, native ops only.

``TFRecordDataset`` per file -> interleave (`read_chunks`) -> [cache] -> [chunk
shuffle of `chunk_buffer` chunks] (both applied by `tfinput.Pipeline.build`) -> batch of
chunks -> `assembler` (``tf.io.parse_example`` of a few scalar strings,
``tf.io.decode_raw``, ``tf.RaggedTensor.from_row_lengths``, in-graph checksum checks)
-> [rows permuted in windows of chunks (`row_window`): the shuffle of batches smaller
than two chunks] -> [``rebatch`` when the batch size is not a multiple of the chunk
size, or rows were permuted] -> [row shuffle]. `ColumnarSource`
(`tfinput._src.core.columnar.source`) supplies the steps to the pipeline.

Global shuffle (``ColumnarSource(shuffle="global")``) replaces the file interleave and
the chunk buffer: `read_permuted_chunks` yields every chunk of every file once per
iteration, in a permutation of the chunk index computed from a key drawn natively for
each iteration (``tf.random.experimental.index_shuffle``), each chunk read by its byte
offset from the manifest (`ChunkIndex`). It holds no buffer, so a symbolic iterator
checkpoint holds positions only.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from tfinput._src.core._python_calls import EXITING, python_call
from tfinput._src.core.columnar._decode import Raw
from tfinput._src.core.columnar.format import FileEntry, Manifest
from tfinput._src.core.config import PipelineConfig
from tfinput._src.core.formats import tfrecord
from tfinput._src.core.sources._row_shuffle import shuffle_row_windows
from tfinput._src.core.sources.protocol import (
    deterministic_arg,
    file_order,
    interleave_files,
    parallel_calls,
    traced,
    unchanged_at_end,
)

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

    from tfinput._src.core.sources.protocol import ReadRequest


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChunkPlan:
    """The chunks a build reads, per file.

    Attributes:
      paths: The files that hold at least one chunk to read, in order.
      takes: Chunks read from the start of each file.
      digests: Per file, the manifest digests of those chunks (int64 bit patterns).
      sizes: Per file, its size in bytes from the manifest (-1 for a remote file: its
        size is not probed once its chunks are read).
    """

    paths: list[str]
    takes: list[int]
    digests: list[np.ndarray]
    sizes: list[int] = dataclasses.field(default_factory=list)


def plan_chunks(
    chosen: Sequence[tuple[str, Manifest, FileEntry]], *, chunk_rows: int, skip_partial: bool
) -> ChunkPlan:
    """The chunks to read from each file; ``skip_partial`` leaves out a file's last,
    partial chunk (it cannot fill a static batch of whole chunks)."""
    paths, takes, digests, sizes = [], [], [], []
    for path, _, entry in chosen:
        n = entry.chunks
        if skip_partial and entry.rows % chunk_rows:
            n -= 1
        if n <= 0:
            continue
        paths.append(path)
        takes.append(n)
        sizes.append(-1 if "://" in path else entry.bytes)
        digests.append(np.frombuffer(bytes.fromhex("".join(entry.digests[:n])), dtype="=i8").copy())
    return ChunkPlan(paths=paths, takes=takes, digests=digests, sizes=sizes)


#: TFRecord framing around each chunk's payload: length (8) + its CRC (4) before, CRC after.
_HEADER_BYTES, _FOOTER_BYTES = 12, 4


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChunkIndex:
    """Where every planned chunk lies, for reading chunks by index (global shuffle).

    Attributes:
      paths: The files, in order.
      file_bytes: Each file's size in bytes (from its manifest).
      file: Per chunk, the index of its file in ``paths``.
      chunk: Per chunk, its index within its file.
      offset: Per chunk, the byte offset of its record.
      size: Per chunk, its record's size in bytes (framing included).
      digest: Per chunk, its manifest digest (int64 bit pattern).
    """

    paths: list[str]
    file_bytes: np.ndarray
    file: np.ndarray
    chunk: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    digest: np.ndarray

    def __len__(self) -> int:
        return len(self.file)


def index_chunks(plan: ChunkPlan, chosen: Sequence[tuple[str, Manifest, FileEntry]]) -> ChunkIndex:
    """The byte range of every chunk ``plan`` reads, from the manifests' offsets."""
    entries = {path: entry for path, _, entry in chosen}
    file, chunk, offset, size = [], [], [], []
    for i, (path, take) in enumerate(zip(plan.paths, plan.takes)):
        entry = entries[path]
        ends = [*entry.offsets[1:], entry.bytes]
        for c in range(take):
            file.append(i)
            chunk.append(c)
            offset.append(entry.offsets[c])
            size.append(ends[c] - entry.offsets[c])
    return ChunkIndex(
        paths=list(plan.paths),
        file_bytes=np.asarray([entries[p].bytes for p in plan.paths], np.int64),
        file=np.asarray(file, np.int64),
        chunk=np.asarray(chunk, np.int64),
        offset=np.asarray(offset, np.int64),
        size=np.asarray(size, np.int64),
        digest=np.concatenate(plan.digests) if plan.digests else np.zeros([0], np.int64),
    )


def permutation_keys(seed: int | None) -> tf.data.Dataset:
    """The one-element dataset of each iteration's permutation key: a fresh int64 per
    ``iter()``, drawn natively (``Dataset.random``, seeded by ``seed``)."""
    import tensorflow as tf

    return tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).take(1)


def permutation_key(seed: int, iteration: int) -> int:
    """The permutation key `permutation_keys` draws for iteration ``iteration`` (0 for
    the first ``iter()``) of a build seeded by ``seed``: replayed from a fresh generator
    (``iteration + 1`` tiny iterations), so a new process finds the same key."""
    keys = permutation_keys(seed)
    key = 0
    for _ in range(iteration + 1):
        key = int(next(iter(keys)))
    return key


def _permutation_positions(
    n: int, seed: int | None, start: tuple[int, int] | None
) -> tf.data.Dataset:
    """``{"key", "position"}`` per chunk position of an iteration (see
    `read_permuted_chunks`)."""
    import tensorflow as tf

    if start is None:
        # Each position zipped with a native draw; the scan keeps the iteration's first
        # draw (the key `permutation_keys` would give) as its state. The draws stay
        # alive for the whole iteration, so tf.data saves the generator of the next
        # iterations' keys at any point, even after reading ahead to the end.
        draws = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)

        def first_draw(
            state: tuple[tf.Tensor, tf.Tensor], element: tuple[tf.Tensor, tf.Tensor]
        ) -> tuple[tuple[tf.Tensor, tf.Tensor], dict[str, tf.Tensor]]:
            have, key = state
            position, draw = element
            key = tf.where(have, key, draw)
            return (tf.constant(True), key), {"key": key, "position": position}

        return tf.data.Dataset.zip((tf.data.Dataset.range(n), draws)).scan(
            (tf.constant(False), tf.constant(0, tf.int64)), traced(first_draw)
        )
    else:
        key = tf.constant(start[0], tf.int64)
        return tf.data.Dataset.range(start[1], n).map(traced(lambda p: {"key": key, "position": p}))


def read_permuted_chunks(
    index: ChunkIndex,
    *,
    seed: int | None,
    parallelism: int | None,
    deterministic: bool | None,
    buffer_size: int | None,
    start: tuple[int, int] | None = None,
) -> tf.data.Dataset:
    """Every chunk of ``index`` once per iteration, in a permutation drawn anew for
    each iteration, each read by its offset (no buffer, no per-file iterator).

    Each element is a dict: ``record`` (the serialized chunk), ``path``, ``chunk`` (its
    index in the file), ``digest`` (its manifest digest), ``key`` (the iteration's
    permutation key) and ``position`` (the chunk's position in the permutation).

    Args:
      index: The chunks (`index_chunks`).
      seed: Seeds the per-iteration keys (None: a fresh seed).
      parallelism: ``num_parallel_calls`` of the read map (None: sequential).
      deterministic: The read map's ``deterministic`` argument.
      buffer_size: Unused: each chunk is one positioned read of exactly its bytes.
      start: ``(key, position)``: read one permutation only, the one of ``key``, from
        ``position`` on (see `ColumnarSource.resume_at`); None: a new key per iteration.
    """
    import tensorflow as tf

    del buffer_size
    n = len(index)
    paths = tf.constant(index.paths)
    files, chunks = tf.constant(index.file), tf.constant(index.chunk)
    offsets, sizes = tf.constant(index.offset), tf.constant(index.size)
    digests = tf.constant(index.digest)
    ds = _permutation_positions(n, seed, start)
    # At the interpreter's exit the reads return at once, reading nothing: an iterator
    # still alive then does not keep the exit waiting.
    read_range = python_call(_read_range, refused=lambda *_: _handed_over(f"DataError: {EXITING}"))

    def read(e: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        i = tf.random.experimental.index_shuffle(
            e["position"], tf.stack([e["key"], tf.constant(_KEY_SALT, tf.int64)]), n - 1
        )
        f, offset, size = tf.gather(files, i), tf.gather(offsets, i), tf.gather(sizes, i)
        path = tf.gather(paths, f)
        # One positioned read of the record's payload (framing stripped): a Python
        # pread, because no TensorFlow op reads a byte range without reading up to it.
        # Stateless: the bytes at a fixed offset are what the manifest pins down (and
        # ``verify`` checks), so tf.data checkpoints the read position as usual.
        # A file shorter than its manifest says is handed over as a message and raised
        # by an assert: raised in the callback, TensorFlow would log its traceback.
        record, error = tf.numpy_function(
            read_range,
            [path, offset + _HEADER_BYTES, size - _HEADER_BYTES - _FOOTER_BYTES],
            [tf.string, tf.string],
            stateful=False,
            name="read_chunk",
        )
        error = tf.reshape(error, [])
        with tf.control_dependencies([tf.debugging.Assert(tf.equal(error, ""), [error])]):
            record = tf.reshape(record, [])
        return {
            "record": record,
            "path": path,
            "chunk": tf.gather(chunks, i),
            "digest": tf.gather(digests, i),
            "key": e["key"],
            "position": e["position"],
        }

    return ds.map(
        traced(read),
        num_parallel_calls=parallelism,
        deterministic=deterministic if parallelism else None,
        name="read",
    )


def _read_range(path: bytes, offset: np.int64, size: np.int64) -> list[np.ndarray]:
    """``size`` bytes of ``path`` from ``offset`` (a scalar string array), and ``""``; or
    an empty string and ``"DataError: PATH: truncated: ..."`` when the file is shorter
    than its manifest says (cut or replaced since the build)."""
    name = path.decode()
    try:
        if "://" in name:
            import tensorflow as tf

            with tf.io.gfile.GFile(name, "rb") as f:
                f.seek(int(offset))
                data = f.read(int(size))
        else:
            with open(name, "rb") as f:
                data = os.pread(f.fileno(), int(size), int(offset))
    except Exception as e:  # OSError, TensorFlow's errors for a remote file: gone since the build
        reason = getattr(e, "strerror", None) or getattr(e, "message", None) or e
        return _handed_over(f"DataError: {name}: cannot be read: {reason}")
    if len(data) != int(size):
        return _handed_over(
            f"DataError: {name}: truncated: the manifest's chunk at byte {int(offset)} needs "
            f"{int(size)} bytes, the file has {len(data)} there (the file was cut or "
            "replaced while it was read)"
        )
    return [np.array(data, dtype=object), np.array(b"", dtype=object)]


def _handed_over(error: str) -> list[np.ndarray]:
    """`_read_range`'s result for a read that failed with ``error``."""
    return [np.array(b"", dtype=object), np.array(error.encode(), dtype=object)]


#: The second word of each permutation's ``index_shuffle`` seed (the key is the first).
_KEY_SALT = 0x636F6C756D6E6172


def shuffle_rows_by_position(
    assemble: Callable[[dict[str, tf.Tensor]], Raw],
) -> Callable[[dict[str, tf.Tensor]], Raw]:
    """``assemble`` (of a batch of globally shuffled chunks) followed by a permutation
    of the decoded rows, seeded by the iteration's key and the batch's first chunk
    position, so a restored or restarted iteration permutes every batch as the
    uninterrupted one did."""
    import tensorflow as tf

    def assemble_shuffled(encoded: dict[str, tf.Tensor]) -> Raw:
        seed = tf.stack([encoded["key"][0], encoded["position"][0]])
        return _permute_rows(assemble(encoded), seed)

    return assemble_shuffled


def read_chunks(
    plan: ChunkPlan, request: ReadRequest, *, verify: bool, buffer_size: int | None
) -> tf.data.Dataset:
    """Serialized chunks of every planned file, interleaved (file order shuffled when the
    request says so). With ``verify`` each element is a dict of the record, its file,
    its chunk index and its manifest digest; otherwise the record alone. Once every
    chunk is read, each local file's size is compared with its manifest's
    (`unchanged_at_end`): a file cut while it is read fails the read naming it, instead
    of ending with fewer chunks."""
    import tensorflow as tf

    file_ds = tf.data.Dataset.from_tensor_slices(
        {
            "path": tf.constant(plan.paths),
            "take": tf.constant(plan.takes, tf.int64),
            "digests": tf.RaggedTensor.from_row_lengths(
                np.concatenate(plan.digests), np.asarray(plan.takes, np.int64)
            ),
        }
    )
    file_ds = file_order(file_ds, len(plan.paths), request)
    read = _file_reader(verify=verify, buffer_size=buffer_size)
    chunks = interleave_files(file_ds, read, request.config)
    return unchanged_at_end(chunks, plan.paths, plan.sizes, what="chunks")


def chunk_buffer(shuffle_buffer: int, chunk_rows: int) -> int:
    """Chunks a shuffle of ``shuffle_buffer`` rows holds: rounded up, at least two (a
    buffer of one chunk hands each chunk on as it comes)."""
    return max(2, math.ceil(shuffle_buffer / chunk_rows))


def row_window(shuffle_buffer: int, *, batch_size: int, chunk_rows: int, rows: bool) -> int:
    """Chunks per window of the row shuffle (`batch_chunks`), 0 for none. With a
    ``shuffle_buffer``, batches smaller than two chunks cannot draw whole chunks from
    the chunk buffer (a batch of one chunk, or of part of one, holds the rows of one
    chunk), so their rows are permuted in windows before batches are cut; larger
    batches take whole chunks from the buffer unless ``rows`` (``shuffle_rows``) asks
    for the rows to be permuted too. A window holds `chunk_buffer` chunks, and at
    least two batches of rows, so that rows cross batch boundaries."""
    if not shuffle_buffer or (batch_size >= 2 * chunk_rows and not rows):
        return 0
    return max(chunk_buffer(shuffle_buffer, chunk_rows), math.ceil(2 * batch_size / chunk_rows))


def _file_reader(
    *, verify: bool, buffer_size: int | None
) -> Callable[[dict[str, tf.Tensor]], tf.data.Dataset]:
    """The interleave function: one file's planned chunks as a dataset."""
    import tensorflow as tf

    def read(f: dict[str, tf.Tensor]) -> tf.data.Dataset:
        records = tfrecord.records(f["path"], buffer_size=buffer_size).take(f["take"])
        if not verify:
            return records
        meta = tf.data.Dataset.from_tensor_slices(
            {"chunk": tf.range(f["take"]), "digest": f["digests"][: f["take"]]}
        )
        return tf.data.Dataset.zip((records, meta)).map(
            traced(
                lambda r, m: {
                    "record": r,
                    "path": f["path"],
                    "chunk": m["chunk"],
                    "digest": m["digest"],
                }
            )
        )

    return read


def batch_chunks(
    ds: tf.data.Dataset,
    assemble: Callable[[dict[str, tf.Tensor]], Raw],
    config: PipelineConfig,
    *,
    batch_size: int,
    chunk_rows: int,
    window: int = 0,
    codec: tuple[Callable[[Raw], Raw], Callable[[Raw], Raw]] | None = None,
) -> tuple[tf.data.Dataset, Callable[[dict[str, tf.Tensor]], Raw]]:
    """Chunks -> batches of ``batch_size`` rows, and the decode function to apply.

    A multiple of ``chunk_rows`` batches whole chunks and decodes them in the pipeline's
    parse step (``assemble``). Any other size decodes groups of about one batch of
    chunks here and cuts exact batches with ``rebatch``; the decode step is then the
    identity. With ``window`` (chunks, `row_window`), groups of that many chunks are
    decoded and their rows permuted (`shuffle_row_windows`, seeded by
    ``shuffle_seed``) before exact batches are cut, so that rows of a chunk spread over
    many batches and every batch draws rows from several chunks. With ``codec``
    (`rebatch_codec`'s ``(pack, unpack)``) the decoded groups are packed into a few
    tensors before they are permuted and cut, and the decode step unpacks them.
    """
    if batch_size % chunk_rows == 0 and not window:
        ds = ds.batch(batch_size // chunk_rows, drop_remainder=config.drop_remainder)
        return ds, assemble
    pack, unpack = codec or (_identity, _identity)
    parallel_map = parallel_calls(config.map_parallelism)
    ds = ds.batch(window or max(1, batch_size // chunk_rows)).map(
        traced(lambda chunks: pack(assemble(chunks))),
        num_parallel_calls=parallel_map,
        deterministic=deterministic_arg(config) if parallel_map else None,
    )
    if window:
        ds = shuffle_row_windows(ds, window_rows=window * chunk_rows, config=config)
    ds = ds.rebatch(batch_size, drop_remainder=config.drop_remainder)
    return ds, unpack


def _identity(raw: Raw) -> Raw:
    """The decode step of batches decoded before they were cut."""
    return raw


def shuffle_rows_in_batches(
    ds: tf.data.Dataset, finish: Callable[[dict[str, tf.Tensor]], Raw], *, seed: int | None
) -> tuple[tf.data.Dataset, Callable[[dict[str, tf.Tensor]], Raw]]:
    """Pair each batch with a fresh seed, and a decode step that decodes it with
    ``finish`` and then permutes its rows (one gather per column)."""
    import tensorflow as tf

    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
    ds = tf.data.Dataset.zip({"batch": ds, "seed": seeds})

    def finish_shuffled(element: dict[str, tf.Tensor]) -> Raw:
        return _shuffle_rows(finish(element["batch"]), element["seed"])

    return ds, finish_shuffled


def _shuffle_rows(raw: Raw, seed: tf.Tensor) -> Raw:
    import tensorflow as tf

    return _permute_rows(raw, tf.stack([seed, tf.constant(0, tf.int64)]))


def _permute_rows(raw: Raw, seed: tf.Tensor) -> Raw:
    """``raw`` with its rows in the stateless permutation of ``seed`` (shape [2])."""
    import tensorflow as tf

    first = next(iter(raw.values()))
    n = first.nrows() if isinstance(first, tf.RaggedTensor) else tf.shape(first)[0]
    perm = tf.random.experimental.stateless_shuffle(tf.range(tf.cast(n, tf.int64)), seed=seed)
    return {k: tf.gather(v, perm) for k, v in raw.items()}
