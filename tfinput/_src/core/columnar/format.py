"""The columnar record format: version, reserved keys, stored columns and checksums, and
the ``manifest.json`` of a data set (its model, JSON form, and how it is found).

A record is one serialized ``tf.train.Example`` holding one chunk of rows; see
`tfinput.columnar_records` for the layout. This module names the keys and dtypes every
other part (writer, reader, offline verification) agrees on. Manifests are cached by
path, modification time and size, so a build that names many files of one data set
parses its manifest once.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tfinput._src.core.errors import SchemaError, SourceError
from tfinput._src.core.schema import Categorical, Dense, Schema

#: Format name and version, written into every manifest and (as ``@format``) record.
FORMAT = "tfinput.columnar/1"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
EXTENSION = ".tfcol"
#: Rows per record: divides every power-of-two batch size >= 1024.
DEFAULT_CHUNK_ROWS = 1024

#: Suffix of the key holding a list column's int32 row lengths.
LENGTHS_SUFFIX = "@lengths"
#: Meta keys of every record: row count, checksum block, format version.
ROWS_KEY, CHECK_KEY, VERSION_KEY = "@rows", "@check", "@format"
#: Stored dtypes that are raw little-endian arrays, and their NumPy dtypes.
NUMERIC_DTYPES = ("float32", "int64")
NUMPY_DTYPES = {"float32": "<f4", "int64": "<i8"}
#: TFRecord framing per record: length (8) + length CRC (4) + data CRC (4).
RECORD_FRAMING = 16


@dataclasses.dataclass(frozen=True, kw_only=True)
class Column:
    """How one source column is stored.

    Attributes:
      name: Source column (the tf.Example key / Parquet column of the other formats).
      layout: ``fixed`` (one value, or ``width`` values, per row) or ``list``
        (variable-length: values plus int32 row lengths).
      dtype: ``float32``, ``int64`` or ``string``.
      width: Values per row of a fixed vector column; None for a scalar.
    """

    name: str
    layout: str
    dtype: str
    width: int | None = None

    def __post_init__(self) -> None:
        if self.layout not in ("fixed", "list"):
            raise SchemaError(
                f"column {self.name!r}: layout must be 'fixed' or 'list', got {self.layout!r}"
            )
        if self.dtype not in ("float32", "int64", "string"):
            raise SchemaError(
                f"column {self.name!r}: dtype must be float32, int64 or string, got {self.dtype!r}"
            )

    @property
    def keys(self) -> tuple[str, ...]:
        """The record keys holding this column (values, then row lengths for lists)."""
        return (self.name, self.name + LENGTHS_SUFFIX) if self.layout == "list" else (self.name,)

    def describe(self) -> str:
        """The layout, dtype and width, as error messages show them (``fixed float32[3]``)."""
        shape = f"[{self.width}]" if self.width else ""
        return f"{self.layout} {self.dtype}{shape}"

    def to_dict(self) -> dict[str, Any]:
        """The manifest's JSON form (``width`` only for vectors)."""
        out: dict[str, Any] = {"name": self.name, "layout": self.layout, "dtype": self.dtype}
        if self.width is not None:
            out["width"] = self.width
        return out


def storage_columns(schema: Schema) -> tuple[Column, ...]:
    """The stored columns a schema reads, in `Schema.columns` order.

    Raises:
      SchemaError: two features read one column with different layouts, or a column
        name collides with a reserved record key (``@...`` or ``...@lengths``).
    """
    out: dict[str, tuple[Column, str]] = {}

    def add(col: Column, feature: str) -> None:
        if col.name.startswith("@") or col.name.endswith(LENGTHS_SUFFIX):
            raise SchemaError(
                f"feature {feature!r}: column name {col.name!r} is reserved by the columnar "
                "format (names starting with '@' or ending with '@lengths'); rename it"
            )
        old = out.get(col.name)
        if old is not None and old[0] != col:
            raise SchemaError(
                f"column {col.name!r} is read by feature {old[1]!r} as {old[0].describe()} "
                f"and by feature {feature!r} as {col.describe()}; the columnar format "
                "stores one layout per column"
            )
        out.setdefault(col.name, (col, feature))

    for f in schema.features:
        if isinstance(f, Dense):
            add(Column(name=f.source, layout="fixed", dtype=f.dtype, width=f.length), f.name)
        elif isinstance(f, Categorical):
            add(Column(name=f.source, layout="fixed", dtype=f.dtype), f.name)
        else:
            add(Column(name=f.source, layout="list", dtype=f.dtype), f.name)
            if f.weights:
                add(Column(name=f.weights, layout="list", dtype="float32"), f.name)
    for lab in schema.labels:
        add(Column(name=lab.source, layout="fixed", dtype=lab.dtype), lab.name)
    return tuple(c for c, _ in out.values())


