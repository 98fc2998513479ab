"""`convert`: an outline of named steps, from the inputs to the written shards, and what
it reports: bad rows (raised or counted) and the `ConvertResult`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tfinput._src.applications.convert.columns import (
    PRESET_LISTS,
    PRESETS,
    Column,
    match_columns,
    plan_columns,
    preset_schema,
)
from tfinput._src.applications.convert.options import (
    ColumnOptions,
    ConvertOptions,
    ReadOptions,
    WriteOptions,
)
from tfinput._src.applications.convert.readers import (
    Blocks,
    csv_batches,
    detect_input_format,
    resolve_inputs,
    typed_batches,
    typed_names,
)
from tfinput._src.applications.convert.writers import (
    FORMATS,
    ColumnarShards,
    Shards,
    open_shards,
    prepare_out_dir,
)
from tfinput._src.core.errors import ConfigError, DataError, SchemaError
from tfinput._src.core.files import check_writable
from tfinput._src.core.formats.csv import BLOCK_SIZE, Layout, sniff_layout
from tfinput._src.core.schema import Schema


def convert(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    to: str = "parquet",
    schema: Schema | None = None,
    preset: str | None = None,
    input_format: str = "auto",
    delimiter: str | None = None,
    header: bool | str = "auto",
    column_names: Sequence[str] | None = None,
    list_columns: Mapping[str, str] | None = None,
    on_bad_rows: str = "error",
    label: str | None = None,
    hash_buckets: int | None = None,
    infer_rows: int = 10_000,
    rows_per_file: int = 1_000_000,
    chunk_rows: int = 1024,
    overwrite: bool = False,
    block_size: int = BLOCK_SIZE,
    progress: Callable[[int, int], None] | None = None,
) -> ConvertResult:
    """Convert CSV/TSV, Parquet or tf.Example TFRecord files into sharded Parquet,
    TFRecord or columnar files plus ``schema.json``.

    Args:
      inputs: Files or glob patterns, read in order (``.gz``, ``.bz2``, ``.zz`` too).
      out_dir: Output directory, empty unless ``overwrite``. The files are staged beside it
        and put in place together once all are on disk: a stopped run leaves nothing.
      to: ``parquet`` (`tfinput.parquet`), ``tfrecord`` (``tf.train.Example``, `tfinput.tfrecord`)
        or ``columnar`` (pre-batched records, ``manifest.json``: `tfinput.columnar`, the fastest).
      schema: The schema to write (its columns must be in the input), not inferred.
      preset: ``criteo`` or ``movielens`` (see the `tfinput.convert` docstring).
      input_format: ``auto`` (by extension: Parquet, TFRecord, else CSV/TSV), ``csv``,
        ``parquet`` or ``tfrecord``.
      delimiter, header, column_names: CSV only: the field delimiter (None: sniffed), a
        header line (``"auto"``: sniffed, True, False), names for files without one.
      list_columns: ``{column: item delimiter}`` of multi-valued CSV columns
        (``{"genres": "|"}``); multi-hot columns of a schema default to ``|``.
      on_bad_rows: ``error`` (raise at the first bad row) or ``skip`` (count them).
      label: The label column when inferring (default: those named in `LABEL_NAMES`).
      hash_buckets: Rows of hashed string (and folded int id) tables: presets 100,000,
        inferred schemas 4 x the distinct values seen, rounded up to a power of two.
      infer_rows: Rows of the first input sampled to infer kinds.
      rows_per_file: Rows per output file (columnar: whole chunks); several files let
        readers interleave and shard across input pipelines.
      chunk_rows: Columnar: rows per record (batch sizes that are a multiple of it are
        assembled without per-row work; smaller chunks shuffle at a finer grain).
      overwrite: Replace the output's ``part-*``, ``schema.json`` and ``manifest.json``
        once the new output is complete (until then the previous one stays whole).
      block_size: Bytes of CSV parsed at a time (a record must fit in one).
      progress: Called as ``progress(bytes_read, total_bytes)`` as blocks are read.

    Returns:
      A `ConvertResult` with counts, the output paths and the schema.

    Raises:
      SourceError: an input is missing or empty, or ``out_dir`` is not empty.
      SchemaError: the schema's columns are not in the input.
      DataError: a bad row with ``on_bad_rows="error"``, or no valid row at all.
      ConfigError: an invalid argument, or ``out_dir`` cannot be written.
      OutputError: the disk filled up (``out_dir`` is left as it was, empty or the previous output).
    """
    read = ReadOptions(
        input_format=input_format,
        delimiter=delimiter,
        header=header,
        column_names=column_names,
        list_columns=list_columns,
        on_bad_rows=on_bad_rows,
        block_size=block_size,
    )
    columns = ColumnOptions(
        schema=schema, preset=preset, label=label, hash_buckets=hash_buckets, infer_rows=infer_rows
    )
    write = WriteOptions(
        to=to, rows_per_file=rows_per_file, chunk_rows=chunk_rows, overwrite=overwrite
    )
    grouped = ConvertOptions(read=read, columns=columns, write=write)
    return convert_options(inputs, out_dir, grouped, progress=progress)


def convert_options(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    options: ConvertOptions,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> ConvertResult:
    """`convert` with its settings grouped in one `ConvertOptions` (what ``tfinput
    convert``'s flags map onto): the same conversion, the same errors."""
    read, write = options.read, options.write
    check_writable(out_dir, what="convert: output", directory=True)
    source, plan, dropped = open_inputs(inputs, options)
    paths, kind = source.paths, source.kind
    out = Path(out_dir)
    with prepare_out_dir(out, write.overwrite) as stage:
        shards = open_shards(
            stage.path,
            to=write.to,
            schema=source.schema,
            plan=plan,
            rows_per_file=write.rows_per_file,
            chunk_rows=write.chunk_rows,
        )
        on_read = _ByteProgress(sum(os.path.getsize(p) for p in paths), progress)
        blocks = source.blocks(plan, block_size=read.block_size, on_read=on_read)
        log = BadRowLog(on_bad_rows=read.on_bad_rows, unit="line" if kind == "csv" else "row")
        files, rows, blank = _write_blocks(blocks, shards, log)
        if rows == 0:
            first_bad = f"; first bad row: {log.reported[0]}" if log.reported else ""
            raise DataError(f"convert: no valid rows in {paths}" + first_bad)
        source.schema.to_json(str(stage.path / "schema.json"))
        stage.commit()
    return converted(
        source, out, write.to, files=files, rows=rows, log=log, blank=blank, dropped=dropped
    )


def converted(
    source: _Source,
    out: Path,
    to: str,
    *,
    files: Sequence[str],
    rows: int,
    log: BadRowLog,
    blank: int,
    dropped: list[str],
) -> ConvertResult:
    """The committed conversion's result: ``files`` (written in a staging directory)
    named in ``out``, beside ``schema.json``."""
    return ConvertResult(
        paths=tuple(str(out / os.path.basename(f)) for f in files),
        schema=source.schema,
        schema_path=str(out / "schema.json"),
        format=to,
        rows=rows,
        skipped=log.skipped,
        bad_rows=tuple(log.reported),
        blank_lines=blank,
        dropped_columns=dropped,
        delimiter=source.layout.delimiter if source.layout else "",
        header=source.layout.header if source.layout else False,
        input_format=source.kind,
        manifest_path=str(out / "manifest.json") if to == "columnar" else None,
    )


def open_inputs(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    options: ConvertOptions,
) -> tuple[_Source, dict[str, Column], list[str]]:
    """The checked options' inputs, as every engine converts them: the source (files,
    kind, layout and output schema), the column plan and the input columns left out.

    Raises what `convert` raises for its arguments.
    """
    read, columns, write = options.read, options.columns, options.write
    preset, schema, hash_buckets = columns.preset, columns.schema, columns.hash_buckets
    _check_arguments(
        to=write.to,
        on_bad_rows=read.on_bad_rows,
        preset=preset,
        delimiter=read.delimiter,
        sizes={
            "rows_per_file": write.rows_per_file,
            "chunk_rows": write.chunk_rows,
            "infer_rows": columns.infer_rows,
            "block_size": read.block_size,
        },
    )
    paths = resolve_inputs(inputs)
    kind = detect_input_format(paths, read.input_format)
    lists = dict(PRESET_LISTS.get(preset or "", {}))
    lists.update(read.list_columns or {})
    if schema is None and preset is not None:
        schema = preset_schema(preset, hash_buckets=hash_buckets or 100_000)
    source = _open_source(
        paths,
        kind=kind,
        schema=schema,
        csv_options={
            "delimiter": read.delimiter,
            "header": read.header,
            "column_names": read.column_names,
        },
        preset=preset,
        lists=lists,
        inference={
            "label": columns.label,
            "infer_rows": columns.infer_rows,
            "hash_buckets": hash_buckets,
        },
    )
    plan = plan_columns(source.schema, lists)
    dropped = match_columns(plan, names=source.names, names_from=source.names_from, path=paths[0])
    return source, plan, dropped


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Source:
    """The inputs as `convert` reads them.

    Attributes:
      paths: The input files.
      kind: ``csv``, ``parquet`` or ``tfrecord``.
      schema: The output schema (given, preset or inferred).
      names: The input's columns.
      names_from: Where ``names`` come from, for error messages.
      layout: The first CSV file's `Layout` (None for Parquet and TFRecord inputs).
      layout_args: `sniff_layout` arguments for the other CSV files.
    """

    paths: list[str]
    kind: str
    schema: Schema
    names: list[str]
    names_from: str
    layout: Layout | None = None
    layout_args: dict[str, object] = dataclasses.field(default_factory=dict)

    def blocks(
        self, plan: Mapping[str, Column], *, block_size: int, on_read: Callable[[int], None]
    ) -> Blocks:
        """Every input read and converted block by block (see `csv_batches`)."""
        if self.layout is None:
            return typed_batches(self.paths, kind=self.kind, plan=plan, on_read=on_read)
        return csv_batches(
            self.paths,
            first=self.layout,
            layout_args=self.layout_args,
            plan=plan,
            block_size=block_size,
            on_read=on_read,
        )


def _check_arguments(
    *,
    to: str,
    on_bad_rows: str,
    preset: str | None,
    delimiter: str | None,
    sizes: Mapping[str, object],
) -> None:
    """Raise `ConfigError` for an invalid `convert` argument."""
    if to not in FORMATS:
        raise ConfigError(f"convert: to must be one of {list(FORMATS)}, got {to!r}")
    if on_bad_rows not in ("error", "skip"):
        raise ConfigError(f"convert: on_bad_rows must be 'error' or 'skip', got {on_bad_rows!r}")
    if preset is not None and preset not in PRESETS:
        raise ConfigError(f"convert: unknown preset {preset!r}; expected one of {list(PRESETS)}")
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"convert: {name} must be an int >= 1, got {value!r}")
    if delimiter is not None and len(delimiter) != 1:
        raise ConfigError(f"convert: delimiter must be one character, got {delimiter!r}")


