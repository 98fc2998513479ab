"""Where batches come from: TFRecord files, Parquet files, or a user's tf.data.Dataset.

A source turns a list of files (already sharded for this input pipeline) and a
`PipelineConfig` into a dataset of *encoded batches* plus a ``decode`` function that
maps one encoded batch to a raw batch (see `tfinput.transforms`). The pipeline fuses
``decode`` with the transforms into one parallel ``map``, so parsing is vectorized:
batch first, then parse.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import glob
import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfinput.config import AUTOTUNE, PipelineConfig
from tfinput.errors import DataError, SchemaError, SourceError
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema
from tfinput.transforms import parse_spec

__all__ = ["TFRecordSource", "ParquetSource", "DatasetSource", "resolve_paths"]

log = logging.getLogger("tfinput")

PathsLike = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
Decode = Callable[[Any], dict[str, Any]]

_COMPRESSION = {None: "", "": "", "none": "", "gzip": "GZIP", "zlib": "ZLIB"}


def resolve_paths(paths: PathsLike, *, what: str = "input") -> list[str]:
    """Expand globs and directories into a sorted, de-duplicated list of files.

    Raises:
      SourceError: a pattern matches nothing, or a named file does not exist.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if "://" in p:  # remote file systems: let TensorFlow expand the glob
            matches = sorted(tf.io.gfile.glob(p))
        elif any(ch in p for ch in "*?["):
            matches = sorted(glob.glob(p))
        elif os.path.isdir(p):
            matches = sorted(
                os.path.join(p, n)
                for n in os.listdir(p)
                if not n.startswith((".", "_"))
                and os.path.isfile(os.path.join(p, n))
                and not n.endswith(".json")
            )
        elif os.path.exists(p):
            matches = [p]
        else:
            raise SourceError(f"{what} file {p!r} does not exist")
        if not matches:
            raise SourceError(f"{what} pattern {p!r} matches no files")
        out.extend(m for m in matches if m not in out)
    if not out:
        raise SourceError(f"no {what} files given")
    return out


def _opt(value: int) -> int | None:
    """``num_parallel_calls`` for a parallelism knob: AUTOTUNE stays, 1 means the
    sequential op (None), which is cheaper than a parallel op with one thread."""
    return None if value == 1 else value


def _deterministic(config: PipelineConfig) -> bool | None:
    return None if config.deterministic is AUTOTUNE else bool(config.deterministic)


def interleave_files(
    files: tf.data.Dataset, read: Callable[[Any], tf.data.Dataset], config: PipelineConfig
) -> tf.data.Dataset:
    """``files.interleave(read)`` with the config's interleave knobs (parallelism is
    capped at the cycle length; 1 means the sequential op). Named ``read`` in traces."""
    cycle = config.interleave_cycle_length
    parallel = config.interleave_parallelism
    if cycle != AUTOTUNE and parallel != AUTOTUNE:
        parallel = min(parallel, cycle)
    block = None if config.interleave_block_length == AUTOTUNE else config.interleave_block_length
    return files.interleave(
        read,
        cycle_length=cycle,
        block_length=block,
        num_parallel_calls=_opt(parallel),
        deterministic=_deterministic(config) if _opt(parallel) else None,
        name="read",
    )


def _shard(files: list[str], input_context: Any, what: str) -> list[str]:
    if input_context is None or input_context.num_input_pipelines == 1:
        return files
    n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
    if len(files) < n:
        raise SourceError(
            f"{n} input pipelines but only {len(files)} {what} file(s): each pipeline "
            "reads whole files, so write at least as many files as input pipelines"
        )
    return files[i::n]


def _drop_empty(files: list[str], policy: str) -> tuple[list[str], list[str]]:
    empty = [f for f in files if "://" not in f and os.path.getsize(f) == 0]
    if empty and policy == "error":
        raise SourceError(
            f"{len(empty)} empty file(s), first {empty[0]!r}; pass empty_files='skip' to "
            "skip them (tfinput logs how many)"
        )
    if empty:
        log.warning("tfinput: skipped %d empty file(s): %s", len(empty), ", ".join(empty[:5]))
    kept = [f for f in files if f not in empty]
    if not kept:
        raise SourceError(f"all {len(files)} input file(s) are empty, first {files[0]!r}")
    return kept, empty


