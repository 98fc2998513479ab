"""File formats, in the core: how each format is laid out, read and written, below the
sources that read it into pipelines and the converters and tools that use it.

- `tfinput._src.core.formats.csv`: CSV/TSV text (layout sniffing, the quote guard, text batches
  with line numbers), read by conversion and by schema inference.
- `tfinput._src.core.formats.parquet`: Parquet files (opening local paths and URIs, cached
  footers, record batches and row groups, writers).
- `tfinput._src.core.formats.tfrecord`: TFRecord files of ``tf.train.Example`` (file names and
  compression, native record reading and counting, writers, the vectorized example
  encoder).

Every part of tfinput that reads or writes one of these formats (the sources,
conversion, schema inference, datagen, the test helpers) goes through its module here.

Columnar pre-batched records are one package of their own, `tfinput._src.core.columnar`
(layout, manifest, writer, read path, source, offline verification); the user-facing API
is `tfinput.columnar_records` and `tfinput.columnar`.
"""