def _open_source(
    paths: list[str],
    *,
    kind: str,
    schema: Schema | None,
    csv_options: dict[str, object],
    preset: str | None,
    lists: Mapping[str, str],
    inference: dict[str, object],
) -> _Source:
    """The inputs' columns and schema (inferred with ``inference`` if None).

    Args:
      paths: The input files.
      kind: ``csv``, ``parquet`` or ``tfrecord``.
      schema: The given or preset schema, or None.
      csv_options: ``delimiter``, ``header`` and ``column_names`` as given.
      preset: The preset, for CSV column names.
      lists: ``{column: item delimiter}`` of multi-valued CSV columns.
      inference: ``label``, ``infer_rows`` and ``hash_buckets`` as given.
    """
    if kind != "csv":
        return _typed_source(paths, kind=kind, schema=schema, csv_options=csv_options, **inference)
    layout_args = dict(csv_options, preset=preset, list_delimiters=set(lists.values()))
    first = sniff_layout(paths[0], **layout_args)
    if schema is None:
        label = inference["label"]
        if label is not None and label not in first.names:
            raise SchemaError(f"convert: label column {label!r} not in columns {first.names}")
        schema = _inferred(paths, "csv", list_columns=lists or None, **inference, **csv_options)
    return _Source(
        paths=paths,
        kind=kind,
        schema=schema,
        names=first.names,
        names_from=first.names_from,
        layout=first,
        layout_args=layout_args,
    )


