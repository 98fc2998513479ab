"""File formats, in the core: how each format is laid out, read and written, below the
sources that read it into pipelines and the converters and tools that use it.

- `tfinput.formats.columnar`: columnar pre-batched records (the layout, the manifest,
  the writer); the user-facing API is `tfinput.columnar_records` and
  `tfinput.columnar`.
- `tfinput.formats.csv`: CSV/TSV text (layout sniffing, the quote guard, text batches
  with line numbers), read by conversion and by schema inference.
"""