# --------------------------------------------------------------------- TFRecord
@dataclasses.dataclass(frozen=True, kw_only=True)
class TFRecordSource:
    """TFRecord files of serialized ``tf.train.Example``.

    Attributes:
      paths: Files, globs or directories.
      compression: ``None``/``"none"``, ``"GZIP"``, ``"ZLIB"``, or ``"auto"`` (by file
        extension: ``.gz`` is GZIP, ``.zz``/``.zlib`` is ZLIB, anything else none).
      empty_files: ``skip`` (default; logged) or ``error``. Sharded writers such as
        Spark often leave empty part files.
      buffer_size: Read buffer per open file, bytes (None: TensorFlow's default).
      allow_absent: tf.Example keys that may be absent from every one of the first
        `SAMPLE_RECORDS` records (very sparse features) without a `SchemaError` at
        build; they take their defaults.
    """

    paths: tuple[str, ...]
    compression: str | None = "auto"
    empty_files: str = "skip"
    buffer_size: int | None = None
    allow_absent: tuple[str, ...] = ()

    kind = "tfrecord"

    def __post_init__(self) -> None:
        if self.compression != "auto" and ((self.compression or "").lower() not in _COMPRESSION):
            raise SourceError(
                f"TFRecord compression {self.compression!r} unknown; expected one of "
                "None, 'GZIP', 'ZLIB', 'auto'"
            )
        if self.empty_files not in ("skip", "error"):
            raise SourceError(f"empty_files: expected 'skip' or 'error', got {self.empty_files!r}")

    def compression_of(self, path: str) -> str:
        if self.compression == "auto":
            lower = path.lower()
            if lower.endswith((".gz", ".gzip")):
                return "GZIP"
            if lower.endswith((".zz", ".zlib")):
                return "ZLIB"
            return ""
        return _COMPRESSION[(self.compression or "").lower()]

    def files(self) -> list[str]:
        files = resolve_paths(self.paths, what="TFRecord")
        return _drop_empty(files, self.empty_files)[0]

    def validate(self, files: list[str], schema: Schema) -> None:
        """Cheap checks at build time, before any record is parsed.

        - Every uncompressed local file must end with a whole record. TensorFlow treats a
          file cut inside a record's 12-byte header as a clean end of file and silently
          drops the rest; tfinput reads each file's last bytes (16 KiB, up to 1 MiB when
          the last record is larger), finds the last record header by its length CRC
          and raises `DataError` naming the file and the offset where the cut header
          starts. A cut inside a record's data is TensorFlow's own ``DataLossError``
          while reading, which `Pipeline.iterate` / `check` turn into a `DataError`.
        - The first records of the first file (up to `SAMPLE_RECORDS`) are compared with
          the schema: a key of the wrong kind, a required key missing from the first
          record, or a key absent from every sampled record (usually a typo) is a
          `SchemaError`. List ``allow_absent`` keys that may legitimately be absent
          from that many records.
        """
        for path in files:
            if "://" not in path and not self.compression_of(path):
                _check_tail_once(path)
        _check_first_examples(
            files[0], self.compression_of(files[0]), schema, allow_absent=self.allow_absent
        )

    def count_records(self, path: str) -> int | None:
        """Records in one file, counted natively (`Pipeline.check` reports it); None
        when the file cannot be read to its end."""
        ds = tf.data.TFRecordDataset(path, self.compression_of(path)).batch(4096)
        try:
            return int(ds.reduce(tf.constant(0, tf.int64), lambda n, b: n + tf.size(b, tf.int64)))
        except tf.errors.OpError:
            return None

    def encoded_batches(
        self,
        files: list[str],
        schema: Schema,
        config: PipelineConfig,
        batch_size: int,
        *,
        shuffle_files: bool,
    ) -> tuple[tf.data.Dataset, Decode]:
        compressions = {self.compression_of(f) for f in files}
        if len(compressions) > 1:
            raise SourceError(
                f"TFRecord files mix compressions {sorted(compressions)}; give them as "
                "separate pipelines or set compression explicitly"
            )
        compression = compressions.pop()
        ds = tf.data.Dataset.from_tensor_slices(files)
        if shuffle_files and len(files) > 1:
            ds = ds.shuffle(len(files), seed=config.shuffle_seed, reshuffle_each_iteration=True)
        buffer_size = self.buffer_size

        def read(path: tf.Tensor) -> tf.data.Dataset:
            return tf.data.TFRecordDataset(path, compression, buffer_size=buffer_size)

        ds = interleave_files(ds, read, config)
        if config.cache:
            ds = ds.cache()
        if config.shuffle_buffer:
            buffer = _capped_shuffle_buffer(config.shuffle_buffer, files, bool(compression))
            ds = ds.shuffle(buffer, seed=config.shuffle_seed)
        ds = ds.batch(batch_size, drop_remainder=config.drop_remainder)
        spec = parse_spec(schema)

        def decode(serialized: tf.Tensor) -> dict[str, Any]:
            return tf.io.parse_example(serialized, spec)

        return ds, decode


#: Records of the first file compared with the schema at build (`TFRecordSource.validate`).
SAMPLE_RECORDS = 256
#: Bytes of a record besides its data: length (8), length CRC (4), data CRC (4).
_RECORD_OVERHEAD = 16
#: DEFLATE's largest compression ratio: a bound on what a compressed file can hold.
_DEFLATE_MAX_RATIO = 1032