def _typed_source(
    paths: list[str],
    *,
    kind: str,
    schema: Schema | None,
    csv_options: Mapping[str, object],
    label: str | None,
    infer_rows: int,
    hash_buckets: int | None,
) -> _Source:
    """Parquet or TFRecord inputs: CSV-only options refused, the schema (inferred if
    None) and the input's columns."""
    defaults = {"delimiter": None, "header": "auto", "column_names": None}
    csv_only = [n for n, default in defaults.items() if csv_options[n] != default]
    if csv_only:
        raise ConfigError(
            f"convert: {', '.join(csv_only)} apply to CSV/TSV inputs only; the inputs "
            f"are {kind} ({paths[0]})"
        )
    if schema is None:
        schema = _inferred(
            paths, kind, infer_rows=infer_rows, label=label, hash_buckets=hash_buckets
        )
    names, names_from = typed_names(paths[0], kind=kind, schema=schema)
    return _Source(paths=paths, kind=kind, schema=schema, names=names, names_from=names_from)


def _inferred(
    paths: list[str], kind: str, *, infer_rows: int, label: str | None, **kwargs: object
) -> Schema:
    """The schema `tfinput.infer_schema` (``tfinput schema infer``) infers: one engine,
    one answer."""
    from tfinput._src.applications.inference import infer_schema

    return infer_schema(
        paths,
        sample_rows=infer_rows,
        labels=[label] if label else None,
        format=kind,
        **kwargs,
    ).schema


