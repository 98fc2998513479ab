"""`ColumnarSource`: the pipeline source of columnar records (files, checks, reading).

The storage format, manifest and tf.data read path are this package's other modules;
this module is the `tfinput._src.core.sources.protocol.Source` over them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import tfinput._src.core.columnar.reader as reader
from tfinput._src.core.columnar._checks import check_schema, check_size, listed_entry
from tfinput._src.core.columnar._decode import assembler, rebatch_codec
from tfinput._src.core.columnar.format import (
    FileEntry,
    Manifest,
    is_dir,
    read_manifest,
    storage_columns,
)
from tfinput._src.core.errors import ConfigError, SourceError
from tfinput._src.core.files import resolve_paths, unfinished_part
from tfinput._src.core.formats import tfrecord
from tfinput._src.core.schema import Schema
from tfinput._src.core.sources.protocol import (
    Decode,
    FileChecks,
    ReadRequest,
    ReadStages,
    Resume,
    RooflineStages,
    Source,
    knob_is_set,
    single_core_options,
    warn_once,
)

log = logging.getLogger("tfinput")

#: ``ColumnarSource.shuffle`` values: the pipeline's chunk buffer, or a global permutation.
SHUFFLES = ("buffer", "global")

#: A data file with its manifest and the manifest's entry for it.
Resolved = tuple[str, Manifest, FileEntry]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColumnarSource(Source, FileChecks, RooflineStages):
    """Columnar pre-batched records (see `tfinput.columnar_records`).

    Chunks of rows are read natively (``TFRecordDataset``, interleaved over files); the
    pipeline's cache and shuffle steps work on chunks (``shuffle_buffer`` rows make a
    buffer of ``ceil(shuffle_buffer / chunk_rows)`` chunks, at least two), and the batch
    step batches whole chunks (or cuts exact batches with ``rebatch``). Batches smaller
    than two chunks cannot take whole chunks from the buffer: with a
    ``shuffle_buffer``, their rows are permuted in windows of the buffer's chunks (at
    least two batches; one gather per column) before the batches are cut, so rows cross
    batch boundaries at every batch size. Larger batches take whole chunks, whose rows
    stay together (said once where the buffer holds less than two batches), unless
    ``shuffle_rows`` permutes the windows' rows for them too. A build's read position
    can be checkpointed with tf.data's iterator checkpointing (``resume =
    "iterator"``).

    ``shuffle="global"`` reads instead every chunk of every (sharded) file once per
    iteration, in a permutation drawn anew for each ``iter()`` (seeded by
    ``PipelineConfig.shuffle_seed``; None: a fresh seed), each chunk by its byte offset
    from the manifest, and always shuffles rows within each batch. It holds no shuffle
    buffer: where the batch size is a multiple of the chunk size and ``deterministic``
    is not False, builds use tf.data's symbolic checkpointing, so
    ``tf.train.Checkpoint(iterator=it)`` saves positions only (about 2 KB whatever the
    data size: see `symbolic_checkpoint`) and restores exactly. Each chunk is one
    positioned read of its bytes (a stateless ``tf.numpy_function`` around
    ``os.pread``: no TensorFlow op reads a byte range without reading up to it), so the
    pipeline cannot run on tf.data service workers.

    Attributes:
      paths: Data set directories, their manifests, or data files (globs allowed);
        every file must be listed in the ``manifest.json`` of its directory.
      verify: Check every chunk's fingerprint against its ``@check`` value and the
        manifest while reading, naming the file, chunk and column on a mismatch. Costs
        one FarmHash64 pass over the bytes read (see ``benchmarks/columnar.py``); off,
        TFRecord's own CRC32C still catches bytes corrupted on disk (not with
        ``shuffle="global"``, which reads each chunk's payload by offset, without the
        framing: keep ``verify`` on there).
      shuffle_rows: Shuffle rows (seeded by ``PipelineConfig.shuffle_seed``): within
        each batch; with a ``shuffle_buffer``, across windows of the buffer's chunks (at
        least two batches) before the batches are cut, so that the rows of a chunk
        spread over many batches. Costs one gather per column (and, with a buffer, the
        decode moves before an exact re-cut of the batches: ``rebatch``, one more copy).
      buffer_size: Read buffer per open file, bytes (None: TensorFlow's default).
      shuffle: ``"buffer"`` (default): chunks of the interleaved files go through the
        pipeline's shuffle buffer (``PipelineConfig.shuffle_buffer`` rows; 0: no
        shuffle); memory and checkpoints grow with the buffer. ``"global"``: a
        permutation of all chunks per iteration plus rows shuffled within each batch
        (``shuffle_rows`` is implied); no buffer, a checkpoint of positions only, and
        every batch draws its chunks from the whole data set. It reads one chunk per
        request (``interleave_parallelism`` at a time, one positioned read each)
        rather than streaming files, more slowly than a buffer shuffle with
        ``shuffle_rows`` (benchmarks/RESULTS.md). ``shuffle_buffer`` and ``cache`` must
        then be 0 / off (`ConfigError` otherwise); the interleave cycle and block
        lengths and file shuffling have no effect (logged).
      start: ``(iteration, batch)``: with ``shuffle="global"`` and a fixed
        ``shuffle_seed``, builds yield iteration ``iteration`` (0: the first ``iter()``
        of an uninterrupted run) from batch ``batch`` to its end, exactly as that run
        did, and only that (every ``iter()`` of such a build starts there again); set
        by `resume_at`, for a saved state of three integers (seed, iteration, batch).
      empty_files: Kept so existing code that passes it still works; it has no
        effect: a columnar file is never empty, and a zero-byte one is reported as
        truncated.
    """

    paths: tuple[str, ...]
    verify: bool = True
    shuffle_rows: bool = False
    buffer_size: int | None = None
    shuffle: str = "buffer"
    start: tuple[int, int] | None = None
    empty_files: str = "skip"

    kind: ClassVar[str] = "columnar"
    resume: ClassVar[Resume] = "iterator"

    def resume_at(self, *, iteration: int, batch: int) -> ColumnarSource:
        """This source, its builds starting at batch ``batch`` of iteration
        ``iteration`` of the global shuffle (see ``start``)::

            source = pipeline.source.resume_at(iteration=2, batch=130)
            ds = dataclasses.replace(pipeline, source=source).build(config)

        Raises:
          ConfigError: not ``shuffle="global"``, or a negative iteration or batch.
        """
        if self.shuffle != "global":
            raise ConfigError(
                "columnar source: resume_at needs shuffle='global' (a buffer shuffle's "
                "order cannot be recomputed); use tf.train.Checkpoint(iterator=...)"
            )
        if min(iteration, batch) < 0:
            raise ConfigError(
                f"columnar source: resume_at: iteration and batch must be >= 0, got "
                f"{iteration} and {batch}"
            )
        return dataclasses.replace(self, start=(int(iteration), int(batch)))

    @property
    def shuffles_itself(self) -> bool:
        """The global shuffle and ``shuffle_rows`` shuffle without a buffer."""
        return self.shuffle == "global" or self.shuffle_rows

    @property
    def position_knobs(self) -> tuple[str, ...]:  # type: ignore[override]
        """None with ``shuffle="global"`` (chunks are read by offset, not through the
        interleave); the interleave's knobs otherwise."""
        return () if self.shuffle == "global" else super().position_knobs

    @property
    def position_fields(self) -> dict[str, Any]:  # type: ignore[override]
        """``shuffle``, ``shuffle_rows`` (implied by the global shuffle) and ``verify``:
        each adds or removes stages of the read."""
        return {
            "shuffle": self.shuffle,
            "shuffle_rows": self.shuffles_itself,
            "verify": self.verify,
        }

    def recomputes_order(self, request: ReadRequest) -> bool:
        """True when `resume_at` can restart this build's order: the global shuffle, a
        fixed ``shuffle_seed`` and batches of whole chunks. A saved position is then three
        integers (`tfinput.resume.InputIterator` saves compact states)."""
        if self.shuffle != "global" or request.config.shuffle_seed is None:
            return False
        _, chunk, _, _ = self._plan(request)
        if request.batch_size % chunk:
            _warn_full_states(request.batch_size, chunk)
            return False
        return True

    def __post_init__(self) -> None:
        if isinstance(self.paths, (str, os.PathLike)):
            object.__setattr__(self, "paths", (os.fspath(self.paths),))
        for name in ("verify", "shuffle_rows"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"columnar source: {name} must be true or false, got {getattr(self, name)!r}"
                )
        if self.shuffle not in SHUFFLES:
            raise ConfigError(
                f"columnar source: shuffle must be one of {list(SHUFFLES)}, got {self.shuffle!r}"
            )

    # -------------------------------------------------------------- files
    def resolve(self) -> list[Resolved]:
        """Every data file with its manifest and entry, in order.

        Raises:
          SourceError: no manifest, a file not listed in its manifest, no file at all,
            or a part of an unfinished output (`tfinput._src.core.files.unfinished_part`).
        """
        out: list[Resolved] = []
        seen: set[str] = set()

        def add(path: str, manifest: Manifest, entry: FileEntry) -> None:
            key = os.path.normpath(path)
            if key not in seen:
                seen.add(key)
                out.append((path, manifest, entry))

        for p in self.paths:
            p = os.fspath(p)
            if is_dir(p) or p.endswith(".json"):
                unfinished = None if "://" in p else unfinished_part(p)
                if unfinished:
                    raise SourceError(unfinished)
                m = read_manifest(p)
                for entry, path in zip(m.files, m.paths):
                    add(path, m, entry)
                continue
            for path in resolve_paths([p], what="columnar"):
                m = read_manifest(path)
                add(path, m, listed_entry(path, m))
        if not out:
            raise SourceError(f"no columnar files in {list(self.paths)}")
        return out

    def files(self) -> list[str]:
        """The data files, in order."""
        return [p for p, _, _ in self.resolve()]

    def manifest(self) -> Manifest:
        """The manifest of the first data file."""
        return self.resolve()[0][1]

    def validate(self, files: list[str], schema: Schema) -> None:
        """Cheap checks before reading: manifest version (when loading), schema against
        the stored columns, one chunk size, and every file's size against its manifest
        (a truncated file names its first incomplete chunk).

        Raises:
          SourceError: a file is missing or not in its manifest; manifests differ in
            chunk size or stored columns.
          SchemaError: the schema needs a column that is not stored, or stored otherwise.
          DataError: a file's size differs from its manifest's record.
        """
        chosen = self._chosen(files)
        chunk_sizes = {m.chunk_rows for _, m, _ in chosen}
        if len(chunk_sizes) > 1:
            raise SourceError(
                f"columnar data sets with different chunk sizes {sorted(chunk_sizes)} cannot "
                "be read by one pipeline; convert them with the same --chunk-rows"
            )
        manifests = list({id(m): m for _, m, _ in chosen}.values())
        for m in manifests:
            check_schema(m, schema)
            if m.columns != manifests[0].columns:
                raise SourceError(
                    f"{m.path} and {manifests[0].path} store different columns (or in another "
                    "order); read them with separate pipelines or convert them with one schema"
                )
        for path, m, entry in chosen:
            check_size(path, m, entry)

    def _chosen(self, files: list[str]) -> list[Resolved]:
        by_path = {os.path.normpath(p): (p, m, e) for p, m, e in self.resolve()}
        out = []
        for f in files:
            item = by_path.get(os.path.normpath(f))
            if item is None:
                raise SourceError(f"{f}: not a file of this columnar source")
            out.append(item)
        return out

    def count_records(self, path: str) -> int | None:
        """Rows in one file, from the manifest (`Pipeline.check` reports it)."""
        try:
            entry = read_manifest(path).entry(path)
        except SourceError:
            return None
        return None if entry is None else entry.rows

    def explain_error(self, path: str, message: str) -> str:
        """Name the chunk in a TFRecord corruption message (``corrupted record at N``)."""
        m = re.search(r"(corrupted|truncated) record at (?:byte )?([\d,]+)", message)
        if not m:
            return message
        try:
            manifest = read_manifest(path)
        except SourceError:
            return message
        entry = manifest.entry(path)
        if entry is None:
            return message
        at = int(m.group(2).replace(",", ""))
        chunk = entry.chunk_at(at)
        first, last = manifest.chunk_rows_range(entry, chunk)
        return (
            f"chunk {chunk} (rows {first}-{last} of the file, byte {at}): "
            f"{m.group(1)} record; the file is damaged on disk (TFRecord CRC32C mismatch). "
            "Restore or convert it again"
        )

    def only_files(self, paths: Sequence[str]) -> ColumnarSource:
        """This source reading ``paths`` only, in that order."""
        return dataclasses.replace(self, paths=tuple(paths))

    # ---------------------------------------------------------------- read
    def _plan(self, request: ReadRequest) -> tuple[list[Resolved], int, bool, reader.ChunkPlan]:
        """(chosen files, chunk rows, whether partial chunks are skipped, chunk plan)."""
        chosen = self._chosen(request.files)
        chunk = chosen[0][1].chunk_rows
        skip_partial = request.batch_size % chunk == 0 and request.config.drop_remainder
        plan = reader.plan_chunks(chosen, chunk_rows=chunk, skip_partial=skip_partial)
        return chosen, chunk, skip_partial, plan

    def read(self, request: ReadRequest) -> Any:
        """Serialized chunks of the files, interleaved (see
        `tfinput._src.core.columnar.reader`).

        Raises:
          SourceError: no whole chunk to read (``drop_remainder=True`` skips each
            file's partial last chunk when the batch is a multiple of the chunk size).
        """
        _, chunk, _, plan = self._plan(request)
        if not plan.paths:
            raise SourceError(
                f"columnar files {request.files[:3]}: no whole chunk of {chunk} rows to read; "
                "with drop_remainder=True and a batch size that is a multiple of the chunk "
                "size the partial last chunk is skipped"
            )
        if self.shuffle == "global":
            return self._read_global(request)
        return reader.read_chunks(plan, request, verify=self.verify, buffer_size=self.buffer_size)

    def _start(self, request: ReadRequest, chunk: int) -> tuple[int, int]:
        """``start`` as (the iteration's permutation key, its first chunk position).

        Raises:
          ConfigError: no fixed ``shuffle_seed``, or batches not made of whole chunks.
        """
        assert self.start is not None
        iteration, batch = self.start
        seed = request.config.shuffle_seed
        if seed is None or request.batch_size % chunk:
            raise ConfigError(
                f"columnar source: start={self.start} needs PipelineConfig.shuffle_seed set "
                f"(got {seed!r}) and a batch size that is a multiple of the chunk size "
                f"{chunk} (got {request.batch_size}), so that the order can be recomputed"
            )
        return reader.permutation_key(seed, iteration), batch * (request.batch_size // chunk)

    def _read_global(self, request: ReadRequest) -> Any:
        """Every planned chunk once per iteration, in a permutation per iteration.

        Raises:
          ConfigError: ``shuffle_buffer`` or ``cache`` set (they would buffer chunks
            again, or replay the first iteration's order).
        """
        from tfinput._src.core.sources.protocol import deterministic_arg, parallel_calls

        config = request.config
        for knob, why in (
            ("shuffle_buffer", "the global permutation already mixes every chunk"),
            ("cache", "a cache would replay the first iteration's order every epoch"),
        ):
            if getattr(config, knob):
                raise ConfigError(
                    f"columnar source with shuffle='global': PipelineConfig.{knob}="
                    f"{getattr(config, knob)!r} is not supported ({why}); set it to "
                    f"{0 if knob == 'shuffle_buffer' else False}, or use shuffle='buffer'"
                )
        chosen, chunk, _, plan = self._plan(request)
        start = None
        if self.start is not None:
            start = self._start(request, chunk)
        parallel = parallel_calls(config.interleave_parallelism)
        return reader.read_permuted_chunks(
            reader.index_chunks(plan, chosen),
            seed=config.shuffle_seed,
            parallelism=parallel,
            deterministic=deterministic_arg(config),
            buffer_size=self.buffer_size,
            start=start,
        )

    def symbolic_checkpoint(self, request: ReadRequest) -> bool:
        """True for ``shuffle="global"`` with whole-chunk batches (a batch size that is
        a multiple of the chunk size) and ``deterministic`` not False: every stage then
        supports tf.data's symbolic checkpointing, which saves positions only (the
        iteration's key, the next chunk position, the batch and map counters: about 2
        KB whatever the data, nine tenths of it tf.data's names for the stages; a state
        of three integers is `resume_at`'s). Otherwise (``rebatch`` does not
        support it) the explicit checkpoint holds the read-ahead buffers."""
        if self.shuffle != "global" or request.config.deterministic is False:
            return False
        chunk = self._chosen(request.files[:1])[0][1].chunk_rows
        return request.batch_size % chunk == 0

    def unhonoured(self, request: ReadRequest) -> dict[str, str]:
        """With ``shuffle="global"``: the interleave cycle and block lengths (chunks are
        read by offset, ``interleave_parallelism`` at a time) and file shuffling."""
        if self.shuffle != "global":
            return {}
        why = "shuffle='global' reads chunks by offset in a global permutation"
        out = {
            knob: why
            for knob in ("interleave_cycle_length", "interleave_block_length")
            if knob_is_set(request.config, knob)
        }
        if request.shuffle_files:
            out["shuffle_files"] = why
        return out

    def shuffle_buffer(self, records: Any, request: ReadRequest) -> int:
        """Chunks: ``ceil(shuffle_buffer / chunk_rows)``, at least two."""
        del records
        chunk = self._chosen(request.files[:1])[0][1].chunk_rows
        return reader.chunk_buffer(request.config.shuffle_buffer, chunk)

    def batch(self, records: Any, request: ReadRequest) -> tuple[Any, Decode]:
        """Batches of whole chunks decoded by the parse step (or exact batches cut
        here), rows shuffled within each batch when ``shuffle_rows`` (with
        ``shuffle="global"``: always, within each decoded group of chunks, seeded by the
        iteration's key and the group's first chunk position). With a
        ``shuffle_buffer``, and batches smaller than two chunks or ``shuffle_rows``,
        rows are permuted in windows of chunks before batches are cut
        (`reader.row_window`), which also orders each batch's rows at random; batches
        of whole chunks from a buffer of less than two batches are said once
        (`_say_whole_chunks`)."""
        chosen, chunk, skip_partial, _ = self._plan(request)
        config = request.config
        wanted, stored = storage_columns(request.schema), chosen[0][1].columns
        window = 0
        if self.shuffle != "global":
            window = reader.row_window(
                config.shuffle_buffer,
                batch_size=request.batch_size,
                chunk_rows=chunk,
                rows=self.shuffle_rows,
            )
            if config.shuffle_buffer and not window:
                _say_whole_chunks(config.shuffle_buffer, request.batch_size, chunk)
        # Groups of one chunk (batches under two chunks, not shuffled in windows) decode
        # each column straight from its one string, whatever the chunk's rows.
        single = not window and request.batch_size % chunk and request.batch_size < 2 * chunk
        assemble = assembler(
            wanted, stored, verify=self.verify, uniform=skip_partial or bool(single)
        )
        if self.shuffle == "global":  # rows mixed per decoded group (before any rebatch)
            assemble = reader.shuffle_rows_by_position(assemble)
        ds, finish = reader.batch_chunks(
            records,
            assemble,
            config,
            batch_size=request.batch_size,
            chunk_rows=chunk,
            window=window,
            codec=rebatch_codec(wanted, stored),
        )
        if self.shuffle_rows and self.shuffle != "global" and not window:
            ds, finish = reader.shuffle_rows_in_batches(
                ds, finish, seed=request.config.shuffle_seed
            )
        return ds, finish

    def batch_count(self, request: ReadRequest) -> int | None:
        """Batches in one pass of a build, from the manifests (None where the chunks
        are sharded across input pipelines, or with the global shuffle's own order)."""
        if self.shuffle == "global" or request.data_shard is not None:
            return None
        chosen, chunk, _, plan = self._plan(request)
        rows = {path: entry.rows for path, _, entry in chosen}
        drop = request.config.drop_remainder
        if request.batch_size % chunk == 0:  # batches of whole chunks (`batch_chunks`)
            chunks, per_batch = sum(plan.takes), request.batch_size // chunk
        else:  # rows re-cut into exact batches
            chunks = sum(
                min(take * chunk, rows[path]) for path, take in zip(plan.paths, plan.takes)
            )
            per_batch = request.batch_size
        return chunks // per_batch if drop else -(-chunks // per_batch)

    def roofline_stages(self, files: list[str], schema: Schema, batch_size: int) -> ReadStages:
        """``read``: ``TFRecordDataset`` over the files in order, batches of whole
        chunks; ``parse``: the same plus the decode (no verification, no transforms)."""

        manifest = self.manifest()
        chunk = manifest.chunk_rows
        k = max(1, batch_size // chunk)
        opts = single_core_options()
        assemble = assembler(storage_columns(schema), manifest.columns, verify=False, uniform=False)
        buffer_size = self.buffer_size

        def read() -> Iterable[Any]:
            ds = tfrecord.records(files, buffer_size=buffer_size)
            return ds.batch(k, drop_remainder=True).repeat().with_options(opts)

        def parse() -> Iterable[Any]:
            ds = tfrecord.records(files, buffer_size=buffer_size)
            return ds.batch(k, drop_remainder=True).map(assemble).repeat().with_options(opts)

        def chunk_rows(batch: Any) -> int:
            return int(batch.shape[0]) * chunk  # whole chunks (a partial last one counts full)

        entries = [e for _, _, e in self.resolve()]
        rows = sum(e.rows for e in entries)
        size = sum(e.bytes for e in entries)
        return ReadStages(
            factories={"read": read, "parse": parse},
            descriptions={
                "read": f"TFRecordDataset over the files in order, batch({k} chunks of "
                f"{chunk} rows)",
                "parse": "read + parse_example + decode_raw + ragged assembly (no "
                "verification, no tfinput transforms)",
            },
            counters={"read": chunk_rows},
            files=len(files),
            bytes_per_example=size / rows if rows else None,
        )


def _say_whole_chunks(shuffle_buffer: int, batch_size: int, chunk_rows: int) -> None:
    """Say once per sizes that batches of whole chunks keep each chunk's rows together,
    where the buffer holds less than two batches (some batches then hold the same
    chunks as the unshuffled read), with the settings that mix rows."""
    if shuffle_buffer >= 2 * batch_size:
        return
    warn_once(
        ("columnar", "whole chunks", str(shuffle_buffer), str(batch_size), str(chunk_rows)),
        "tfinput: columnar shuffle_buffer=%d with batches of %d rows: batches are cut from "
        "whole chunks of %d rows taken from a buffer of %d chunks, so the rows of a chunk "
        "stay together and some batches hold the same rows as without a shuffle; "
        "tfinput.columnar(..., shuffle_rows=True) permutes the rows of windows of %d "
        "chunks (two batches) before cutting batches (one gather per column), a "
        "shuffle_buffer of %d rows (two batches) or more mixes more chunks, and "
        "shuffle='global' draws each batch's chunks from the whole data set",
        shuffle_buffer,
        batch_size,
        chunk_rows,
        reader.chunk_buffer(shuffle_buffer, chunk_rows),
        reader.row_window(shuffle_buffer, batch_size=batch_size, chunk_rows=chunk_rows, rows=True),
        2 * batch_size,
    )


@functools.lru_cache(maxsize=64)
def _warn_full_states(batch_size: int, chunk_rows: int) -> None:
    """Say once per batch and chunk size that states are full checkpoints."""
    log.warning(
        "tfinput: columnar shuffle='global' with batch_size %d, not a multiple of the "
        "%d-row chunks: batches cut chunks, so an iterator's state is TensorFlow's full "
        "iterator checkpoint (megabytes: the rows of the chunks being cut and of the "
        "prefetched batches) instead of a position of under 1 KB; a batch size that is a "
        "multiple of %d keeps states small (docs/resume.md)",
        batch_size,
        chunk_rows,
        chunk_rows,
    )