def _capped_shuffle_buffer(requested: int, files: list[str], compressed: bool) -> int:
    """``shuffle_buffer`` capped at the most records the files can hold.

    TensorFlow's shuffle allocates about 24 bytes per slot up front, whatever the data
    size (a buffer of 1e9 took 24 GB), so a buffer larger than the data only costs
    memory. Every record takes at least 16 bytes of file (its framing), so an
    uncompressed data set of S bytes holds at most S // 16 records; a GZIP/ZLIB one at
    most ``S * 1032 // 16`` (DEFLATE's largest ratio). Remote files are not measured.
    A capped value is logged with the requested and the used value.
    """
    if any("://" in f for f in files):
        return requested
    total = sum(os.path.getsize(f) for f in files)
    most = max(1, total * (_DEFLATE_MAX_RATIO if compressed else 1) // _RECORD_OVERHEAD)
    if requested <= most:
        return requested
    log.warning(
        "tfinput: shuffle_buffer %d is larger than the %d record(s) the %d file(s) can hold "
        "(%d bytes, at least %d bytes per record); using %d",
        requested,
        most,
        len(files),
        total,
        _RECORD_OVERHEAD,
        most,
    )
    return most


def _masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli) of a few bytes (the length field)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


_WHOLE_FILES: set[tuple[str, int, int]] = set()  # (path, mtime_ns, size) found whole


def _check_tail_once(path: str) -> None:
    """`_check_tail`, skipped for a file version already found whole (the tuner and
    bench build the same pipeline many times)."""
    stat = os.stat(path)
    key = (path, stat.st_mtime_ns, stat.st_size)
    if key not in _WHOLE_FILES:
        _check_tail(path)
        _WHOLE_FILES.add(key)


def _check_tail(path: str, windows: Sequence[int] = (1 << 14, 1 << 17, 1 << 20)) -> None:
    """Raise `DataError` if an uncompressed TFRecord file ends inside a record header.

    Reads the file's last bytes and looks for the last record's header: 8 bytes of
    length L at offset q whose masked CRC follows, with the record ending at EOF
    (q + 16 + L == size: the file is whole) or 1-11 bytes before it (a cut header).
    Cost: one read of the tail per file (numpy, no per-record Python). A last record
    larger than the largest window cannot be located and is not judged.
    """
    size = os.path.getsize(path)
    if 0 < size < 12:
        raise DataError(
            f"{path}: truncated TFRecord: {size} byte(s), less than one record header at "
            "offset 0 (the file was cut while being copied or written?)"
        )
    with open(path, "rb") as fh:
        for window in windows:
            start = max(0, size - window)
            fh.seek(start)
            tail = fh.read(size - start)
            found = _tail_boundary(tail)
            if found is not None:
                whole, end = found
                if whole:
                    return
                raise DataError(
                    f"{path}: truncated TFRecord: the file ends {size - start - end} byte(s) "
                    f"into a record header at offset {start + end} (the file was cut while "
                    "being copied or written?); records after that offset are lost"
                )
            if start == 0:
                return


def _tail_boundary(tail: bytes) -> tuple[bool, int] | None:
    """``(True, n)`` when a record ends exactly at the end of ``tail``; ``(False, end)``
    when one ends 1-11 bytes before it; None when no record boundary was found."""
    n = len(tail)
    buf = np.frombuffer(tail, np.uint8)
    best: tuple[bool, int] | None = None
    for align in range(8):
        count = (n - align - _RECORD_OVERHEAD) // 8 + 1
        if count <= 0:
            continue
        lengths = np.frombuffer(buf, "<u8", count=count, offset=align)
        q = align + 8 * np.arange(count, dtype=np.int64)
        room = n - _RECORD_OVERHEAD - q  # data bytes that fit between header and EOF
        ok = lengths <= np.uint64(1 << 62)
        gap = np.where(ok, room - lengths.astype(np.int64, copy=False), -1)
        for i in np.flatnonzero((gap >= 0) & (gap <= 11)):
            pos = int(q[i])
            crc = int.from_bytes(tail[pos + 8 : pos + 12], "little")
            if crc != _masked_crc32c(tail[pos : pos + 8]):
                continue
            end = n - int(gap[i])
            if gap[i] == 0:
                return True, n
            if best is None or end > best[1]:
                best = (False, end)
    return best


_EXAMPLE_KIND = {"float32": "float_list", "int64": "int64_list", "string": "bytes_list"}


def _expected_kind(f: Dense | Categorical | MultiHot | Label) -> str:
    return _EXAMPLE_KIND[f.dtype]