class _ByteProgress:
    """Counts bytes read and reports ``progress(bytes_read, total_bytes)``, if given."""

    def __init__(self, total: int, progress: Callable[[int, int], None] | None):
        self.total = total
        self.done = 0
        self.progress = progress

    def __call__(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, self.total)


def _write_blocks(
    blocks: Blocks, shards: Shards | ColumnarShards, log: BadRowLog
) -> tuple[list[str], int, int]:
    """Write every block's good rows and log its bad rows; on any error, delete what was
    written. Returns the output files, the rows written and the blank lines seen."""
    rows = blank = 0
    try:
        with contextlib.closing(blocks):
            for path, table, events, n_blank in blocks:
                blank += n_blank
                for line, reason in sorted(events):
                    log.add(path, line, reason)
                if table is not None and table.num_rows:
                    shards.write(table)
                    rows += table.num_rows
        files = shards.close()
    except BaseException:
        shards.abort()
        raise
    return files, rows, blank


#: Bad rows listed in a `ConvertResult` (all are counted).
MAX_REPORTED = 20


@dataclasses.dataclass(frozen=True, kw_only=True)
class BadRow:
    """A row that was not converted.

    Attributes:
      path: Input file.
      line: 1-based line number (CSV) or row number (Parquet, TFRecord) in that file.
      reason: What is wrong (column, value, expectation).
      unit: ``line`` (CSV/TSV inputs) or ``row`` (Parquet, TFRecord inputs).
    """

    path: str
    line: int
    reason: str
    unit: str = "line"

    def __str__(self) -> str:
        if self.unit == "line":
            return f"{self.path}:{self.line}: {self.reason}"
        return f"{self.path}: {self.unit} {self.line}: {self.reason}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvertResult:
    """What `convert` wrote.

    Attributes:
      paths: Output files, in order.
      schema: The schema of the output (given, preset or inferred).
      schema_path: Where the schema JSON was written (next to the data).
      format: ``parquet``, ``tfrecord`` or ``columnar``.
      rows: Rows written.
      skipped: Bad rows left out (``on_bad_rows="skip"``).
      bad_rows: The first `MAX_REPORTED` bad rows, with line numbers and reasons.
      blank_lines: Blank lines ignored.
      dropped_columns: Input columns the schema does not use (not written).
      delimiter: The field delimiter used (CSV inputs; empty otherwise).
      header: Whether the first line of the first input was a header.
      input_format: ``csv``, ``parquet`` or ``tfrecord``.
      manifest_path: The columnar ``manifest.json`` (``columnar`` output only).
    """

    paths: tuple[str, ...]
    schema: Schema
    schema_path: str
    format: str
    rows: int
    skipped: int = 0
    bad_rows: tuple[BadRow, ...] = ()
    blank_lines: int = 0
    dropped_columns: tuple[str, ...] = ()
    delimiter: str = ","
    header: bool = False
    input_format: str = "csv"
    manifest_path: str | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready summary."""
        return {
            "format": self.format,
            "rows": self.rows,
            "files": len(self.paths),
            "paths": list(self.paths),
            "schema_path": self.schema_path,
            "skipped": self.skipped,
            "bad_rows": [dataclasses.asdict(b) for b in self.bad_rows],
            "blank_lines": self.blank_lines,
            "dropped_columns": list(self.dropped_columns),
            "delimiter": self.delimiter,
            "header": self.header,
            "input_format": self.input_format,
            "manifest_path": self.manifest_path,
        }


class BadRowLog:
    """Where bad rows go: raised at once (``on_bad_rows="error"``) or counted, the first
    `MAX_REPORTED` kept with their reasons (``"skip"``).

    Args:
      on_bad_rows: ``error`` or ``skip``.
      unit: ``line`` (CSV/TSV inputs) or ``row`` (Parquet, TFRecord inputs).
    """

    def __init__(self, *, on_bad_rows: str, unit: str):
        self.on_bad_rows = on_bad_rows
        self.unit = unit
        self.skipped = 0
        self.reported: list[BadRow] = []

    def add(self, path: str, line: int, reason: str) -> None:
        """Record one bad row.

        Raises:
          DataError: with ``on_bad_rows="error"``, naming the file, the line (or row)
            and the reason.
        """
        if self.on_bad_rows == "error":
            where = f"{path}:{line}" if self.unit == "line" else f"{path}: row {line}"
            raise DataError(
                f"{where}: {reason} (pass on_bad_rows='skip' / --on-bad-rows skip "
                "to leave bad rows out and count them)"
            )
        self.skipped += 1
        if len(self.reported) < MAX_REPORTED:
            self.reported.append(BadRow(path=path, line=line, reason=reason, unit=self.unit))
