"""Deterministic synthetic data sets on disk: ``tfinput datagen``.

    from tfinput import datagen
    result = datagen.generate_files("data/criteo", preset="criteo-like", rows=1_000_000,
                                    files=8, format="tfrecord")
    pipeline = tfinput.tfrecord(result.paths, result.schema)

Rows are generated in fixed chunks of `CHUNK_ROWS`, chunk ``k`` from a seed derived
from ``(seed, k)``, with `tfinput.testing.generate`. So the same ``(preset, rows, seed)``
always gives the same rows, in the same order, whatever the number of files and
whichever format: a TFRecord and a Parquet data set generated with the same arguments
hold the same examples. TFRecord files are written with the vectorized tf.Example
encoder (`tfinput.testing.to_examples`), Parquet files with one row group per chunk.
The schema is written next to the data as ``schema.json``. The output is committed
whole at the end (`tfinput._src.core.files.StagedDir`): a killed run leaves none of it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tfinput._src.core.errors import ConfigError
from tfinput._src.core.files import StagedDir, check_writable
from tfinput._src.core.formats import parquet, tfrecord
from tfinput._src.core.schema import Categorical, Dense, Label, MultiHot, Schema, Table

#: Rows generated (and encoded) at a time; also the Parquet row-group size.
CHUNK_ROWS = 65_536

FORMATS = ("tfrecord", "parquet")


def _criteo_like() -> Schema:
    from tfinput._src.applications import testing

    return testing.criteo_like_schema()


def _criteo_like_weighted() -> Schema:
    from tfinput._src.applications import testing

    return testing.criteo_like_schema(weights=True)


def _small() -> Schema:
    from tfinput._src.applications import testing

    return testing.small_schema()


def wide_schema(features: int = 1_000) -> Schema:
    """A wide ad-ranking schema of ``features`` features: a tenth dense (``I1``...:
    non-negative counts, clipped at 0 and log1p), seven tenths single Zipf ids
    (``C1``...), a fifth multi-hot lists of 0-9 ids (``max_len`` 10, ``M1``...), over a
    tenth as many tables of 100,000 rows (dim 16), each shared by about nine features: the
    first fifth of the tables by the lists (combiner ``sum``), the rest by the single ids,
    round robin. ``wide_schema(1_000)`` is 100 dense, 700 single ids, 200 lists, 100 tables.

    Raises:
      ConfigError: fewer than 10 features, or not a multiple of 10.
    """
    if isinstance(features, bool) or not isinstance(features, int) or features < 10:
        raise ConfigError(f"datagen: a wide schema needs features >= 10, got {features!r}")
    if features % 10:
        raise ConfigError(f"datagen: wide schema features must be a multiple of 10, got {features}")
    n_dense, n_single, n_lists = features // 10, features * 7 // 10, features // 5
    n_tables = features // 10
    list_tables = [f"L{i + 1}" for i in range(max(1, n_tables // 5))]
    single_tables = [f"T{i + 1}" for i in range(n_tables - len(list_tables))]
    tables = [Table(name=t, vocabulary_size=100_000, dim=16) for t in single_tables]
    tables += [Table(name=t, vocabulary_size=100_000, dim=16, combiner="sum") for t in list_tables]
    out: list[Any] = [Dense(name=f"I{i + 1}", clip=(0.0, None), log1p=True) for i in range(n_dense)]
    out += [
        Categorical(name=f"C{i + 1}", table=single_tables[i % len(single_tables)])
        for i in range(n_single)
    ]
    out += [
        MultiHot(name=f"M{i + 1}", table=list_tables[i % len(list_tables)], max_len=10)
        for i in range(n_lists)
    ]
    return Schema(features=tuple(out), tables=tuple(tables), labels=(Label(name="label"),))


#: Named schemas: ``criteo-like`` (13 dense, 26 single Zipf ids, 4 multi-hot lists of
#: 0-19 ids), ``criteo-like-weighted`` (the same with per-id weights on the lists),
#: ``small`` (every feature kind, for tests), ``wide`` (1,000 features: 100 dense, 700
#: single ids, 200 multi-hot lists of 0-9 ids, 100 tables; `wide_schema`) and
#: ``wide-3000`` (3,000 features in the same proportions, 300 tables).
PRESETS: dict[str, Callable[[], Schema]] = {
    "criteo-like": _criteo_like,
    "criteo-like-weighted": _criteo_like_weighted,
    "small": _small,
    "wide": wide_schema,
    "wide-3000": lambda: wide_schema(3_000),
}


def preset_schema(name: str) -> Schema:
    """The schema of a named preset.

    Raises:
      ConfigError: unknown preset name.
    """
    if name not in PRESETS:
        raise ConfigError(f"datagen: unknown preset {name!r}; expected one of {sorted(PRESETS)}")
    return PRESETS[name]()


@dataclasses.dataclass(frozen=True, kw_only=True)
class DatagenResult:
    """What `generate_files` wrote.

    Attributes:
      paths: Data files, in order.
      schema: The schema of the data.
      schema_path: Where the schema JSON was written.
      rows: Rows written.
      bytes: Total size of the data files.
      format: ``tfrecord`` or ``parquet``.
    """

    paths: tuple[str, ...]
    schema: Schema
    schema_path: str
    rows: int
    bytes: int
    format: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "rows": self.rows,
            "files": len(self.paths),
            "bytes": self.bytes,
            "paths": list(self.paths),
            "schema_path": self.schema_path,
        }


def _chunk_seed(seed: int, chunk: int) -> int:
    # int() first: numpy 1.x refuses to shift a numpy uint64 by a Python int.
    return int(np.random.SeedSequence([seed, chunk]).generate_state(1, np.uint64)[0]) >> 1


def _chunk(schema: Schema, seed: int, k: int, rows: int, chunk_rows: int) -> Any:
    from tfinput._src.applications import testing

    start = k * chunk_rows
    n = min(chunk_rows, rows - start)
    cols = testing.generate(schema, n, seed=_chunk_seed(seed, k))
    if "row_id" in cols.values:
        cols.values["row_id"] = cols.values["row_id"] + start
    return cols


def _check_arguments(*, format: str, rows: int, files: int, chunk_rows: int) -> None:
    """Raise `ConfigError` for arguments `generate_files` cannot write."""
    if format not in FORMATS:
        raise ConfigError(f"datagen: format must be one of {list(FORMATS)}, got {format!r}")
    for name, value in (("rows", rows), ("files", files), ("chunk_rows", chunk_rows)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"datagen: {name} must be an int >= 1, got {value!r}")
    if files > rows:
        raise ConfigError(f"datagen: {files} files for {rows} rows leaves files empty")


def _format_writer(
    format: str, paths: list[str], schema: Schema, seed: int, rows: int, chunk_rows: int
) -> tuple[Callable[[int], Any], Callable[[Any, Any], None]]:
    """``(open file i, write columns to a writer)`` for ``format``."""
    from tfinput._src.applications import testing

    def open_file(i: int) -> Any:
        if format == "tfrecord":
            return tfrecord.writer(paths[i])
        first = testing.to_arrow(_chunk(schema, seed, 0, min(rows, 16), chunk_rows))
        return parquet.writer(paths[i], first.schema)

    def write(writer: Any, cols: Any) -> None:
        if format == "tfrecord":
            for record in testing.to_examples(cols):
                writer.write(record)
        else:
            writer.write_table(testing.to_arrow(cols), row_group_size=chunk_rows)

    return open_file, write


def _write_rows(
    paths: list[str],
    schema: Schema,
    *,
    format: str,
    seed: int,
    rows: int,
    chunk_rows: int,
    progress: Callable[[int, int], None] | None,
) -> None:
    """Generate the rows chunk by chunk and write them, split evenly over ``paths``."""
    files = len(paths)
    bounds = np.linspace(0, rows, files + 1).astype(np.int64).tolist()
    writer: Any = None
    current = -1
    open_file, write = _format_writer(format, paths, schema, seed, rows, chunk_rows)
    try:
        for k in range((rows + chunk_rows - 1) // chunk_rows):
            cols = _chunk(schema, seed, k, rows, chunk_rows)
            lo, hi = k * chunk_rows, k * chunk_rows + cols.rows
            for i in range(files):
                a, b = max(lo, bounds[i]), min(hi, bounds[i + 1])
                if a >= b:
                    continue
                if i != current:
                    if writer is not None:
                        writer.close()
                    writer, current = open_file(i), i
                write(writer, cols.row_slice(a - lo, b - lo))
            if progress is not None:
                progress(hi, rows)
    finally:
        if writer is not None:
            writer.close()


def generate_files(
    out_dir: str | os.PathLike[str],
    *,
    preset: str | None = "criteo-like",
    schema: Schema | None = None,
    rows: int,
    files: int = 1,
    format: str = "tfrecord",
    seed: int = 0,
    prefix: str = "part",
    chunk_rows: int = CHUNK_ROWS,
    progress: Callable[[int, int], None] | None = None,
) -> DatagenResult:
    """Write ``rows`` synthetic rows as ``files`` TFRecord or Parquet files.

    Args:
      out_dir: Output directory (created). Existing files of the same names are
        overwritten. The files are written into a hidden staging directory beside it
        and put in place together, ``schema.json`` included, once every one is written
        and flushed to disk: a run that stops early leaves no partial output.
      preset: A name from `PRESETS`; ignored when ``schema`` is given.
      schema: Generate data for this schema instead of a preset.
      rows: Total rows, split evenly over the files.
      files: Number of files. More files let readers interleave; each file should
        still hold many batches.
      format: ``tfrecord`` (tf.train.Example records) or ``parquet``.
      seed: Random seed; the same arguments always write the same rows.
      prefix: File name prefix (``{prefix}-00000-of-00008.tfrecord``).
      chunk_rows: Rows generated at a time (part of the data's identity: the same
        seed with another chunk size gives other rows). Memory grows with it.
      progress: Called as ``progress(rows_done, rows)`` after each chunk.

    Returns:
      A `DatagenResult`.

    Raises:
      ConfigError: unknown preset or format, non-positive rows/files, or ``out_dir``
        cannot be written (checked before any row is generated).
      OutputError: the disk filled up (nothing is left at ``out_dir``).
    """
    _check_arguments(format=format, rows=rows, files=files, chunk_rows=chunk_rows)
    if schema is None:
        if preset is None:
            raise ConfigError("datagen: give a preset name or a schema")
        schema = preset_schema(preset)
    check_writable(out_dir, what="datagen: output", directory=True)
    out = Path(out_dir)
    ext = ".tfrecord" if format == "tfrecord" else ".parquet"
    names = [f"{prefix}-{i:05d}-of-{files:05d}{ext}" for i in range(files)]
    replaces = (*names, "schema.json")
    with StagedDir(out, replaces=lambda name: name in replaces, what="datagen: output") as stage:
        staged = [str(stage.path / name) for name in names]
        _write_rows(
            staged,
            schema,
            format=format,
            seed=seed,
            rows=rows,
            chunk_rows=chunk_rows,
            progress=progress,
        )
        size = sum(os.path.getsize(p) for p in staged)
        schema.to_json(str(stage.path / "schema.json"))
        stage.commit()
    return DatagenResult(
        paths=tuple(str(out / name) for name in names),
        schema=schema,
        schema_path=str(out / "schema.json"),
        rows=rows,
        bytes=size,
        format=format,
    )