def _check_first_examples(
    path: str, compression: str, schema: Schema, *, allow_absent: Sequence[str] = ()
) -> None:
    """Compare the first `SAMPLE_RECORDS` records of ``path`` with the schema."""
    records: list[bytes] = []
    try:
        for record in tf.data.TFRecordDataset(path, compression).take(SAMPLE_RECORDS):
            records.append(record.numpy())
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        if not records:
            raise DataError(f"{path}: not a readable TFRecord file ({_tf_message(e, path)})") from e
        # Damage after the first records is reported while reading, with its offset.
    if not records:
        return
    examples = []
    for i, record in enumerate(records):
        try:
            examples.append(tf.train.Example.FromString(record))
        except Exception as e:  # protobuf's DecodeError has no stable import path
            raise DataError(f"{path}: record {i} is not a tf.train.Example ({e})") from e
    _check_example_kinds(path, examples[0], schema)
    seen: set[str] = set()
    for example in examples:
        seen.update(example.features.feature.keys())
    keys = [(f.name, f.source) for f in schema.features]
    keys += [(f.name, f.weights) for f in schema.multi_hot if f.weights]
    keys += [(lab.name, lab.source) for lab in schema.labels]
    for name, key in keys:
        if key not in seen and key not in allow_absent:
            raise SchemaError(
                f"{path}: feature {name!r}: key {key!r} is absent from all of the first "
                f"{len(examples)} record(s), so every value would be the default; keys "
                f"present: {sorted(seen)[:40]}" + _did_you_mean(key, seen) + " (fix the "
                "schema, or list the key in allow_absent if it is that sparse)"
            )


def check_first_example(path: str, compression: str, schema: Schema) -> None:
    """Kinds and required keys of the first record only (`tfinput.convert` uses it)."""
    _check_first_examples(path, compression, schema, allow_absent=schema.columns())


def _tf_message(e: BaseException, path: str) -> str:
    """A TensorFlow error's sentence without graph-node noise or the path again."""
    from tfinput.pipeline import clean_error

    text = clean_error(e).replace(path, "").strip(" :")
    return re.sub(r"\s*\(\w+Error: the file is corrupt or truncated\)$", "", text)


def _check_example_kinds(path: str, example: Any, schema: Schema) -> None:
    present = example.features.feature
    checks: list[tuple[str, str, Any, bool]] = []
    for f in schema.features:
        required = isinstance(f, Categorical) and f.default is None
        checks.append((f.name, f.source, f, required))
        if isinstance(f, MultiHot) and f.weights:
            weights = Dense(name=f.weights)
            checks.append((f.name, f.weights, weights, False))
    for lab in schema.labels:
        checks.append((lab.name, lab.source, lab, lab.default is None))
    for name, key, f, required in checks:
        if key not in present:
            if required:
                raise SchemaError(
                    f"{path}: feature {name!r}: key {key!r} is missing from the first record "
                    f"and the schema gives it no default; keys present: {sorted(present)[:40]}"
                    + _did_you_mean(key, present)
                )
            continue
        found = present[key].WhichOneof("kind")
        expected = _expected_kind(f)
        if found is not None and found != expected:
            hint = {"int64_list": "int64", "float_list": "float32", "bytes_list": "string"}[found]
            raise SchemaError(
                f"{path}: feature {name!r}: the schema expects {expected} "
                f"(dtype {f.dtype}) but the file holds {found}; set dtype={hint!r} or fix the data"
            )


def _did_you_mean(key: str, candidates: Any) -> str:
    close = difflib.get_close_matches(key, list(candidates), n=3)
    return f"; did you mean {close}?" if close else ""


def _first_line(e: BaseException) -> str:
    text = getattr(e, "message", None) or str(e)
    return text.strip().splitlines()[0] if text.strip() else type(e).__name__


# ---------------------------------------------------------------------- Parquet
def _arrow_kind(t: Any) -> str:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float"
    if pa.types.is_boolean(t):
        return "bool"
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or (pa.types.is_large_binary(t))
    ):
        return "string"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return "list<" + _arrow_kind(t.value_type) + ">"
    return str(t)


def _expected_arrow(f: Dense | Categorical | MultiHot | Label) -> tuple[str, ...]:
    if isinstance(f, Dense):
        return ("int", "float", "bool") if f.length is None else ("list<int>", "list<float>")
    if isinstance(f, Label):
        return ("int", "float", "bool")
    base = "int" if f.dtype == "int64" else "string"
    return (base,) if isinstance(f, Categorical) else (f"list<{base}>",)


@functools.lru_cache(maxsize=4096)
def _parquet_columns(path: str, mtime_ns: int | None, size: int | None) -> dict[str, tuple]:
    """``{column: (kind, arrow type)}`` from a Parquet footer, cached per file version
    (the tuner and bench build the same pipeline many times)."""
    import pyarrow.parquet as pq

    del mtime_ns, size  # part of the cache key only
    try:
        arrow_schema = pq.read_schema(path)
    except Exception as e:  # pyarrow raises ArrowInvalid/OSError variants
        raise DataError(f"{path}: not a readable Parquet file ({_first_line(e)})") from e
    return {
        field.name: (_arrow_kind(field.type), str(field.type), _arrow_type_key(field.type))
        for field in arrow_schema
    }


_INT_BITS = {f"{u}int{n}": (u == "u", n) for u in ("", "u") for n in (8, 16, 32, 64)}
_FLOAT_BITS = {"halffloat": 16, "float": 32, "double": 64}