def payload_keys(columns: Sequence[Column]) -> list[str]:
    """Every payload key of a record, in checksum order."""
    return [k for c in columns for k in c.keys]


def payload_check(payload: Sequence[bytes]) -> bytes:
    """A record's ``@check`` value: the 8-byte FarmHash64 of each payload value, joined."""
    import tensorflow as tf

    return tf.fingerprint(tf.constant(payload, dtype=tf.string)).numpy().tobytes()


def chunk_digest(check: bytes) -> str:
    """The manifest's digest of a chunk: the hex FarmHash64 of its ``@check`` value."""
    import tensorflow as tf

    return tf.fingerprint(tf.constant([check])).numpy()[0].tobytes().hex()


# ----------------------------------------------------------------- the manifest
@dataclasses.dataclass(frozen=True, kw_only=True)
class FileEntry:
    """One data file as the manifest records it.

    Attributes:
      name: File name, relative to the manifest's directory.
      rows: Rows in the file.
      bytes: File size in bytes.
      offsets: Byte offset of each chunk's record.
      digests: Per chunk, the hex FarmHash64 fingerprint of its ``@check`` value.
    """

    name: str
    rows: int
    bytes: int
    offsets: tuple[int, ...]
    digests: tuple[str, ...]

    @property
    def chunks(self) -> int:
        """Chunks (records) in the file."""
        return len(self.offsets)

    def chunk_at(self, offset: int) -> int:
        """Index of the chunk whose record spans byte ``offset``."""
        return max(0, bisect.bisect_right(self.offsets, offset) - 1)

    def to_dict(self) -> dict[str, Any]:
        """The manifest's JSON form."""
        return {
            "name": self.name,
            "rows": self.rows,
            "bytes": self.bytes,
            "offsets": list(self.offsets),
            "digests": list(self.digests),
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Manifest:
    """The ``manifest.json`` of a columnar data set.

    Attributes:
      path: Where it was read from (or will be written).
      chunk_rows: Rows per record (the last chunk of the data set may hold fewer).
      schema: The schema the data were written with.
      columns: Stored columns, in record (and checksum) order.
      files: The data files, in order.
      version: Format version (1).
    """

    path: str
    chunk_rows: int
    schema: Schema
    columns: tuple[Column, ...]
    files: tuple[FileEntry, ...]
    version: int = FORMAT_VERSION

    @property
    def directory(self) -> str:
        """The directory holding the manifest and its data files."""
        return os.path.dirname(self.path)

    @property
    def rows(self) -> int:
        """Rows in the whole data set."""
        return sum(f.rows for f in self.files)

    @property
    def paths(self) -> list[str]:
        """The data files' paths, in order."""
        return [os.path.join(self.directory, f.name) for f in self.files]

    def column(self, name: str) -> Column | None:
        """The stored column ``name``, or None."""
        return next((c for c in self.columns if c.name == name), None)

    def entry(self, path: str) -> FileEntry | None:
        """The entry of the data file at ``path`` (matched by file name), or None."""
        name = os.path.basename(path)
        return next((f for f in self.files if f.name == name), None)

    def chunk_rows_range(self, entry: FileEntry, chunk: int) -> tuple[int, int]:
        """First and last row (within the file) of a chunk."""
        first = chunk * self.chunk_rows
        return first, min(entry.rows, first + self.chunk_rows) - 1

    def to_dict(self) -> dict[str, Any]:
        """The JSON form written to ``manifest.json``."""
        return {
            "format": f"tfinput.columnar/{self.version}",
            "chunk_rows": self.chunk_rows,
            "rows": self.rows,
            "checksum": "farmhash64 (tf.fingerprint) of each payload value; digest: of @check",
            "columns": [c.to_dict() for c in self.columns],
            "schema": self.schema.to_dict(),
            "files": [f.to_dict() for f in self.files],
        }

    def write(self) -> str:
        """Write ``manifest.json`` at `path`; returns the path."""
        Path(self.path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return self.path

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, path: str) -> Manifest:
        """Parse a manifest.

        Raises:
          SourceError: another format or version, or a malformed manifest.
        """
        fmt = data.get("format") if isinstance(data, Mapping) else None
        if fmt != FORMAT:
            found = fmt if isinstance(fmt, str) else "no format field"
            raise SourceError(
                f"{path}: format {found!r} is not supported; this tfinput reads {FORMAT!r}. "
                "Convert the data again with this version (`tfinput convert --to columnar`)"
            )
        try:
            files = tuple(
                FileEntry(
                    name=str(f["name"]),
                    rows=int(f["rows"]),
                    bytes=int(f["bytes"]),
                    offsets=tuple(int(x) for x in f["offsets"]),
                    digests=tuple(str(x) for x in f["digests"]),
                )
                for f in data["files"]
            )
            columns = tuple(
                Column(name=c["name"], layout=c["layout"], dtype=c["dtype"], width=c.get("width"))
                for c in data["columns"]
            )
            chunk_rows = int(data["chunk_rows"])
            schema = Schema.from_dict(data["schema"], source=f"{path}: schema")
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, SchemaError):
                raise
            raise SourceError(f"{path}: malformed manifest ({type(e).__name__}: {e})") from e
        for f in files:
            if len(f.offsets) != len(f.digests) or len(f.offsets) != math.ceil(f.rows / chunk_rows):
                raise SourceError(
                    f"{path}: malformed manifest: file {f.name!r} has {f.rows} rows, "
                    f"{len(f.offsets)} offsets and {len(f.digests)} digests for chunks of "
                    f"{chunk_rows} rows"
                )
        return cls(path=path, chunk_rows=chunk_rows, schema=schema, columns=columns, files=files)


