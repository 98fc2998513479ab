"""pyarrow side of the Parquet source: column types, footers, and the reader of exact
batches (`ParquetBatches`), batch ``k`` of an epoch a pure function of its position.

A batch from `ParquetBatches` is a dict of numpy arrays keyed by column: scalar and
fixed-length columns under their name, each list column ``c`` as two arrays,
``c + LIST_VALUES`` (the flat values) and ``c + LIST_LENGTHS`` (the row lengths), which
`tfinput._src.core.sources.parquet.ParquetSource` turns back into ragged tensors.

Its read-ahead runs on an `IdlePool`, a thread pool whose threads exit when there is no
work. `concurrent.futures.ThreadPoolExecutor` keeps its threads until it is shut down or
collected. A reader whose dataset TensorFlow never releases (a Python function in a
tf.data graph stays referenced by TensorFlow after the dataset and its iterators are
gone) would then keep its threads, and what they hold, for the life of the process:
one set per abandoned iterator, every tuner trial. Here a thread exits after
``idle_s`` seconds without a task, and the last one to go calls ``on_idle``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np

from tfinput._src.core._input_files import check_unchanged, file_version
from tfinput._src.core._python_calls import EXITING, exiting
from tfinput._src.core.config import AUTOTUNE, PipelineConfig
from tfinput._src.core.errors import DataError, first_line
from tfinput._src.core.formats import parquet
from tfinput._src.core.schema import Categorical, Dense, Label, MultiHot, Schema
from tfinput._src.core.sources._idle_pool import IdlePool
from tfinput._src.core.sources._row_shuffle import shuffle_window

#: Key suffix of a list column's flat values in a `ParquetBatches` batch.
LIST_VALUES = "/values"
#: Key suffix of a list column's row lengths in a `ParquetBatches` batch.
LIST_LENGTHS = "/lengths"
#: Seconds without a read after which a `ParquetBatches` lets its read-ahead threads
#: exit and drops what it read ahead (read again if asked for).
READER_IDLE_S = 10.0


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


def expected_arrow(f: Dense | Categorical | MultiHot | Label) -> tuple[str, ...]:
    if isinstance(f, Dense):
        return ("int", "float", "bool") if f.length is None else ("list<int>", "list<float>")
    if isinstance(f, Label):
        return ("int", "float", "bool")
    base = "int" if f.dtype == "int64" else "string"
    return (base,) if isinstance(f, Categorical) else (f"list<{base}>",)


@functools.lru_cache(maxsize=4096)
def _footer_columns(path: str, mtime_ns: int | None, size: int | None) -> dict[str, tuple]:
    del mtime_ns, size  # part of the cache key only
    return {
        field.name: (_arrow_kind(field.type), str(field.type), _arrow_type_key(field.type))
        for field in parquet.read_schema(path)
    }


def parquet_columns(path: str) -> dict[str, tuple]:
    """``{column: (kind, arrow type, type key)}`` from a Parquet footer, cached per file
    version (the tuner and bench build the same pipeline many times).

    Raises:
      DataError: the file cannot be opened or is not Parquet.
    """
    stat = os.stat(path) if "://" not in path else None
    return _footer_columns(path, stat and stat.st_mtime_ns, stat and stat.st_size)


def footer_rows(path: str) -> int | None:
    """A local Parquet file's rows (from its cached footer); None for a remote or
    unreadable one (reading it reports why)."""
    if "://" in path:
        return None
    try:
        return parquet.num_rows(path)
    except DataError:
        return None


_INT_BITS = {f"{u}int{n}": (u == "u", n) for u in ("", "u") for n in (8, 16, 32, 64)}
_FLOAT_BITS = {"halffloat": 16, "float": 32, "double": 64}


def reads_as(later: str, first: str) -> bool:
    """Whether every value of Arrow type ``later`` converts exactly (or, for ints read
    as floats, as pyarrow always has) into type ``first`` (type keys)."""
    if later == first:
        return True
    if later.startswith("list<") and first.startswith("list<"):
        return reads_as(later[5:-1], first[5:-1])
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


@dataclasses.dataclass(frozen=True)
class _Piece:
    """Rows ``[start, start + rows)`` of an epoch's row stream: one row group."""

    file: int  # index into `ParquetBatches.files`
    group: int
    start: int
    rows: int


