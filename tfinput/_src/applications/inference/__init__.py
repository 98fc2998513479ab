"""Schema inference from Parquet/Arrow schemas, sampled tf.train.Example records and
CSV/TSV text: the one engine behind ``tfinput schema infer`` and ``tfinput convert``.

    result = tfinput.infer_schema("data/*.parquet")       # or "data/*.csv"
    print(result.table())            # what was observed, column by column
    result.schema.to_json("schema.json")

Rules (the JSON is meant to be reviewed and edited; every decision that is not obvious
is explained in the column's ``note``):

- float scalars → `Dense`; fixed-length float lists → `Dense` vectors;
- integer scalars → `Categorical` when the name looks like an id (``id``, ``*_id``,
  ``*Id``, ``C<n>``) or a value is beyond 2**53 (float64, hence a dense feature,
  would not hold it exactly), else `Dense` stored as int64 (counts); a column named
  like a target (`LABEL_NAMES`: ``label``, ``click``, ``target``, ``y``…) → `Label`;
- dense transforms from the observed values: non-negative values (or negatives at most
  1% of values, or none below -1) above `LARGE_VALUE` → ``clip`` at 0 then ``log1p``;
  other large magnitudes are left unscaled with a note (`tfinput.models.ranking_model`
  normalises its dense inputs);
- strings → hashed string `Categorical`;
- variable-length int or string lists → `MultiHot` with ``max_len`` = observed p99
  length; a float list whose row lengths always equal another list's → its weights;
- integer-id tables get ``vocabulary_size`` = observed max id + 1 with
  ``out_of_range: "modulo"`` (a sample: larger ids later are folded in, never an
  error); ids above `MAX_DIRECT_ROWS` are folded into ``4 × distinct values seen``
  rows; hashed tables get ``4 × distinct values seen``, rounded up to a power of two
  (or ``hash_buckets``);
- a ``-1`` "missing" marker in int ids is folded by ``out_of_range: "modulo"`` into a
  reserved id (``vocabulary_size - 1``, one row above the largest id seen); other
  negative int ids are never declared as int ids, which `tfinput check` rejects: CSV
  columns become hashed strings (each value keeps its own bucket), Parquet/TFRecord
  columns are skipped with a note saying how to fix them; list lengths are capped at
  `tfinput.schema.MAX_LEN`;
- CSV text: integer text stays int64 (``260.0`` too); integers beyond int64 make a
  string column (hashed), never a float one; a column with fewer than
  `NON_NUMERIC_TOLERANCE` (0.1%) non-numeric values stays numeric, and the note
  counts them (``1 of 10,000 values non-numeric, e.g. 'abc' at file:line``): they are
  left out of the statistics, and ``convert`` counts them as bad rows under its
  ``on_bad_rows`` policy; CSV categoricals always get a default (an empty field is a
  missing value);
- TFRecord keys are sorted by name, so the same records give the same schema;
- embedding dim = ``6 · rows^¼`` rounded to a multiple of 4, within [4, 128].

The package, one job per module: `tfinput._src.applications.inference._sample` (Parquet,
TFRecord and CSV sampling, the format of a file, typing text) and
`tfinput._src.applications.inference._decide` (the decisions above, column by column, and
the result: `Inference`, `ColumnStats`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from tfinput._src.applications.inference._decide import Inference, decide
from tfinput._src.applications.inference._sample import (
    format_of,
    sample_csv,
    sample_parquet,
    sample_tfrecord,
)
from tfinput._src.core.errors import SchemaError, SourceError


def infer_schema(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    sample_rows: int = 10_000,
    labels: Sequence[str] | None = None,
    format: str | None = None,
    list_columns: Mapping[str, str] | None = None,
    delimiter: str | None = None,
    header: bool | str = "auto",
    column_names: Sequence[str] | None = None,
    hash_buckets: int | None = None,
) -> Inference:
    """Infer a schema from Parquet, TFRecord or CSV/TSV files.

    ``tfinput convert`` infers with this function too, so ``tfinput schema infer
    data.csv`` and the ``schema.json`` that ``tfinput convert data.csv`` writes agree.

    Args:
      paths: Files, globs or directories.
      sample_rows: Rows sampled from the first files.
      labels: Column names to treat as labels (default: by name, see module doc).
      format: ``parquet``, ``tfrecord`` or ``csv``; by default from the file extension
        (``.parquet``/``.pq`` is Parquet, ``.tfrecord[s]``/``.tfr`` TFRecord,
        ``.csv``/``.tsv``/``.txt`` (optionally ``.gz``/``.bz2``) CSV; anything else is
        read as CSV if its first bytes are text, else as TFRecord).
      list_columns: CSV only: ``{column: item delimiter}`` of multi-valued columns.
      delimiter: CSV only: the field delimiter (default: sniffed).
      header: CSV only: ``"auto"``, True or False.
      column_names: CSV only: names of the columns of files without a header.
      hash_buckets: Rows of every hashed string table, and of folded int id tables;
        default: 4 x the distinct values seen, rounded up to a power of two.

    Raises:
      SourceError: no files; SchemaError: nothing usable found; DataError: a file that
      cannot be read in its format.
    """
    from tfinput._src.core.files import resolve_paths

    files = resolve_paths(paths, what="input")
    fmt = format or format_of(files[0])
    notes: dict[str, str] = {}
    csv_only = {
        "list_columns": list_columns,
        "delimiter": delimiter,
        "column_names": column_names,
        "header": None if header == "auto" else header,
    }
    if fmt != "csv" and any(v is not None for v in csv_only.values()):
        given = [k for k, v in csv_only.items() if v is not None]
        raise SourceError(f"{', '.join(given)}: CSV inputs only; {files[0]!r} is read as {fmt}")
    if fmt == "parquet":
        cols, rows = sample_parquet(files, sample_rows)
    elif fmt == "tfrecord":
        cols, rows = sample_tfrecord(files, sample_rows)
    elif fmt == "csv":
        cols, rows, notes = sample_csv(
            files,
            sample_rows,
            lists=dict(list_columns or {}),
            layout_args=dict(delimiter=delimiter, header=header, column_names=column_names),
        )
    else:
        raise SourceError(f"format: expected 'parquet', 'tfrecord' or 'csv', got {format!r}")
    if rows == 0:
        raise SchemaError(f"no records found in {len(files)} file(s), first {files[0]!r}")
    return decide(
        cols,
        rows=rows,
        files=files,
        label_names=set(labels) if labels is not None else None,
        text=fmt == "csv",
        notes=notes,
        hash_buckets=hash_buckets,
    )
