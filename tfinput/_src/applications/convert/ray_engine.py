"""Distributed conversion on Ray Data: ``tfinput convert --engine ray`` (`convert_ray`).

    from tfinput._src.applications.convert.ray_engine import convert_ray
    options = ConvertOptions(columns=ColumnOptions(preset="criteo"),
                             write=WriteOptions(to="columnar"))
    result = convert_ray(["day_0.tsv"], "data/criteo", options=options,
                         ray=RayOptions(num_cpus=8))      # or ray_address="ray://head:10001"

The driver does what the single-process `tfinput.convert.convert` does before reading:
it checks the arguments, sniffs every CSV file's layout, takes the schema (given,
preset or inferred once from the first input) and plans the columns. The work is then
cut into *pieces*: an uncompressed CSV/TSV file is cut into byte ranges of about
``split_bytes`` that start and end at line breaks (a record is one line, so a range
holds whole records); a compressed CSV file, a Parquet file or a TFRecord file is one
piece. A Ray Data dataset of the pieces (`ray.data.from_items`) is mapped by Ray
tasks, each of which reads its piece with tfinput's own readers (the same pyarrow CSV
reader options, quote guard and line numbering), converts every block with the same
functions as the single-process path (`tfinput._src.applications.convert.columns.convert_batch` /
`convert_typed`) and writes its own shards (`tfinput._src.applications.convert.writers.Shards` or
`tfinput.columnar_records.ColumnarWriter`) into a directory of its own. Ray Data's
`read_csv` is not used: it reads a CSV file in one task and loses line numbers.

The driver then joins the shards in the staging directory beside ``out_dir`` and puts
the whole output in place at the end, as `convert` does (a killed run leaves no partial
output):

- **Parquet, TFRecord:** the pieces' files are renamed ``part-NNNNN-of-MMMMM`` in
  piece order (input order, then byte order). Reading the files in name order gives
  the rows in exactly the single-process order; only the file boundaries differ
  (each piece ends its last file early).
- **Columnar:** each task writes whole chunks only and hands its last rows (fewer than
  ``chunk_rows``) back to the driver, which writes them, in piece order, as the last
  file(s); the per-piece manifests are merged into one ``manifest.json`` with every
  chunk's digest (`tfinput._src.core.columnar.format.merge_manifests`). So, as with one
  process, only the very last chunk of the data set can be partial. Order: the rows of
  each piece stay in input order, except its last ``rows % chunk_rows`` rows, which move
  to the end of the data set.

Bad rows keep the single-process semantics: with ``on_bad_rows="error"`` each task stops
at its first bad row and the driver raises the `DataError` of the earliest one in input
order (the same message, file and line), after deleting what was written; with
``"skip"`` the counts add up and the first `MAX_REPORTED` bad rows in input order are
reported. Line numbers are exact: each range counts its lines and the driver adds the
lines of the ranges before it.

Requirements: ``pip install 'tfinput[ray]'`` on the driver and (with tfinput) on every
node; on a cluster, the inputs and ``out_dir``'s folder must be visible to every node at
the same path (a shared file system). ``progress`` is called once, at the end.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from tfinput._src.applications.convert.columns import Column
from tfinput._src.applications.convert.options import ConvertOptions, RayOptions
from tfinput._src.applications.convert.readers import CsvReader, typed_batches
from tfinput._src.applications.convert.run import (
    MAX_REPORTED,
    BadRow,
    BadRowLog,
    ConvertResult,
    converted,
    open_inputs,
)
from tfinput._src.applications.convert.writers import Shards, prepare_out_dir
from tfinput._src.core.errors import ConfigError, DataError, SchemaError, SourceError, TfinputError
from tfinput._src.core.files import check_writable
from tfinput._src.core.formats.csv import Layout, sniff_layout
from tfinput._src.core.schema import Schema

if TYPE_CHECKING:
    import types

    import pyarrow as pa

    from tfinput._src.core.columnar.writer import ColumnarWriter

#: Conversion engines of ``tfinput convert --engine``.
ENGINES = ("local", "ray")
#: Where the tasks write, inside the staging directory, before the driver joins their files.
_PARTS_DIR = ".ray-parts"
_ERRORS = {e.__name__: e for e in (ConfigError, DataError, SchemaError, SourceError)}
_INSTALL = "pip install 'tfinput[ray]'"


def convert_ray(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    options: ConvertOptions | None = None,
    ray: RayOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ConvertResult:
    """`tfinput.convert.convert` on Ray Data: the same output rows and values, written by
    many tasks (see the module docstring for how the work is cut and the order).

    Args:
      inputs: As for `convert`.
      out_dir: As for `convert`; on a cluster, a path every node sees.
      options: A `ConvertOptions`, as `convert_options` takes it (``rows_per_file``
        counts per task: each task starts its own files).
      ray: `RayOptions`: the cluster, the CPUs and the bytes per task.
      progress: Called once as ``progress(total_bytes, total_bytes)`` when done.

    Returns:
      A `ConvertResult`, as `convert` returns it.

    Raises:
      ConfigError: Ray is not installed (``pip install 'tfinput[ray]'``), or an invalid
        argument.
      SourceError, SchemaError, DataError: as `convert` raises them.
    """
    opts, where = options or ConvertOptions(), ray or RayOptions()
    _check_ray(where)
    check_writable(out_dir, what="convert: output", directory=True)
    ray_module = import_ray()
    source, plan, dropped = open_inputs(inputs, opts)
    paths, kind, write = source.paths, source.kind, opts.write
    layouts = _layouts(paths, source.layout, source.layout_args) if kind == "csv" else {}
    pieces = _pieces(paths, kind=kind, split_bytes=where.split_bytes, layouts=layouts)
    out = Path(out_dir)
    with prepare_out_dir(out, write.overwrite) as stage:
        parts = stage.path / _PARTS_DIR
        job = _Job(
            parts=str(parts / uuid.uuid4().hex[:8]),
            kind=kind,
            to=write.to,
            schema=source.schema,
            plan=dict(plan),
            rows_per_file=write.rows_per_file,
            chunk_rows=write.chunk_rows,
            stop_at_bad=opts.read.on_bad_rows == "error",
            block_size=opts.read.block_size,
        )
        started = _start_ray(ray_module, where.ray_address, where.num_cpus)
        try:
            reports = _run(ray_module, pieces, job, where.num_cpus)
            log = _checked_reports(reports, pieces, paths, opts.read.on_bad_rows, kind=kind)
            files = _join(stage.path, reports, job)
        finally:
            shutil.rmtree(parts, ignore_errors=True)
            if started:
                ray_module.shutdown()
        source.schema.to_json(str(stage.path / "schema.json"))
        stage.commit()
    if progress is not None:
        total = sum(os.path.getsize(p) for p in paths)
        progress(total, total)
    return converted(
        source,
        out,
        write.to,
        files=files,
        rows=sum(r["rows"] for r in reports),
        log=log,
        blank=sum(r["blank"] for r in reports),
        dropped=dropped,
    )


def _check_ray(where: RayOptions) -> None:
    """Raise `ConfigError` for a ``split_bytes`` or ``num_cpus`` that is no int >= 1."""
    for name, value in (("split_bytes", where.split_bytes), ("num_cpus", where.num_cpus)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ConfigError(f"convert --engine ray: {name} must be an int >= 1, got {value!r}")


def _checked_reports(
    reports: list[_Report],
    pieces: list[_Piece],
    paths: list[str],
    on_bad_rows: str,
    *,
    kind: str,
) -> BadRowLog:
    """The tasks' bad rows in input order (the first one raised with ``error``), and
    no valid row at all refused.

    Raises:
      DataError: a bad row with ``on_bad_rows="error"``, or no valid row.
    """
    log = BadRowLog(on_bad_rows=on_bad_rows, unit="line" if kind == "csv" else "row")
    bad, skipped = _bad_rows(reports, pieces, paths, stop=on_bad_rows == "error")
    for row in bad:
        log.add(row.path, row.line, row.reason)  # raises the first one with "error"
    if sum(r["rows"] for r in reports) == 0:
        first_bad = f"; first bad row: {bad[0]}" if bad else ""
        raise DataError(f"convert: no valid rows in {paths}" + first_bad)
    log.skipped = skipped
    return log


# ------------------------------------------------------------------- driver
def import_ray() -> types.ModuleType:
    """The ``ray`` module, with Ray Data loaded.

    Raises:
      ConfigError: Ray Data is not installed (the message names the extra).
    """
    try:
        import ray
        import ray.data  # the Data library (ray[data]) must be there too
    except ImportError as e:
        raise ConfigError(
            f"convert --engine ray needs Ray Data, which is not installed ({e}); install it "
            f"with: {_INSTALL} (or use --engine local, the single-process default)"
        ) from e
    return ray


def _start_ray(ray: types.ModuleType, address: str | None, num_cpus: int | None) -> bool:
    """Start (or connect to) Ray unless it is initialized; whether this call did."""
    if ray.is_initialized():
        return False
    kwargs: dict[str, object] = {"include_dashboard": False, "log_to_driver": False}
    if address is None:
        kwargs["num_cpus"] = num_cpus
    ray.init(address=address, **kwargs)
    return True


class _Piece(TypedDict):
    """One task's work: a byte range of a file (``end`` -1: the whole file) and, for CSV,
    its sniffed `Layout` as JSON."""

    task: int
    file: int
    part: int
    path: str
    start: int
    end: int
    layout: str


class _Report(TypedDict, total=False):
    """What a task reports: its counts, bad rows as ``(line or row, reason)``, the files
    it wrote and its manifest (columnar), its last rows as Arrow IPC bytes, or the name
    and message of the tfinput error that stopped it."""

    task: int
    rows: int
    skipped: int
    blank: int
    lines: int
    bad: list[tuple[int, str]]
    files: list[str]
    manifest: str
    leftover: bytes
    error: str
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Job:
    """What every task needs: shipped once with the map function."""

    parts: str
    kind: str
    to: str
    schema: Schema
    plan: dict[str, Column]
    rows_per_file: int
    chunk_rows: int
    stop_at_bad: bool
    block_size: int


def _layouts(
    paths: list[str], first: Layout | None, layout_args: Mapping[str, object]
) -> dict[str, Layout]:
    """Every CSV file's layout (sniffed on the driver); its columns must be the first's."""
    assert first is not None
    out = {paths[0]: first}
    for path in paths[1:]:
        layout = sniff_layout(path, **layout_args)
        if layout.names != first.names:
            raise SchemaError(
                f"{path}: columns {layout.names} differ from those of {paths[0]}: {first.names}"
            )
        out[path] = layout
    return out


def _pieces(
    paths: list[str], *, kind: str, split_bytes: int, layouts: Mapping[str, Layout]
) -> list[_Piece]:
    """The work: per file, byte ranges at line breaks (uncompressed CSV) or the file."""
    pieces: list[_Piece] = []
    for index, path in enumerate(paths):
        ranges: list[tuple[int, int]] = [(0, -1)]
        if kind == "csv" and not path.lower().endswith((".gz", ".gzip", ".bz2")):
            ranges = _byte_ranges(path, split_bytes)
        for part, (start, end) in enumerate(ranges):
            layout = layouts.get(path)
            pieces.append(
                {
                    "task": len(pieces),
                    "file": index,
                    "part": part,
                    "path": path,
                    "start": start,
                    "end": end,
                    "layout": json.dumps(dataclasses.asdict(layout)) if layout else "",
                }
            )
    return pieces


def _byte_ranges(path: str, split_bytes: int) -> list[tuple[int, int]]:
    """``[start, end)`` ranges of about ``split_bytes``, each starting a line."""
    size = os.path.getsize(path)
    n = max(1, math.ceil(size / split_bytes))
    cuts = [0]
    with open(path, "rb") as f:
        for i in range(1, n):
            f.seek(max(cuts[-1], i * size // n))
            while True:
                chunk = f.read(1 << 16)
                if not chunk:
                    at = size
                    break
                k = chunk.find(b"\n")
                if k >= 0:
                    at = f.tell() - len(chunk) + k + 1
                    break
            if at >= size:
                break
            if at > cuts[-1]:
                cuts.append(at)
    cuts.append(size)
    return list(zip(cuts[:-1], cuts[1:]))


def _run(
    ray: types.ModuleType, pieces: list[_Piece], job: _Job, num_cpus: int | None
) -> list[_Report]:
    """Map the pieces with Ray Data; the tasks' reports in piece order (a task's tfinput
    error is raised here, as the single-process path raises it)."""
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ds = ray.data.from_items(pieces, override_num_blocks=len(pieces))
    kwargs: dict[str, object] = {"fn_kwargs": {"job": job}, "num_cpus": 1}
    if num_cpus is not None:
        kwargs["concurrency"] = min(num_cpus, len(pieces))
    reports = []
    for row in ds.map(_convert_piece, **kwargs).take_all():
        report = json.loads(row["report"])
        report["leftover"] = row["leftover"]
        reports.append(report)
    reports.sort(key=lambda r: r["task"])
    for r in reports:
        if "error" in r:
            raise _ERRORS.get(r["error"], DataError)(r["message"])
    return reports


def _bad_rows(
    reports: list[_Report], pieces: list[_Piece], paths: list[str], *, stop: bool
) -> tuple[list[BadRow], int]:
    """The bad rows the tasks reported, in input order with absolute line numbers, and
    how many were skipped."""
    offset: dict[int, int] = {}
    found: list[tuple[int, int, str]] = []
    for piece, report in zip(pieces, reports):
        base = offset.get(piece["file"], 0)
        offset[piece["file"]] = base + report["lines"]
        found += [(piece["file"], base + line, reason) for line, reason in report["bad"]]
    found.sort(key=lambda x: (x[0], x[1]))
    keep = 1 if stop else MAX_REPORTED
    bad = [BadRow(path=paths[f], line=line, reason=reason) for f, line, reason in found[:keep]]
    return bad, sum(r["skipped"] for r in reports)


def _join(out: Path, reports: list[_Report], job: _Job) -> list[str]:
    """Move the tasks' files into ``out`` as one data set; the data files' paths."""
    if job.to == "columnar":
        return _join_columnar(out, reports, job)
    files = [f for r in reports for f in r["files"]]
    ext = ".parquet" if job.to == "parquet" else ".tfrecord"
    final = []
    for i, path in enumerate(files):
        new = str(out / f"part-{i:05d}-of-{len(files):05d}{ext}")
        os.replace(path, new)
        final.append(new)
    return final


def _join_columnar(out: Path, reports: list[_Report], job: _Job) -> list[str]:
    """Write the tasks' last rows as the last chunks, then merge every manifest."""
    import pyarrow as pa

    from tfinput._src.core.columnar.format import merge_manifests, read_manifest
    from tfinput._src.core.columnar.writer import ColumnarWriter

    tail = [_from_ipc(r["leftover"]) for r in reports if r["leftover"]]
    parts = [read_manifest(r["manifest"]) for r in reports if r["manifest"]]
    if tail:
        writer = ColumnarWriter(
            Path(job.parts) / "tail",
            job.schema,
            chunk_rows=job.chunk_rows,
            rows_per_file=job.rows_per_file,
        )
        with writer:
            writer.write(pa.concat_tables(tail))
        parts.append(writer.manifest)
    return merge_manifests(parts, out / "manifest.json").paths