def _reads_as(later: str, first: str) -> bool:
    """Whether every value of Arrow type ``later`` converts exactly (or, for ints read
    as floats, as pyarrow always has) into type ``first`` (type keys)."""
    if later == first:
        return True
    if later.startswith("list<") and first.startswith("list<"):
        return _reads_as(later[5:-1], first[5:-1])
    if first in _FLOAT_BITS:
        if later in _FLOAT_BITS:
            return _FLOAT_BITS[later] <= _FLOAT_BITS[first]
        return later in _INT_BITS or later == "bool"
    if first in _INT_BITS and later in _INT_BITS:
        (l_unsigned, l_bits), (f_unsigned, f_bits) = _INT_BITS[later], _INT_BITS[first]
        if l_unsigned == f_unsigned:
            return l_bits <= f_bits
        return l_unsigned and l_bits < f_bits  # uintN fits in a wider signed int
    return later == "bool" and first in _INT_BITS


def _arrow_type_key(t: Any) -> str:
    """An Arrow type without the names of list item fields and dictionary encoding, so
    files that store the same values compare equal whoever wrote them."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return _arrow_type_key(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return f"list<{_arrow_type_key(t.value_type)}>"
    return str(t)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParquetSource:
    """Parquet files read column by column with pyarrow record batches.

    List columns (``list<int64>``, ``list<string>``) arrive as values plus lengths and
    become ragged tensors with no per-row Python. Files are read by pyarrow's own
    threads (`interleave_cycle_length` files ahead); exact batches are cut from the
    stream, so no rows are lost at file boundaries.

    Attributes:
      paths: Files, globs or directories.
      engine: ``pyarrow`` (default) or ``tensorflow-io`` (flat columns only, and only
        where its native ops load for the installed TensorFlow).
      empty_files: ``skip`` (default; logged) or ``error`` for zero-byte files.
    """

    paths: tuple[str, ...]
    engine: str = "pyarrow"
    empty_files: str = "skip"

    kind = "parquet"

    def __post_init__(self) -> None:
        if self.engine not in ("pyarrow", "tensorflow-io"):
            raise SourceError(
                f"Parquet engine {self.engine!r} unknown; expected 'pyarrow' or 'tensorflow-io'"
            )

    def files(self) -> list[str]:
        files = resolve_paths(self.paths, what="Parquet")
        return _drop_empty(files, self.empty_files)[0]

    def count_records(self, path: str) -> int | None:
        """Rows in one file, from its footer (`Pipeline.check` reports it)."""
        import pyarrow.parquet as pq

        try:
            return int(pq.ParquetFile(path).metadata.num_rows)
        except Exception:  # unreadable: the check reports why
            return None

    def validate(self, files: list[str], schema: Schema) -> None:
        """Check every file's Parquet schema against the tfinput schema (footers only;
        a footer already read is not read again until the file changes). A column
        whose type differs between files is a `SchemaError` naming both files."""
        wanted = [(f.name, f.source, _expected_arrow(f)) for f in schema.features]
        wanted += [
            (f.name, f.weights, ("list<float>", "list<int>")) for f in schema.multi_hot if f.weights
        ]
        wanted += [(lab.name, lab.source, _expected_arrow(lab)) for lab in schema.labels]
        first: dict[str, tuple[str, str, str]] = {}  # column -> (path, type, type key)
        for path in files:
            stat = os.stat(path) if "://" not in path else None
            columns = _parquet_columns(path, stat and stat.st_mtime_ns, stat and stat.st_size)
            for name, column, expected in wanted:
                if column not in columns:
                    names = list(columns)
                    raise SchemaError(
                        f"{path}: feature {name!r}: column {column!r} is missing; columns: "
                        f"{names[:40]}" + _did_you_mean(column, names)
                    )
                found, arrow_type, key = columns[column]
                if found not in expected:
                    raise SchemaError(
                        f"{path}: feature {name!r}: column {column!r} has type {found} "
                        f"({arrow_type}); the schema expects {' or '.join(expected)}"
                    )
                seen = first.setdefault(column, (path, arrow_type, key))
                if not _reads_as(key, seen[2]):
                    # pyarrow reads every file with the first file's column types; a later
                    # file whose values may not fit fails with a bare ArrowInvalid.
                    raise SchemaError(
                        f"{path}: feature {name!r}: column {column!r} has type {arrow_type} "
                        f"but {seen[0]} has {seen[1]}, and every file is read with the first "
                        "file's types; store the column with one type in every file (or a "
                        "narrower one in later files), or read the files as separate pipelines"
                    )

    def encoded_batches(
        self,
        files: list[str],
        schema: Schema,
        config: PipelineConfig,
        batch_size: int,
        *,
        shuffle_files: bool,
    ) -> tuple[tf.data.Dataset, Decode]:
        if self.engine == "tensorflow-io":
            return _tfio_parquet(files, schema, config, batch_size)
        signature = _parquet_signature(schema)
        reader = _ParquetBatches(
            files=files,
            schema=schema,
            config=config,
            batch_size=batch_size,
            shuffle_files=shuffle_files,
        )
        ds = tf.data.Dataset.from_generator(reader, output_signature=signature)
        if config.cache:
            ds = ds.cache()
        lists = [(f.source, f.weights) for f in schema.multi_hot]

        def decode(enc: dict[str, tf.Tensor]) -> dict[str, Any]:
            raw = {k: v for k, v in enc.items() if "/" not in k}
            for source, weights in lists:
                for col in (source, weights):
                    if col:
                        raw[col] = tf.RaggedTensor.from_row_lengths(
                            enc[col + "/values"], enc[col + "/lengths"], validate=False
                        )
            return raw

        return ds, decode


def _parquet_signature(schema: Schema) -> dict[str, tf.TensorSpec]:
    sig: dict[str, tf.TensorSpec] = {}
    for f in schema.features:
        if isinstance(f, Dense):
            shape = [None] if f.length is None else [None, f.length]
            sig[f.source] = tf.TensorSpec(shape, tf.float32)
        elif isinstance(f, Categorical):
            sig[f.source] = tf.TensorSpec([None], tf.int64 if f.dtype == "int64" else tf.string)
        else:
            dtype = tf.int64 if f.dtype == "int64" else tf.string
            sig[f.source + "/values"] = tf.TensorSpec([None], dtype)
            sig[f.source + "/lengths"] = tf.TensorSpec([None], tf.int64)
            if f.weights:
                sig[f.weights + "/values"] = tf.TensorSpec([None], tf.float32)
                sig[f.weights + "/lengths"] = tf.TensorSpec([None], tf.int64)
    for lab in schema.labels:
        sig[lab.source] = tf.TensorSpec([None], tf.float32)
    return sig


@dataclasses.dataclass
class _ParquetBatches:
    """Generator factory: exact batches of ``batch_size`` rows across file boundaries."""

    files: list[str]
    schema: Schema
    config: PipelineConfig
    batch_size: int
    shuffle_files: bool
    epoch: int = 0

    def __call__(self) -> Iterator[dict[str, np.ndarray]]:
        import pyarrow as pa
        import pyarrow.dataset as pads

        cfg = self.config
        seed = cfg.shuffle_seed
        rng = np.random.default_rng(None if seed is None else seed + self.epoch)
        self.epoch += 1
        files = list(self.files)
        if self.shuffle_files:
            rng.shuffle(files)
        readahead = 4 if cfg.interleave_cycle_length == AUTOTUNE else cfg.interleave_cycle_length
        columns = self.schema.columns()
        dataset = pads.dataset(files, format="parquet")
        scanner = dataset.scanner(
            columns=columns,
            batch_size=max(self.batch_size, 1 << 14),
            use_threads=cfg.interleave_parallelism != 1,
            fragment_readahead=readahead,
            batch_readahead=max(readahead * 4, 4),
        )
        window = max(self.batch_size, cfg.shuffle_buffer)
        pending: list[pa.RecordBatch] = []
        rows = 0
        for tagged in scanner.scan_batches():
            rb = tagged.record_batch
            if rb.num_rows == 0:
                continue
            rb = _fill_nulls(rb, self.schema, tagged.fragment.path)
            pending.append(rb)
            rows += rb.num_rows
            if rows < window:
                continue
            table = pa.Table.from_batches(pending)
            if cfg.shuffle_buffer:
                table = table.take(rng.permutation(table.num_rows))
            full = (table.num_rows // self.batch_size) * self.batch_size
            for start in range(0, full, self.batch_size):
                yield _columns(table.slice(start, self.batch_size), self.schema)
            rest = table.slice(full)
            pending, rows = rest.to_batches(), rest.num_rows
        if rows:
            table = pa.Table.from_batches(pending)
            if cfg.shuffle_buffer:
                table = table.take(rng.permutation(table.num_rows))
            for start in range(0, table.num_rows, self.batch_size):
                chunk = table.slice(start, self.batch_size)
                if chunk.num_rows == self.batch_size or not cfg.drop_remainder:
                    yield _columns(chunk, self.schema)


def _fill_nulls(rb: Any, schema: Schema, path: str) -> Any:
    """Replace nulls by defaults; a null in a required column is a DataError."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lists = [f.source for f in schema.dense if f.length is not None]
    for f in schema.multi_hot:
        lists += [f.source, f.weights] if f.weights else [f.source]
    for name in lists:  # a null *inside* a list has no default: say so, naming the file
        inner = pc.list_flatten(rb.column(name)).null_count
        if inner:
            raise DataError(
                f"{path}: column {name!r}: {inner} null value(s) inside lists; nulls inside "
                "a list have no default (a null list is an empty list); fix the data"
            )
    if not any(col.null_count for col in rb.columns):
        return rb
    arrays = dict(zip(rb.schema.names, rb.columns))
    defaults: dict[str, Any] = {}
    for f in schema.features:
        if isinstance(f, MultiHot):
            defaults[f.source] = "empty"
            if f.weights:
                defaults[f.weights] = "empty"
        elif isinstance(f, Dense):
            defaults[f.source] = [f.default] * f.length if f.length else f.default
        else:
            defaults[f.source] = f.default
    for lab in schema.labels:
        defaults[lab.source] = lab.default
    for name, arr in arrays.items():
        if not arr.null_count:
            continue
        default = defaults.get(name)
        if default is None:
            raise DataError(
                f"{path}: column {name!r}: {arr.null_count} null value(s) but the schema gives "
                "no default for it; add a default or fix the data"
            )
        if default == "empty":
            # A null list is an empty list: keep the offsets, drop the validity bitmap.
            arrays[name] = pc.if_else(pc.is_null(arr), pa.scalar([], arr.type), arr)
        elif isinstance(default, list):  # a null vector is the default vector
            fill = pa.scalar(default, pa.list_(pa.float64())).cast(arr.type, safe=False)
            arrays[name] = pc.if_else(pc.is_null(arr), fill, arr)
        else:
            arrays[name] = pc.fill_null(arr, pa.scalar(default).cast(arr.type))
    return pa.RecordBatch.from_arrays(list(arrays.values()), names=list(arrays))


