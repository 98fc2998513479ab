"""CSV/TSV to sharded Parquet or TFRecord, streaming: ``tfinput convert``.

    from tfinput._src.applications.convert import convert
    result = convert(["day_0.tsv"], "data/criteo", to="parquet", preset="criteo")
    pipeline = tfinput.parquet(result.paths, result.schema)

How it reads:

- **Streaming, bounded memory.** Each input is read with pyarrow's streaming CSV
  reader (`pyarrow.csv.open_csv`) in blocks of `BLOCK_SIZE` bytes, single-threaded so
  that rows arrive in file order, and every column is given an explicit type (text),
  so nothing is inferred from the first block and nothing is held beyond one block
  plus one output row group. Inputs may be larger than RAM. ``.gz`` and ``.bz2``
  inputs are decompressed on the fly.
- **Layout.** The delimiter is sniffed from the first lines unless given (tab, comma,
  semicolon or pipe, whichever splits the first lines into the same number of fields,
  respecting quotes). ``header="auto"`` takes the first line as a header when all its
  fields are non-numeric and a later line holds a number (or, in an all-text file,
  when its fields look like names that do not recur in their columns); pass
  ``header=True/False`` when a file is ambiguous. Without a header, names
  come from ``column_names``, the preset (Criteo's raw TSV has none: ``label, I1..I13,
  C1..C26``) or default to ``f0, f1, ...``.
- **Values.** Fields are text first and converted by tfinput, column by column, to the
  schema's types; an empty field is a missing value (``null`` in Parquet, an absent
  key in a tf.Example) which the pipeline fills with the feature's default. Integer
  columns also accept integral floats (``260.0``), as CSV writers that went through
  floats produce. A multi-valued column (``Comedy|Drama``) is split on its delimiter
  (``list_columns``); empty items are dropped and an empty field is an empty list.
  Quoted fields may contain the delimiter but not a line break (each record must be
  one line, which is what keeps line numbers exact).

Bad rows: a row with the wrong number of fields (a header mismatch, a truncated last
line), a value that does not parse as its column's type, a NaN or infinite dense value,
a missing value where the schema has no default, or an integer id outside its table.
With ``on_bad_rows="error"`` (the default) the first one raises `DataError` naming
the file, the line number, the column and the value. With ``"skip"`` bad rows are
left out and counted; the result lists the first `MAX_REPORTED` with their reasons.
Blank lines are ignored (counted as ``blank_lines``).

Presets (table sizes are only schema metadata: string ids are stored as text and
hashed by the pipeline, so a table can be resized without converting again):

- ``criteo``: ``label`` (int64); ``I1..I13`` dense counts stored as int64, clipped to
  ``[0, inf)`` then ``log1p`` (Criteo has -1s), missing = 0; ``C1..C26`` 8-hex-digit
  strings hashed into ``hash_buckets`` rows each (default 100,000: 26 tables of dim 16
  take 166 MB; the full data set has up to ~10M distinct values per column, and MLPerf
  DLRM caps tables at 40M), missing = ``""`` (its own bucket).
- ``movielens`` (the MovieLens-1M ``ratings + users + movies`` join): ``rating`` label
  (float32); ``user_id`` and ``movie_id`` int64 ids (tables of 300,000 rows, enough for
  every MovieLens release up to 32M); ``genres`` a string multi-hot list split on ``|``
  (``max_len`` 6, 16,384 buckets, so the 18 genres collide with probability < 1%);
  ``gender`` (1,024 buckets), ``zip`` and ``title`` strings (``hash_buckets``); ``age``
  (< 100) and ``occupation`` (0-20) int ids. ``timestamp`` is not a feature and is
  dropped (split train and test by time before converting).

Without a preset or schema, the schema is inferred from the first ``infer_rows`` rows
by `tfinput.infer_schema`, the engine behind ``tfinput schema infer``, so both give the
same schema for the same file (its module docstring has the rules: integers stay int64
and become `Categorical` ids when named like ids or beyond 2**53, text becomes hashed
string `Categorical`, large non-negative counts get ``clip`` + ``log1p``, a column with
fewer than 0.1% non-numeric values stays numeric, ...). A later value that does not fit
the inferred type is a bad row: pass a schema (edit the written ``schema.json``) to
decide otherwise.

Unbalanced quotes: a line that opens a quoted field and does not close it is a bad row
on its own (reason ``unbalanced quote``); it cannot swallow the lines after it.
Unreadable inputs (a truncated ``.gz``, a binary or non-UTF-8 file) raise `DataError`
naming the file; nothing is written.

The package, one job per module: `tfinput._src.applications.convert.readers` (inputs,
formats, CSV layout; CSV, Parquet and TFRecord blocks), `tfinput._src.applications.convert.columns`
(presets; which columns, how converted; text or typed columns to output types, bad rows),
`tfinput._src.applications.convert.writers` (output shards), `tfinput._src.applications.convert.options`
(the option groups `tfinput convert`'s flags map onto), `tfinput._src.applications.convert.run`
(`convert` and its result) and `tfinput._src.applications.convert.ray_engine` (``--engine ray``).
"""