class _Epoch:
    """One epoch's plan (file order) and caches: row groups, shuffle windows and batches
    already read or being read ahead. Entries are dropped once the reader has moved past
    them; a dropped entry asked for again (a second iterator, a restore) is read again."""

    def __init__(self, owner: ParquetBatches, seed: int) -> None:
        self.owner = owner
        self.seed = seed
        order = list(range(len(owner.files)))
        if owner.shuffle_files:
            np.random.default_rng([seed, 0]).shuffle(order)
        pieces: list[_Piece] = []
        start = 0
        for i in order:
            for g, rows in enumerate(owner.group_rows[i]):
                if rows:
                    pieces.append(_Piece(file=i, group=g, start=start, rows=rows))
                    start += rows
        self.pieces = pieces
        self.starts = np.array([p.start for p in pieces], np.int64)
        self.ends = {(p.file, p.group): p.start + p.rows for p in pieces}
        self.lock = threading.Lock()
        self.groups: dict[tuple[int, int], Future] = {}
        self.windows: dict[int, Future] = {}
        self.batches: dict[int, Future] = {}
        self.tail: set[int] = set()  # the last batches read (`read_to_end`)

    def once(self, cache: dict, key: Any, compute: Any, *, unless_idle: bool = False) -> Any:
        """``compute()``, run once per key while cached (concurrent askers wait);
        ``unless_idle``: nothing (None) once no batch is cached (the epoch was read)."""
        with self.lock:
            if unless_idle and not self.batches:
                return None
            future = cache.get(key)
            owner = future is None
            if owner:
                future = cache[key] = Future()
        if owner:
            try:
                future.set_result(compute())
            except BaseException as e:
                future.set_exception(e)
        return future.result()

    def group(self, piece: _Piece, *, ahead: bool = False) -> Any:
        """The row group, read once while cached (``ahead``: see `once`)."""
        return self.once(
            self.groups,
            (piece.file, piece.group),
            lambda: self.owner.read_group(piece),
            unless_idle=ahead,
        )

    def window(self, j: int) -> Any:
        return self.once(self.windows, j, lambda: self._window(j))

    def _window(self, j: int) -> Any:
        """Rows ``[j * W, (j + 1) * W)`` of the stream (the last window: to the end),
        shuffled when shuffling rows."""
        import pyarrow as pa
        import pyarrow.compute as pc

        owner = self.owner
        a = j * owner.window
        b = owner.total_rows if j == owner.windows - 1 else a + owner.window
        first = int(np.searchsorted(self.starts, a, side="right")) - 1
        parts = []
        for piece in self.pieces[first:]:
            if piece.start >= b:
                break
            lo, hi = max(a, piece.start), min(b, piece.start + piece.rows)
            parts.append(self.group(piece).slice(lo - piece.start, hi - lo))
        table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        if self.owner.config.shuffle_buffer:
            rng = np.random.default_rng([self.seed, 1, j])
            table = pc.take(table, rng.permutation(table.num_rows), memory_pool=parquet.read_pool())
        return table

    def batch(self, k: int) -> dict[str, np.ndarray]:
        owner = self.owner
        j = owner.window_of(k)
        offset = k * owner.batch_size - j * owner.window
        return _columns(self.window(j).slice(offset, owner.batch_size), owner.schema)

    def read_to_end(self, k: int, last: int) -> bool:
        """Record that batch ``k`` was read; True once each of the epoch's ``last``
        batches has been (then the record starts again, for another pass)."""
        if k < self.owner.num_batches - last:
            return False
        with self.lock:
            self.tail.add(k)
            done = len(self.tail) >= min(last, self.owner.num_batches)
            if done:
                self.tail.clear()
            return done

    def drop_before(self, k: int) -> None:
        """Forget what only batches before ``k`` need."""
        owner = self.owner
        end = k >= owner.num_batches  # the whole epoch (window_of stops at the last window)
        j = owner.windows if end else owner.window_of(k)
        row = owner.total_rows if end else j * owner.window
        with self.lock:
            for key in [key for key in self.batches if key < k]:
                del self.batches[key]
            for key in [key for key in self.windows if key < j]:
                del self.windows[key]
            for key in [key for key in self.groups if self.ends[key] <= row]:
                del self.groups[key]