def _columns(table: Any, schema: Schema) -> dict[str, np.ndarray]:
    import pyarrow as pa
    import pyarrow.compute as pc

    out: dict[str, np.ndarray] = {}

    def numeric(col: Any, dtype: Any) -> np.ndarray:
        return col.cast(dtype).to_numpy() if col.type != dtype else col.to_numpy()

    def listed(col: Any, key: str, dtype: Any) -> None:
        values = pc.list_flatten(col)
        if dtype == pa.string():
            out[key + "/values"] = values.cast(pa.binary()).to_numpy(zero_copy_only=False)
        else:
            out[key + "/values"] = numeric(values, dtype)
        out[key + "/lengths"] = pc.list_value_length(col).to_numpy().astype(np.int64)

    for f in schema.features:
        col = table.column(f.source)
        if isinstance(f, Dense):
            if f.length is None:
                out[f.source] = numeric(col, pa.float32())
            else:
                lengths = pc.list_value_length(col).to_numpy()
                if (lengths != f.length).any():
                    bad = int(np.flatnonzero(lengths != f.length)[0])
                    raise DataError(
                        f"feature {f.name!r}: expected vectors of length {f.length}, found a "
                        f"row of length {int(lengths[bad])}"
                    )
                values = numeric(pc.list_flatten(col), pa.float32())
                out[f.source] = values.reshape(-1, f.length)
        elif isinstance(f, Categorical):
            if f.dtype == "int64":
                out[f.source] = numeric(col, pa.int64())
            else:
                out[f.source] = col.cast(pa.binary()).to_numpy(zero_copy_only=False)
        else:
            listed(col, f.source, pa.int64() if f.dtype == "int64" else pa.string())
            if f.weights:
                listed(table.column(f.weights), f.weights, pa.float32())
    for lab in schema.labels:
        out[lab.source] = numeric(table.column(lab.source), pa.float32())
    return out