def _to_ipc(table: pa.Table) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes) -> pa.Table:
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


# -------------------------------------------------------------------- tasks
def _convert_piece(piece: _Piece, *, job: _Job) -> dict[str, str | bytes]:
    """One Ray task: read, convert and write one piece; a JSON report (tfinput errors
    included) and the last rows (columnar) as Arrow IPC bytes."""
    report: _Report = {"task": int(piece["task"])}
    leftover = b""
    try:
        written, leftover = _write_piece(piece, job)
        report.update(written)
    except TfinputError as e:
        report.update(error=type(e).__name__, message=str(e))
    return {"report": json.dumps(report), "leftover": leftover}


def _write_piece(piece: _Piece, job: _Job) -> tuple[_Report, bytes]:
    """Convert and write a piece into its own directory; its report and last rows."""
    directory = Path(job.parts) / f"task-{int(piece['task']):05d}"
    directory.mkdir(parents=True, exist_ok=True)
    sink = _Sink(directory, job)
    counts = {"rows": 0, "skipped": 0, "blank": 0}
    bad: list[tuple[int, str]] = []
    lines = [0]
    try:
        for table, events, blank in _blocks(piece, job, lines):
            counts["blank"] += blank
            if events and job.stop_at_bad:
                bad.append(min(events))
                break
            counts["skipped"] += len(events)
            bad.extend(sorted(events)[: max(0, MAX_REPORTED - len(bad))])
            if table is not None and table.num_rows:
                sink.write(table)
                counts["rows"] += table.num_rows
        files, manifest, leftover = sink.close()
    except BaseException:
        sink.abort()
        raise
    report = dict(counts, lines=lines[0], bad=bad, files=files, manifest=manifest)
    return report, leftover