class ParquetBatches:
    """Exact batches of ``batch_size`` rows across file boundaries, batch ``k`` of an
    epoch a pure function of ``(files, seed, k)``: what makes the position checkpointable.

    The epoch's row stream is the files' row groups in file order (shuffled by the seed
    with ``shuffle_files``). With ``shuffle_buffer`` the stream is cut into windows of
    ``W`` rows (the buffer rounded up to whole batches, at least two batches: a window
    of one batch would only reorder its rows) and each window is permuted by ``(seed,
    window)``; the last window takes the rows after the last whole one (``W`` to ``2W -
    1`` rows), so no batch is left unmixed at the end of an epoch. Batch ``k`` is rows
    ``[k * B, (k + 1) * B)`` of the (shuffled) stream; the last one is partial unless
    ``drop_remainder``.

    Reading is random access (`batch`), but a sequential reader is served ahead: each
    call starts the next ``readahead`` batches (row groups read, nulls filled, windows
    shuffled, columns converted) on ``threads`` background threads, pyarrow releasing
    the GIL while it decodes; the next row group is decoded as soon as reading reaches
    the one before it (not when the read-ahead does: the consumer would wait for it at
    every group boundary). What the ``readahead`` batches before the latest one need is
    kept: tf.data runs the read in parallel, slightly out of order, and no row group is
    read twice in an epoch. After `READER_IDLE_S` without work the threads
    exit and what was read ahead is dropped: TensorFlow keeps a dataset's Python
    functions, and so this reader, after the dataset and its iterators are gone.

    Args:
      files: The files, in order.
      schema: The schema read.
      config: ``shuffle_buffer``, ``drop_remainder``; the interleave knobs set the
        readahead (``interleave_cycle_length``, 4 for AUTOTUNE, batches twice that) and
        the background threads (``interleave_parallelism``: that many, 4 for AUTOTUNE).
        pyarrow decodes a row group's columns in parallel on its own threads in every
        case (one thread decoding every column in turn is slower:
        benchmarks/RESULTS.md).
      batch_size: Rows per batch.
      shuffle_files: Shuffle the file order every epoch (by the epoch's seed).

    Raises:
      DataError: a file's footer cannot be read.
    """

    def __init__(
        self,
        *,
        files: list[str],
        schema: Schema,
        config: PipelineConfig,
        batch_size: int,
        shuffle_files: bool,
    ) -> None:
        self.files = list(files)
        self.schema = schema
        self.config = config
        self.batch_size = batch_size
        self.shuffle_files = shuffle_files
        # Row groups are read only from the file versions whose footers these are.
        self._versions = [file_version(p) for p in self.files]
        footers = [parquet.footer(p) for p in self.files]
        self.group_rows = [
            [f.row_group(g).num_rows for g in range(f.num_row_groups)] for f in footers
        ]
        self._footers = footers
        self.total_rows = sum(map(sum, self.group_rows))
        self.window = batch_size
        if config.shuffle_buffer:
            self.window = shuffle_window(config.shuffle_buffer, batch_size)
        # The last window takes the rows after the last whole window: no window of a
        # shuffle holds less than W rows (unless the epoch does), so every batch mixes.
        self.windows = max(1, self.total_rows // self.window)
        full, rest = divmod(self.total_rows, batch_size)
        self.num_batches = full + (1 if rest and not config.drop_remainder else 0)
        cycle = config.interleave_cycle_length
        self.readahead = 2 * (4 if cycle == AUTOTUNE else max(cycle, 1))
        threads = config.interleave_parallelism
        self.threads = 4 if threads == AUTOTUNE else max(threads, 1)
        self.columns = schema.columns()
        self._target: Any = None
        self._epochs: dict[int, _Epoch] = {}
        self._lock = threading.Lock()
        self._pool = IdlePool(
            self.threads, idle_s=READER_IDLE_S, name="tfinput-parquet", on_idle=self._forget
        )

    @property
    def shuffles(self) -> bool:
        """Whether an epoch depends on its seed (row or file shuffling)."""
        return bool(self.config.shuffle_buffer) or self.shuffle_files

    def fingerprint(self) -> int:
        """A 63-bit digest of what the batch positions mean (files and their row groups,
        batch size, the shuffle windows, drop_remainder, file shuffling): a position
        saved by one build is refused by a build where it would mean other rows."""
        what = repr(
            (
                self.files,
                self.group_rows,
                self.batch_size,
                self.window,
                bool(self.config.shuffle_buffer),
                self.config.drop_remainder,
                self.shuffle_files,
            )
            + self._last_window()
        )
        return int.from_bytes(hashlib.sha256(what.encode()).digest()[:8], "little") >> 1

    def window_of(self, k: int) -> int:
        """The window batch ``k`` is cut from."""
        return min(k * self.batch_size // self.window, self.windows - 1)

    def _last_window(self) -> tuple[int, ...]:
        """``(first row, rows)`` of the last window where it is longer than the others
        (it takes the rows after the last whole window); empty otherwise."""
        start = (self.windows - 1) * self.window
        rows = self.total_rows - start
        return (start, rows) if self.config.shuffle_buffer and rows > self.window else ()

    def epoch(self, seed: int) -> _Epoch:
        with self._lock:
            plan = self._epochs.pop(seed, None) or _Epoch(self, seed)
            self._epochs[seed] = plan  # most recently used last
            while len(self._epochs) > 2:
                del self._epochs[next(iter(self._epochs))]
            return plan

    def batch(self, seed: int, k: int) -> dict[str, np.ndarray]:
        """Batch ``k`` of the epoch of ``seed``, starting the next ones in the background.

        Raises:
          DataError: a null without default, a vector of the wrong length (naming the
            file and column).
        """
        if not 0 <= k < self.num_batches:
            raise IndexError(f"batch {k} of an epoch of {self.num_batches} batches")
        plan = self.epoch(seed)
        # tf.data runs the read in parallel, slightly out of order: keep what the batches
        # just before k need (a batch asked for after its group was dropped reads it again)
        plan.drop_before(k - self.readahead)
        started = []
        with plan.lock:
            future = plan.batches.get(k)
            for i in range(k + 1, min(k + 1 + self.readahead, self.num_batches)):
                if i not in plan.batches:
                    plan.batches[i] = Future()
                    started.append((i, plan.batches[i]))
        for i, ahead in started:
            self._submit(plan, i, ahead)
        self._decode_next_group(plan, k)
        if future is None:  # not read ahead: the first batch, or one after a restore
            batch = plan.once(plan.batches, k, lambda: plan.batch(k))
        else:
            batch = future.result()
        if plan.read_to_end(k, self.readahead + 1):
            plan.drop_before(self.num_batches)  # the epoch is read: free its rows now
        return batch

    def _decode_next_group(self, plan: _Epoch, k: int) -> None:
        """Start decoding the row group after the one batch ``k`` ends in (unless it
        is decoded or being decoded)."""
        last = min((k + 1) * self.batch_size, self.total_rows) - 1
        i = int(np.searchsorted(plan.starts, last, side="right"))
        piece = plan.pieces[i] if i < len(plan.pieces) else None
        if piece is None or (piece.file, piece.group) in plan.groups:
            return  # no next group, or it is read (`once` settles a race)

        def run() -> None:
            with contextlib.suppress(BaseException):  # kept with the group: its batch raises it
                if not exiting():  # the interpreter exits: read nothing more
                    plan.group(piece, ahead=True)

        self._pool.submit(run)

    def _submit(self, plan: _Epoch, k: int, future: Future) -> None:
        """Compute batch ``k`` on the pool into ``future`` (cached for it)."""

        def run() -> None:
            if exiting():  # the interpreter exits: read nothing more
                future.set_exception(DataError(EXITING))
                return
            try:
                future.set_result(plan.batch(k))
            except BaseException as e:
                future.set_exception(e)

        self._pool.submit(run)

    def _forget(self) -> None:
        """Drop the epochs' caches once the read-ahead threads have gone idle: an
        iterator abandoned mid-epoch (a tuner trial, an error) leaves no batches, row
        groups or shuffle windows behind. A later read computes them again."""
        with self._lock:
            self._epochs.clear()

    def __call__(self, seed: int = 0) -> Iterator[dict[str, np.ndarray]]:
        """The batches of one epoch, in order."""
        for k in range(self.num_batches):
            yield self.batch(seed, k)

    def read_group(self, piece: _Piece) -> Any:
        """One row group: the schema's columns, with the first file's types, nulls filled.

        Raises:
          DataError: the file changed since the build (its footer would not describe
            it), a damaged row group, a null without default; naming the file.
        """
        import pyarrow as pa

        path = self.files[piece.file]
        check_unchanged(path, self._versions[piece.file])
        try:
            pf = parquet.open_file(
                path, metadata=self._footers[piece.file], memory_pool=parquet.read_pool()
            )
            # the columns decode in parallel on pyarrow's threads, the GIL released
            table = pf.read_row_group(piece.group, columns=self.columns, use_threads=True)
            table = table.select(self.columns)
            if self._target is None:
                first = parquet.read_schema(self.files[0])
                self._target = _select(first, self.columns)
            if not table.schema.equals(self._target):
                table = table.cast(self._target)
        except (OSError, pa.ArrowException) as e:
            check_unchanged(path, self._versions[piece.file])  # changed while read?
            row = sum(self.group_rows[piece.file][: piece.group])
            why = first_line(e).rstrip(".")
            raise DataError(
                f"{path}: row group {piece.group} (rows {row}-{row + piece.rows - 1} of the "
                f"file) cannot be read: {why}; the file is damaged there (write it again)"
            ) from None
        return _fill_nulls(table, self.schema, path)


def _select(schema: Any, columns: list[str]) -> Any:
    """The fields of ``schema`` named by ``columns``, in that order."""
    import pyarrow as pa

    return pa.schema([schema.field(c) for c in columns])


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
    return type(rb).from_arrays(list(arrays.values()), names=list(arrays))


def _columns(table: Any, schema: Schema) -> dict[str, np.ndarray]:
    import pyarrow as pa
    import pyarrow.compute as pc

    out: dict[str, np.ndarray] = {}

    def numeric(col: Any, dtype: Any) -> np.ndarray:
        return col.cast(dtype).to_numpy() if col.type != dtype else col.to_numpy()

    def listed(col: Any, key: str, dtype: Any) -> None:
        values = pc.list_flatten(col)
        if dtype == pa.string():
            out[key + LIST_VALUES] = values.cast(pa.binary()).to_numpy(zero_copy_only=False)
        else:
            out[key + LIST_VALUES] = numeric(values, dtype)
        out[key + LIST_LENGTHS] = pc.list_value_length(col).to_numpy().astype(np.int64)

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