def _tfio_parquet(
    files: list[str], schema: Schema, config: PipelineConfig, batch_size: int
) -> tuple[tf.data.Dataset, Decode]:
    """tensorflow-io's Parquet reader: flat columns only (tensorflow/io#1562)."""
    try:
        import tensorflow_io as tfio

        tfio.IODataset.from_parquet  # noqa: B018 - attribute access loads the native ops
    except Exception as e:  # ImportError, or NotFoundError for undefined symbols
        raise SourceError(
            f"the tensorflow-io Parquet engine cannot be used with the installed TensorFlow "
            f"{tf.__version__} ({_first_line(e)}); tensorflow-io 0.37.1 loads only on "
            "TensorFlow 2.16/2.17. Use engine='pyarrow' (the default), which reads every "
            "column type including lists"
        ) from e
    if schema.multi_hot or any(f.length for f in schema.dense):
        raise SchemaError(
            "the tensorflow-io Parquet engine reads only one element of list columns "
            "(tensorflow/io#1562); use engine='pyarrow' for list or vector features"
        )
    columns = schema.columns()

    def read(path: tf.Tensor) -> tf.data.Dataset:
        return tfio.IODataset.from_parquet(path, columns=columns)

    ds = tf.data.Dataset.from_tensor_slices(files).interleave(
        read,
        cycle_length=config.interleave_cycle_length,
        num_parallel_calls=_opt(config.interleave_parallelism),
        deterministic=_deterministic(config) if _opt(config.interleave_parallelism) else None,
    )
    ds = ds.batch(batch_size, drop_remainder=config.drop_remainder)

    def decode(enc: Any) -> dict[str, Any]:
        return {k.decode() if isinstance(k, bytes) else k: v for k, v in dict(enc).items()}

    return ds, decode