@functools.lru_cache(maxsize=64)
def _load_manifest(path: str, _mtime_ns: int, _size: int) -> Manifest:
    import tensorflow as tf

    try:
        text = tf.io.gfile.GFile(path, "r").read() if "://" in path else Path(path).read_text()
    except OSError as e:
        raise SourceError(f"cannot read columnar manifest {path}: {e}") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SourceError(f"{path}: not valid JSON ({e})") from e
    return Manifest.from_dict(data, path=path)


def file_stat(path: str) -> tuple[int, int] | None:
    """``(mtime_ns, size)`` of a local or remote (``scheme://``) file, or None if missing."""
    if "://" in path:
        import tensorflow as tf

        if not tf.io.gfile.exists(path):
            return None
        st = tf.io.gfile.stat(path)
        return int(st.mtime_nsec), int(st.length)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size


def is_dir(path: str) -> bool:
    """Whether ``path`` is a directory (a remote path with glob characters is not)."""
    if "://" in path:
        import tensorflow as tf

        return not any(ch in path for ch in "*?[") and tf.io.gfile.isdir(path)
    return os.path.isdir(path)


def _manifest_path(p: str) -> str:
    if is_dir(p):
        return os.path.join(p, MANIFEST)
    if p.endswith(".json"):
        return p
    return os.path.join(os.path.dirname(p) or ".", MANIFEST)


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read the manifest of a columnar data set.

    Args:
      path: The data set's directory, its ``manifest.json``, or one of its data files.

    Raises:
      SourceError: no manifest there, or one of another format version.
    """
    p = os.fspath(path)
    candidate = _manifest_path(p)
    stat = file_stat(candidate)
    if stat is None:
        raise SourceError(
            f"no columnar manifest {candidate!r} for {p!r}: a columnar data set is a "
            f"directory of *{EXTENSION} files with a {MANIFEST} beside them (write one with "
            "`tfinput convert --to columnar`)"
        )
    return _load_manifest(candidate, *stat)


def is_columnar(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a columnar directory, manifest or data file: a
    ``manifest.json`` of any ``tfinput.columnar/*`` version is there (so that reading
    it then reports a version mismatch instead of trying another format)."""
    try:
        read_manifest(path)
        return True
    except SourceError:
        pass
    try:
        data = json.loads(Path(_manifest_path(os.fspath(path))).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and str(data.get("format", "")).startswith("tfinput.columnar/")


def _check_mergeable(parts: Sequence[Manifest], out: Path) -> None:
    """Raise `SourceError` unless ``parts`` are shards of one conversion, each with
    every data file complete."""
    if not parts:
        raise SourceError(f"merge manifests into {out}: no manifests to merge")
    first = parts[0]
    for m in parts[1:]:
        for what, mine, theirs in (
            ("chunk_rows", m.chunk_rows, first.chunk_rows),
            ("columns", m.columns, first.columns),
            ("schema", m.schema, first.schema),
            ("version", m.version, first.version),
        ):
            if mine != theirs:
                raise SourceError(
                    f"merge manifests into {out}: {m.path} was written with another "
                    f"{what} than {first.path}; only shards of one conversion can be merged"
                )
    for m in parts:
        for f in m.files:
            src = os.path.join(m.directory, f.name)
            stat = file_stat(src)
            if stat is None or stat[1] != f.bytes:
                found = "missing" if stat is None else f"{stat[1]} bytes"
                raise SourceError(
                    f"merge manifests into {out}: {src} is {found}, its manifest says "
                    f"{f.bytes} bytes; the shard was not written completely"
                )


def merge_manifests(
    parts: Sequence[Manifest], path: str | os.PathLike[str], *, prefix: str = "part"
) -> Manifest:
    """Join the manifests of shards written apart (by parallel tasks) into one data set.

    The data files of every part are moved beside ``path`` and renamed
    ``<prefix>-NNNNN-of-MMMMM.tfcol`` in the order of ``parts`` (and of each part's
    files); their entries keep their rows, sizes, record offsets and per-chunk digests,
    so the merged manifest checks the same checksums. The parts' own manifests are
    removed; the merged one is written at ``path``. A file's last chunk may be partial
    in any part (readers skip such chunks only when a batch must be whole chunks).

    Args:
      parts: The per-shard manifests (as `read_manifest` or `ColumnarWriter.close`
        return them), in the order their rows should be read.
      path: Where to write the merged ``manifest.json``.
      prefix: File name prefix of the merged data files.

    Returns:
      The merged `Manifest` (written at ``path``).

    Raises:
      SourceError: no parts, parts written with another chunk size, schema or columns,
        a data file missing or of another size than its manifest says, or a name
        that would overwrite an existing file that is not one of the parts' files.
    """
    out = Path(path)
    _check_mergeable(parts, out)
    first = parts[0]
    sources = [(os.path.join(m.directory, f.name), f) for m in parts for f in m.files]
    n = len(sources)
    names = [f"{prefix}-{i:05d}-of-{n:05d}{EXTENSION}" for i in range(n)]
    own = {os.path.abspath(src) for src, _ in sources}
    clash = [
        name
        for name in names
        if (out.parent / name).exists() and os.path.abspath(out.parent / name) not in own
    ]
    if clash:
        raise SourceError(
            f"merge manifests into {out}: {clash[0]} already exists there and is not one of "
            "the shards; merge into an empty directory"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    # Two steps, so that a shard already named like a final file is never overwritten.
    staged = []
    for i, (src, _) in enumerate(sources):
        tmp = out.parent / f".merge-{i:05d}{EXTENSION}"
        os.replace(src, tmp)
        staged.append(tmp)
    entries = []
    for tmp, name, (_, f) in zip(staged, names, sources):
        os.replace(tmp, out.parent / name)
        entries.append(dataclasses.replace(f, name=name))
    for m in parts:
        if os.path.abspath(m.path) != os.path.abspath(out) and os.path.exists(m.path):
            os.unlink(m.path)
    merged = Manifest(
        path=str(out),
        chunk_rows=first.chunk_rows,
        schema=first.schema,
        columns=first.columns,
        files=tuple(entries),
        version=first.version,
    )
    merged.write()
    return merged
