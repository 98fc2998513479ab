"""Parquet to per-feature numpy batches: tfinput's Parquet pipeline against a Grain
expert pipeline re-created by hand, tfinput's columnar records, and raw pyarrow decode,
side by side.

    python benchmarks/parquet_grain.py              # measure and print the markdown section
    python benchmarks/parquet_grain.py --write      # also replace the section in RESULTS.md
    python benchmarks/parquet_grain.py --quick      # 100k rows, 2 rounds: checks the script

Workload: criteo-like rows (13 dense, 26 single ids, 4 multi-hot lists of 0-19 ids;
`benchmarks/core.py`'s data), ``--rows`` rows (1M) as Parquet in 8 files (row groups of
65,536 rows), batch 4,096, drop remainder. Every variant but raw pyarrow yields the same
output per batch: ``({"dense": {name: float32 [B]}, "ids": {name: int32 [B] or [B, 20]},
"weights": {name: float32 [B, 20]}}, label float32 [B])`` as numpy arrays (dense:
``log1p(max(x, 0))``; multi-hot: the first 20 ids padded with 0, weights 1 for ids and 0
for padding). The script checks that the first unshuffled batch of the Grain expert and
of tfinput Parquet are equal, array by array, before it measures.

Variants:

- **Grain experts**: Grain's vectorized pattern, written out here (no dependency on
  the grain package). Grain's ``MapDataset`` is a random-access sequence; its
  ``.batch``, ``.map`` and ``.to_iter_dataset(ReadOptions(num_threads,
  prefetch_buffer_size))`` compute element ``k`` on a thread pool,
  ``prefetch_buffer_size`` elements ahead, in order (grain/_src/python/dataset/
  dataset.py, ``MapDataset.to_iter_dataset``; transformations/prefetch.py,
  ``PrefetchDatasetIterator``; the "Dataset basics" tutorial,
  https://google-grain.readthedocs.io/en/latest/tutorials/dataset_basic_tutorial.html),
  and its Parquet source reads a row group at a time into numpy arrays and serves rows
  from them (sources/parquet_dataset.py). The experts make the element a whole batch,
  cut as a slice of such arrays and turned into the output by vectorized numpy per
  feature (the dense features as one ``[n, B]`` matrix: one ``maximum`` and one
  ``log1p``; multi-hot lists padded and truncated from the list column's starts,
  lengths and values with one gather each; no per-row Python). Two of them:

  - *decoded tables cached*: every file read once, before the rounds, into numpy
    arrays in memory (no Parquet decode after that). Shuffled, it follows Grain's
    published default, ``MapDataset.shuffle``: a global index shuffle (a permutation
    of every row, a new one each epoch), batch ``k`` the rows at positions ``[k * B,
    (k + 1) * B)`` of it, gathered with numpy.
  - *decoding every epoch*: every file's bytes cached in memory, row groups decoded
    by pyarrow each epoch on the thread pool (read ahead), batches cut as slices of the
    decoded groups (joined across group boundaries). Shuffled, it follows Grain's way
    for sources read in order, a window shuffle (``grain.experimental.
    WindowShuffleIterDataset``), vectorized: windows of rows permuted, then cut into
    batches (windows as large as tfinput's: ``shuffle_buffer`` rounded up to whole
    batches).

  Each expert's thread count is picked per run: a short grid over ``--grain-threads``
  (0 computes each batch on the consumer's thread, as Grain's ``ReadOptions``
  docstring recommends for data already in memory), the best median wins. Grain's
  other way, ``mp_prefetch`` (worker processes), is not measured: on a 2-core machine
  its processes would each hold the cache and hand every 3 MB batch over through
  shared memory.
- **tfinput Parquet**: ``tfinput.parquet(files, schema).build(PipelineConfig(
  batch_size=4096))`` (every knob AUTOTUNE), read with ``as_numpy_iterator()``.
- **tfinput columnar**: the same rows as columnar records (`benchmarks/columnar.py`'s
  ``columnar_data``: 1,024-row chunks), the same config and iterator.
- **raw pyarrow** (a decode ceiling, not a pipeline): ``pq.ParquetFile(path)
  .iter_batches(4096, columns, use_threads=False)`` over the files, each column
  ``to_numpy`` (list columns: their flat values and offsets), one thread, no transform.

Shuffled variants (the Grain experts' shuffles above, tfinput's
``shuffle_buffer=10000``, seed 1) are measured in the same rounds as the unshuffled
ones. tfinput Parquet with ``cache=True`` (the reader's batches kept after the first
epoch) is measured unshuffled, against the cached Grain expert.

Method: ``--rounds`` rounds; each round measures every variant once, the order rotated by
one each round; each measurement starts a fresh iterator over the repeated data (for the
Grain expert: over the cache built once, before the rounds), skips ``--warmup`` batches,
then times ``--batches`` batches. Figures: median examples/s over rounds with min-max;
ratios are the median (min-max) of the per-round ratios.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._results import parse_args, write_section  # noqa: E402
from benchmarks.columnar import columnar_data  # noqa: E402
from benchmarks.core import BATCH, FILES, data, machine  # noqa: E402

ROWS = 1_000_000
SHUFFLE = 10_000
GRAIN_THREADS = (0, 1, 2, 4)
GRAIN_BUFFER = 16  # batches computed ahead (Grain's prefetch_buffer_size, in batches)


class GrainExpert:
    """Grain's vectorized pattern over Parquet, by hand: every file read once into memory
    (its columns as numpy: flat columns as arrays, list columns as their flat values,
    row starts and lengths, as Grain's Parquet source holds a row group), batch ``k``
    a slice (or, shuffled, a global-permutation gather) of those arrays, vectorized
    numpy per feature, computed ``buffer`` batches ahead on ``threads`` threads in
    order (``MapDataset.to_iter_dataset(ReadOptions(...))``)."""

    def __init__(self, files: list[str], schema: Any, batch: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from tfinput.schema import Categorical, Dense, MultiHot

        self.batch = batch
        self.dense = [f.name for f in schema.features if isinstance(f, Dense)]
        self.single = [f.name for f in schema.features if isinstance(f, Categorical)]
        self.multi = [(f.name, f.max_len) for f in schema.features if isinstance(f, MultiHot)]
        self.label = schema.labels[0].name
        self.columns = schema.columns()
        if files:  # every file read once, up front
            table = pa.concat_tables(pq.read_table(f, columns=self.columns) for f in files)
            self.rows = table.num_rows
            self.cache = self.arrays(table.combine_chunks())
            self.num_batches = self.rows // batch  # drop remainder

    def arrays(self, table: Any) -> tuple[dict[str, np.ndarray], dict[str, tuple]]:
        """A table's columns as numpy: flat ones, and list ones as ``(values, starts,
        lengths)``."""
        flat = {n: _numpy(table.column(n)) for n in self.dense + self.single + [self.label]}
        lists = {}
        for name, _ in self.multi:
            col = table.column(name)
            arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
            offsets = arr.offsets.to_numpy()
            lists[name] = (arr.flatten().to_numpy(), offsets[:-1] - offsets[0], np.diff(offsets))
        return flat, lists

    def transform(self, arrays: tuple[dict, dict], rows: Any) -> Any:
        """Rows ``rows`` (a slice or indices) of ``arrays`` -> the per-feature output."""
        flat, lists = arrays
        dense = np.stack([flat[n][rows] for n in self.dense]).astype(np.float32, copy=False)
        dense = np.log1p(np.maximum(dense, 0.0))
        ids = {n: flat[n][rows].astype(np.int32) for n in self.single}
        weights = {}
        for name, max_len in self.multi:
            values, starts, lengths = lists[name]
            slots = np.arange(max_len)
            mask = slots < np.minimum(lengths[rows], max_len)[:, None]
            at = np.minimum(starts[rows][:, None] + slots, max(len(values) - 1, 0))
            ids[name] = np.where(mask, values[at] if len(values) else 0, 0).astype(np.int32)
            weights[name] = mask.astype(np.float32)
        out = {
            "dense": dict(zip(self.dense, dense)),
            "ids": {n: ids[n] for n in self.single + [m for m, _ in self.multi]},
            "weights": weights,
        }
        return out, flat[self.label][rows].astype(np.float32, copy=False)

    def element(self, k: int, order: np.ndarray | None) -> Any:
        """Batch ``k`` of the epoch (``order``: the epoch's permutation, or None)."""
        b = self.batch
        rows = slice(k * b, (k + 1) * b) if order is None else order[k * b : (k + 1) * b]
        return self.transform(self.cache, rows)

    def __call__(self, threads: int, buffer: int, seed: int | None) -> Iterator[Any]:
        """Endless epochs, batches in order, ``buffer`` ahead on ``threads`` threads."""
        rng = np.random.default_rng(seed)

        def positions() -> Iterator[tuple[int, np.ndarray | None]]:
            while True:
                order = None if seed is None else rng.permutation(self.rows)
                for k in range(self.num_batches):
                    yield k, order

        if threads == 0:
            for k, order in positions():
                yield self.element(k, order)
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            ahead: collections.deque = collections.deque()
            todo = positions()
            try:
                while True:
                    while len(ahead) < buffer:
                        ahead.append(pool.submit(self.element, *next(todo)))
                    yield ahead.popleft().result()
            finally:
                for f in ahead:
                    f.cancel()


class GrainExpertDecoding(GrainExpert):
    """The same pattern over Parquet decoded every epoch, as Grain's own Parquet source
    reads it (a row group at a time, turned into numpy and sliced): every file's bytes
    cached in memory up front, row groups decoded ``groups_ahead`` ahead on the thread
    pool (pyarrow releases the GIL and decodes a group's columns on its own threads),
    batches cut as slices of the decoded groups (joined across group boundaries), the
    vectorized transforms computed ``buffer`` batches ahead on the same pool, in order.
    Shuffled: Grain's way for sources read in order, a window shuffle
    (``grain.experimental.WindowShuffleIterDataset``), vectorized: windows of
    ``window`` rows permuted and cut into batches."""

    def __init__(self, files: list[str], schema: Any, batch: int, window: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        super().__init__([], schema, batch)
        self.window = window
        self.buffers = [pa.py_buffer(Path(f).read_bytes()) for f in files]
        self.groups = [
            (i, g)
            for i, buf in enumerate(self.buffers)
            for g in range(pq.ParquetFile(pa.BufferReader(buf)).num_row_groups)
        ]

    def read_group(self, i: int, g: int) -> Any:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(pa.BufferReader(self.buffers[i]))
        return pf.read_row_group(g, columns=self.columns, use_threads=True)

    def sliced(self, table: Any) -> Any:
        """A ``B``-row table (a slice of decoded row groups) -> the output."""
        return self.transform(self.arrays(table), slice(None))

    def __call__(self, threads: int, buffer: int, seed: int | None) -> Iterator[Any]:
        import pyarrow as pa

        rng = np.random.default_rng(seed)
        pool = concurrent.futures.ThreadPoolExecutor(max(threads, 1))
        run = pool.submit if threads else _inline

        def tables() -> Iterator[Any]:  # decoded row groups, endlessly, read ahead
            ahead: collections.deque = collections.deque()
            todo = (group for _ in iter(int, 1) for group in self.groups)
            while True:
                while len(ahead) < max(2, threads):
                    ahead.append(run(self.read_group, *next(todo)))
                yield ahead.popleft().result()

        step = self.window if seed is not None else self.batch

        def slices() -> Iterator[Any]:  # B-row tables, in order (windows permuted)
            rest = None
            for table in tables():
                rest = table if rest is None else pa.concat_tables([rest, table])
                while rest.num_rows >= step:
                    part, rest = rest.slice(0, step), rest.slice(step)
                    if seed is not None:
                        part = part.take(rng.permutation(step))
                    for a in range(0, step - self.batch + 1, self.batch):
                        yield part.slice(a, self.batch)

        ahead: collections.deque = collections.deque()
        todo = slices()
        try:
            while True:
                while len(ahead) < buffer:
                    ahead.append(run(self.sliced, next(todo)))
                yield ahead.popleft().result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


def _inline(fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
    """``fn(*args)`` now, as a done future (no thread)."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(fn(*args))
    return future


def _numpy(col: Any) -> np.ndarray:
    """A flat chunked column as numpy (zero-copy where it is one chunk)."""
    return col.chunk(0).to_numpy() if col.num_chunks == 1 else col.to_numpy()


def raw_pyarrow(files: list[str], columns: list[str], batch: int) -> Iterator[int]:
    """Rows of each record batch of the files, endlessly: pyarrow's reads and
    ``to_numpy`` per column (list columns: flat values and offsets), one thread."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    while True:
        for path in files:
            for rb in pq.ParquetFile(path).iter_batches(batch, columns=columns, use_threads=False):
                for col in rb.columns:
                    if pa.types.is_list(col.type):
                        col.flatten().to_numpy()
                        col.offsets.to_numpy()
                    else:
                        col.to_numpy()
                yield rb.num_rows


def rate(make: Callable[[], Iterator[Any]], warmup: int, batches: int) -> float:
    """Examples/s of ``batches`` batches after ``warmup`` ones, from a fresh iterator
    (an iterator of ints yields row counts: raw pyarrow's record batches)."""
    it = make()
    for _ in range(warmup):
        next(it)
    rows = 0
    start = time.perf_counter()
    for _ in range(batches):
        got = next(it)
        rows += got if isinstance(got, int) else BATCH
    elapsed = time.perf_counter() - start
    close = getattr(it, "close", None)
    if close is not None:
        close()
    return rows / elapsed


def same_output(a: Any, b: Any, where: str = "") -> None:
    """Raise if two batches differ in structure, dtype, shape or values."""
    if isinstance(a, dict):
        if set(a) != set(b):
            raise AssertionError(f"{where}: keys {sorted(a)} != {sorted(b)}")
        for k in a:
            same_output(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, tuple):
        for i, (x, y) in enumerate(zip(a, b)):
            same_output(x, y, f"{where}[{i}]")
    else:
        if a.dtype != b.dtype or a.shape != b.shape:
            raise AssertionError(f"{where}: {a.dtype}{a.shape} != {b.dtype}{b.shape}")
        if not np.allclose(a, b, rtol=1e-6, atol=1e-6):
            raise AssertionError(f"{where}: values differ")


def ratio(a: list[float], b: list[float]) -> str:
    r = [x / y for x, y in zip(a, b)]
    return f"{statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--grid-batches", type=int, default=30, help="per Grain thread count")
    p.add_argument(
        "--grain-threads",
        default=",".join(map(str, GRAIN_THREADS)),
        help="the Grain expert's thread counts to pick from (comma-separated)",
    )
    p.add_argument("--grain-buffer", type=int, default=GRAIN_BUFFER)
    p.add_argument("--data-dir", help="keep the data here (default: a temporary directory)")
    p.add_argument("--quick", action="store_true", help="100k rows, 2 rounds: checks the script")
    p.add_argument("--write", action="store_true", help="replace the section in RESULTS.md")
    args = parse_args(
        p, argv, smoke=dict(rows=20_480, rounds=1, warmup=1, batches=2, grid_batches=1)
    )
    if args.quick:
        args.rows, args.rounds, args.warmup, args.batches, args.grid_batches = (
            100_000, 2, 2, 8, 4,
        )  # fmt: skip
    grain_threads = [int(t) for t in args.grain_threads.split(",")]
    if args.smoke:
        grain_threads = grain_threads[-1:]

    import tempfile

    import tfinput
    from tfinput._src.core.sources._row_shuffle import shuffle_window
    from tfinput.config import PipelineConfig

    t0 = time.time()
    machine_line = machine()
    with tempfile.TemporaryDirectory(prefix="tfinput-parquet-grain-") as tmp:
        root = Path(args.data_dir or tmp)
        schema, _, pq_files = data(root, args.rows)
        col_dir = columnar_data(root, args.rows, pq_files)
        experts = {
            "Grain expert, decoded tables cached": GrainExpert(pq_files, schema, BATCH),
            "Grain expert, decoding every epoch": GrainExpertDecoding(
                pq_files, schema, BATCH, shuffle_window(SHUFFLE, BATCH)
            ),
        }
        parquet, columnar = tfinput.parquet(pq_files, schema), tfinput.columnar(col_dir, schema)
        plain = PipelineConfig(batch_size=BATCH)
        shuffled = plain.replace(shuffle_buffer=SHUFFLE, shuffle_seed=1)

        # The same output: the first unshuffled batch of each, array by array.
        ours = next(parquet.build(plain).as_numpy_iterator())
        for name, expert in experts.items():
            same_output(next(expert(0, 1, None)), ours, f"{name} vs tfinput Parquet")

        # Each Grain expert's thread count: the best of a short grid (two passes).
        grids: dict[str, dict[int, list[float]]] = {}
        best: dict[str, int] = {}
        for name, expert in experts.items():
            grid = grids[name] = {t: [] for t in grain_threads}
            for t in grain_threads + grain_threads[::-1]:
                grid[t].append(
                    rate(lambda e=expert, t=t: e(t, args.grain_buffer, None), 2, args.grid_batches)
                )
            best[name] = max(grid, key=lambda t: statistics.median(grid[t]))
            print(
                f"{name} grid: "
                + ", ".join(f"{t} threads {statistics.median(v):,.0f}/s" for t, v in grid.items()),
                file=sys.stderr,
                flush=True,
            )

        def numpy(pipeline: Any, config: Any) -> Callable[[], Iterator[Any]]:
            return lambda: pipeline.build(config).repeat().as_numpy_iterator()

        def grain(name: str, seed: int | None) -> Callable[[], Iterator[Any]]:
            return lambda: experts[name](best[name], args.grain_buffer, seed)

        cached, decoding = experts
        variants: dict[str, Callable[[], Iterator[Any]]] = {
            cached: grain(cached, None),
            decoding: grain(decoding, None),
            "tfinput Parquet": numpy(parquet, plain),
            "tfinput Parquet, cache=True": numpy(parquet, plain.replace(cache=True)),
            "tfinput columnar": numpy(columnar, plain),
            "raw pyarrow decode": lambda: raw_pyarrow(pq_files, schema.columns(), BATCH),
            f"{cached}, shuffled": grain(cached, 1),
            f"{decoding}, shuffled": grain(decoding, 1),
            "tfinput Parquet, shuffled": numpy(parquet, shuffled),
            "tfinput columnar, shuffled": numpy(columnar, shuffled),
        }
        names = list(variants)
        rates: dict[str, list[float]] = {n: [] for n in names}
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                rates[name].append(rate(variants[name], args.warmup, args.batches))
            print(
                f"round {r + 1}/{args.rounds}: "
                + ", ".join(f"{n} {rates[n][-1]:,.0f}/s" for n in names),
                file=sys.stderr,
                flush=True,
            )
    total_s = time.time() - t0
    med = {n: statistics.median(v) for n, v in rates.items()}
    grid_words = "; ".join(
        f"{name.removeprefix('Grain expert, ')}: {best[name]} ("
        + ", ".join(f"{t}: {statistics.median(v) / 1e3:,.0f}k" for t, v in grids[name].items())
        + ")"
        for name in experts
    )
    lines = [
        "<!-- parquet-grain:begin (generated by benchmarks/parquet_grain.py) -->",
        "## Parquet to numpy batches: tfinput against a Grain expert pipeline",
        "",
        f"Machine: {machine_line}. Method: `python benchmarks/parquet_grain.py` (see its "
        f"docstring): criteo-like {args.rows:,} rows as Parquet in {FILES} files, batch "
        f"{BATCH}, per-feature numpy batches (the same arrays from every variant but raw "
        "pyarrow: checked on the first batch); tfinput with `PipelineConfig(batch_size="
        f"{BATCH})` (AUTOTUNE) and `as_numpy_iterator()`; the Grain experts re-created by "
        "hand from Grain's vectorized pattern (row-group slices, vectorized numpy per "
        f"feature, a thread pool computing {args.grain_buffer} batches ahead in order), one "
        "over decoded tables cached in memory before the rounds, one over the files' bytes "
        "cached, decoding every epoch; their thread counts, the best of a grid (examples/s "
        f"per thread count): {grid_words}. Shuffled: the cached expert with Grain's global "
        "index shuffle, the decoding one with Grain's window shuffle (windows of "
        f"{shuffle_window(SHUFFLE, BATCH):,} rows), tfinput with `shuffle_buffer={SHUFFLE:,}`. "
        f"{args.rounds} rounds, every variant once per round in rotating order, "
        f"{args.warmup} warm-up batches excluded, {args.batches} timed batches. Total time "
        f"{total_s:.0f} s" + (" (--quick: a smoke run, not a result)." if args.quick else "."),
        "",
        "| variant | examples/s (median) | min | max | x Grain expert decoding every epoch "
        "(median, range) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in names:
        base = f"{decoding}, shuffled" if "shuffled" in name else decoding
        xs = rates[name]
        lines.append(
            f"| {name} | {med[name]:,.0f} | {min(xs):,.0f} | {max(xs):,.0f} | "
            + ("1" if name == base else ratio(xs, rates[base]))
            + " |"
        )
    lines += [
        "",
        "- tfinput Parquet / Grain expert decoding every epoch (the same work: Parquet "
        "decoded, transformed and batched every epoch), unshuffled: **"
        + ratio(rates["tfinput Parquet"], rates[decoding])
        + "** (target >= 2.0x); shuffled: "
        + ratio(rates["tfinput Parquet, shuffled"], rates[f"{decoding}, shuffled"])
        + ".",
        "- tfinput Parquet / Grain expert over decoded tables cached in memory (no Parquet "
        "decode after the cache is built), unshuffled: "
        + ratio(rates["tfinput Parquet"], rates[cached])
        + "; tfinput Parquet with `cache=True`: "
        + ratio(rates["tfinput Parquet, cache=True"], rates[cached])
        + "; shuffled: "
        + ratio(rates["tfinput Parquet, shuffled"], rates[f"{cached}, shuffled"])
        + ".",
        "- tfinput Parquet / raw pyarrow decode (one thread, no transform, no batching "
        "across row groups): " + ratio(rates["tfinput Parquet"], rates["raw pyarrow decode"]) + ".",
        "<!-- parquet-grain:end -->",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write and not args.quick:
        write_section("parquet-grain", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