# ------------------------------------------------------------ wrapped datasets
def _check_wrapped_shape(name: str, key: str, f: Any, shape: tf.TensorShape, batched: bool) -> None:
    """Scalars may come as ``[]`` or ``[1]`` per example (``FixedLenFeature([1])``),
    vectors as ``[length]``; batched elements add a leading batch dimension."""
    dims = shape.as_list() if shape.rank is not None else None
    if dims is None:
        return  # unknown rank: checked by the transforms' ops at run time
    if batched:
        dims = dims[1:]
    length = getattr(f, "length", None)
    allowed = ([length],) if length is not None else ([], [1])
    if dims not in allowed and not (length is not None and dims == [None]):
        kind = f"vectors of length {length}" if length is not None else "scalars ([] or [1])"
        raise SchemaError(
            f"wrapped dataset: feature {name!r}: key {key!r} has shape {dims} per example; "
            f"the schema expects {kind}"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class DatasetSource:
    """A user's own ``tf.data.Dataset`` of feature dicts, wrapped so every tfinput
    transform applies.

    Attributes:
      dataset: Either a dataset or a zero-argument callable returning one (called at
        every build, so each build gets a fresh input). Elements are dicts keyed by the
        schema's source columns: scalars for dense/categorical/labels, 1-D tensors of
        any length for multi-hot lists (or, with ``batched=True``, ``[B]`` tensors and
        ``RaggedTensor`` lists).
      batched: Whether elements are already batches.
    """

    dataset: Any
    batched: bool = False

    kind = "dataset"

    def files(self) -> list[str]:
        return []

    def make(self) -> tf.data.Dataset:
        ds = self.dataset() if callable(self.dataset) else self.dataset
        if not isinstance(ds, tf.data.Dataset):
            raise SourceError(
                f"wrapped source: expected a tf.data.Dataset, got {type(ds).__name__}"
            )
        return ds

    def validate(self, files: list[str], schema: Schema) -> None:
        spec = self.make().element_spec
        if not isinstance(spec, dict):
            raise SchemaError(
                f"wrapped dataset: elements must be dicts keyed by column, got {spec}"
            )
        wanted = [(f.name, f.source, f) for f in schema.features]
        wanted += [(lab.name, lab.source, lab) for lab in schema.labels]
        for name, key, f in wanted:
            if key not in spec:
                raise SchemaError(
                    f"wrapped dataset: feature {name!r}: key {key!r} missing; keys: "
                    f"{sorted(spec)}" + _did_you_mean(key, spec)
                )
            dtype = spec[key].dtype
            if not isinstance(f, MultiHot):
                _check_wrapped_shape(name, key, f, spec[key].shape, self.batched)
            want_string = getattr(f, "dtype", None) == "string"
            if want_string != (dtype == tf.string):
                raise SchemaError(
                    f"wrapped dataset: feature {name!r}: key {key!r} has dtype {dtype.name}; "
                    f"the schema expects {'string' if want_string else 'numbers'}"
                )

    def encoded_batches(
        self,
        files: list[str],
        schema: Schema,
        config: PipelineConfig,
        batch_size: int,
        *,
        shuffle_files: bool,
        input_context: Any = None,
    ) -> tuple[tf.data.Dataset, Decode]:
        ds = self.make()
        if input_context is not None and input_context.num_input_pipelines > 1:
            ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if config.cache:
            ds = ds.cache()
        if not self.batched:
            if config.shuffle_buffer:
                buffer = config.shuffle_buffer
                known = int(ds.cardinality())  # -1 infinite, -2 unknown
                if 0 <= known < buffer:  # a larger buffer only costs ~24 bytes a slot
                    log.warning(
                        "tfinput: shuffle_buffer %d is larger than the wrapped dataset's %d "
                        "element(s); using %d",
                        buffer,
                        known,
                        max(known, 1),
                    )
                    buffer = max(known, 1)
                ds = ds.shuffle(buffer, seed=config.shuffle_seed)
            ds = ds.ragged_batch(batch_size, drop_remainder=config.drop_remainder)
        lists = {f.source for f in schema.multi_hot} | {f.weights for f in schema.multi_hot}
        scalars = [
            f.source
            for f in schema.features
            if not isinstance(f, MultiHot) and getattr(f, "length", None) is None
        ] + [lab.source for lab in schema.labels]

        def decode(batch: dict[str, Any]) -> dict[str, Any]:
            out = dict(batch)
            for key in scalars:  # FixedLenFeature([1]) gives [B, 1]: squeeze to [B]
                value = out[key]
                if isinstance(value, tf.Tensor) and value.shape.rank == 2 and value.shape[1] == 1:
                    out[key] = tf.squeeze(value, axis=1)
            for key in lists:
                if key and key in out and isinstance(out[key], tf.Tensor):
                    out[key] = tf.RaggedTensor.from_tensor(out[key])
            for f in schema.dense:
                out[f.source] = tf.cast(out[f.source], tf.float32)
            for f in schema.categorical:  # int32 ids (Python ints, numpy) become int64
                value = out[f.source]
                if f.dtype == "int64" and value.dtype != tf.int64:
                    out[f.source] = (
                        value.with_values(tf.cast(value.values, tf.int64))
                        if isinstance(value, tf.RaggedTensor)
                        else tf.cast(value, tf.int64)
                    )
            return out

        return ds, decode