def _blocks(
    piece: _Piece, job: _Job, lines: list[int]
) -> Iterator[tuple[pa.Table | None, list[tuple[int, str]], int]]:
    """``(converted table or None, bad rows as (line or row, reason), blank lines)`` per
    block of a piece, as `tfinput._src.applications.convert.readers.csv_batches` yields them; the piece's
    line count goes to ``lines[0]`` (CSV byte ranges)."""
    path = piece["path"]
    if job.kind != "csv":
        for _, table, events, blank in typed_batches(
            [path], kind=job.kind, plan=job.plan, on_read=lambda n: None
        ):
            yield table, events, blank
        return
    layout = Layout(**json.loads(piece["layout"]))
    byte_range = None if piece["end"] < 0 else (piece["start"], piece["end"])
    reader = CsvReader(path, layout, None, block_size=job.block_size, byte_range=byte_range)
    try:
        yield from reader.converted(job.plan)
    finally:
        reader.close()
        lines[0] = getattr(reader.raw, "newlines", 0)


class _Sink:
    """A task's output: `Shards` (Parquet, TFRecord) or a `ColumnarWriter` fed whole
    chunks only, the rest handed back to the driver."""

    def __init__(self, directory: Path, job: _Job):
        self.job = job
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        if job.to == "columnar":
            from tfinput._src.core.columnar.writer import ColumnarWriter

            self.writer: ColumnarWriter | Shards = ColumnarWriter(
                directory, job.schema, chunk_rows=job.chunk_rows, rows_per_file=job.rows_per_file
            )
        else:
            self.writer = Shards(directory, job.to, rows_per_file=job.rows_per_file, plan=job.plan)

    def write(self, table: pa.Table) -> None:
        if self.job.to != "columnar":
            self.writer.write(table)
            return
        import pyarrow as pa

        self.pending.append(table)
        self.pending_rows += table.num_rows
        if self.pending_rows < self.job.chunk_rows:
            return
        merged = pa.concat_tables(self.pending)
        whole = merged.num_rows - merged.num_rows % self.job.chunk_rows
        self.writer.write(merged.slice(0, whole))
        rest = merged.slice(whole)
        self.pending, self.pending_rows = ([rest] if rest.num_rows else []), rest.num_rows

    def close(self) -> tuple[list[str], str, bytes]:
        """The files written, the manifest (columnar, if any) and the last rows."""
        if self.job.to != "columnar":
            return self.writer.close(), "", b""
        import pyarrow as pa

        manifest = self.writer.close()
        leftover = _to_ipc(pa.concat_tables(self.pending)) if self.pending_rows else b""
        return manifest.paths, manifest.path if manifest.files else "", leftover

    def abort(self) -> None:
        self.writer.abort()
